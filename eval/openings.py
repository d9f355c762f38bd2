"""The opening suite: short, common, balanced lines that start match games.

Matches between deterministic agents would repeat one game over and over;
starting each pair of games from a different book line gives variety, and
playing every line with both colours cancels its bias.

The suite lives in `openings.txt` beside this module, one line per opening::

    Ruy Lopez, Berlin Defence | e4 e5 Nf3 Nc6 Bb5 Nf6 O-O Nxe4

Move numbers (`1.`, `3...`) may be written and are skipped. Text after `#`
is a comment (so write mates without their `#`; no book line needs one) and
blank lines are skipped.

Opening books as engine testers use them (cutechess-cli, fastchess) load the
same way, by their file name's suffix:

- ``.epd``: one position per line (python-chess's ``Board.from_epd``; the
  ``id`` operation names it, else its line number); games start from it;
- ``.pgn``: each game's main line, from its start (a ``FEN`` header
  included), named by its ``Opening`` header (else ``Event``), with its
  number when an earlier game had the same name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import chess

from alphazero.errors import UserError

DEFAULT_SUITE = "openings.txt"
"""The file name of the packaged suite, next to this module."""

_MOVE_NUMBER = re.compile(r"\d+\.(\.\.)?")


class OpeningError(UserError, ValueError):
    """A line of an opening file that does not parse; the message names the file and line."""


@dataclass(frozen=True)
class Opening:
    """A named book line: `moves` from `start_fen` (the initial position, unless the book gives a
    position), and the FEN they reach."""

    name: str
    moves: list[chess.Move]
    fen_after: str
    start_fen: str = chess.STARTING_FEN

    def board(self) -> chess.Board:
        """Returns a new board at the end of the line, with the moves on its move stack."""
        board = chess.Board(self.start_fen)
        for move in self.moves:
            board.push(move)
        return board


def parse_opening(line: str) -> Opening:
    """Parses `Name | SAN moves` into an Opening, checking every move.

    Raises ValueError saying what is wrong (no `|`, no name, no moves, an
    illegal or ambiguous move with the position it was tried in, a line that
    ends the game).
    """
    name, sep, san_moves = line.partition("|")
    name = name.strip()
    if not sep or not name or not san_moves.split():
        raise ValueError("expected 'Name | SAN moves', e.g. 'Scotch Game | e4 e5 Nf3 Nc6 d4'")
    board = chess.Board()
    tokens = [t for t in san_moves.split() if not _MOVE_NUMBER.fullmatch(t)]
    for ply, san in enumerate(tokens, start=1):
        try:
            board.push_san(san)
        except ValueError as exc:
            raise ValueError(f"ply {ply}: {san!r} is not a legal move in {board.fen()} ({exc})") from None
    if board.is_game_over(claim_draw=True):
        raise ValueError(f"the line ends the game ({board.result(claim_draw=True)})")
    return Opening(name, list(board.move_stack), board.fen())


def _suite_text(path: str | Path | None) -> tuple[str, str]:
    """Returns (text, a name for messages) of the given file, or of the packaged suite."""
    if path is None:
        path = Path(__file__).with_name(DEFAULT_SUITE)
    try:
        return Path(path).read_text(encoding="utf-8"), str(path)
    except OSError as exc:
        raise UserError(f"cannot read the opening file {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"the opening file {str(path)!r} is not a text file (PGN, EPD or one line of moves "
                        f"each)") from None


def _epd_opening(line: str, number: int) -> Opening:
    """Parses one EPD line into an Opening that starts from its position. Raises ValueError."""
    board, operations = chess.Board.from_epd(line)
    status = board.status()
    if status != chess.STATUS_VALID:
        raise ValueError(f"not a legal position ({status!r})")
    if board.is_game_over(claim_draw=True):
        raise ValueError(f"the position has ended the game ({board.result(claim_draw=True)})")
    name = operations.get("id")
    return Opening(str(name) if name else f"EPD line {number}", [], board.fen(), board.fen())


def _epd_openings(text: str, source: str) -> list[Opening]:
    openings: list[Opening] = []
    seen: dict[object, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            opening = _epd_opening(line, number)
            _check_new(opening, seen, number)
        except ValueError as exc:
            raise OpeningError(f"{source}, line {number}: {line!r}: {exc}") from None
        openings.append(opening)
    return openings


def _pgn_openings(text: str, source: str) -> list[Opening]:
    import io

    import chess.pgn

    openings: list[Opening] = []
    seen: dict[object, int] = {}
    handle = io.StringIO(text)
    while True:
        game = chess.pgn.read_game(handle)
        if game is None:
            break
        number = len(openings) + 1
        if game.errors:
            raise OpeningError(f"{source}, game {number}: {game.errors[0]}")
        board = game.end().board()
        label = game.headers.get("Opening") or game.headers.get("Event") or "PGN game"
        name = label if ("name", label) not in seen else f"{label} #{number}"  # books repeat their Event
        opening = Opening(name, list(board.move_stack), board.fen(), game.board().fen())
        try:
            if board.is_game_over(claim_draw=True):
                raise ValueError(f"the line ends the game ({board.result(claim_draw=True)})")
            _check_new(opening, seen, number)
        except ValueError as exc:
            raise OpeningError(f"{source}, game {number}: {exc}") from None
        openings.append(opening)
    return openings


def load_openings(path: str | Path | None = None) -> list[Opening]:
    """Loads and checks an opening suite (or an EPD or PGN book, by its suffix); the packaged
    `openings.txt` when path is None.

    Example::

        >>> suite = load_openings()
        >>> suite[0].name, len(suite[0].moves)
        ('Ruy Lopez, Morphy Defence', 10)

    Raises OpeningError (a UserError and ValueError) naming the file, the line
    number and the line for a line that does not parse or repeats an earlier
    name or move sequence, or when the file holds no openings; UserError if the
    file cannot be read.
    """
    text, source = _suite_text(path)
    suffix = Path(source).suffix.lower()
    if suffix in (".epd", ".pgn"):
        book = (_epd_openings if suffix == ".epd" else _pgn_openings)(text, source)
        if not book:
            raise OpeningError(f"{source} holds no openings")
        return book
    openings: list[Opening] = []
    seen: dict[object, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            opening = parse_opening(line)
            _check_new(opening, seen, number)
        except ValueError as exc:
            raise OpeningError(f"{source}, line {number}: {line!r}: {exc}") from None
        openings.append(opening)
    if not openings:
        raise OpeningError(f"{source} holds no openings (expected lines of 'Name | SAN moves')")
    return openings


def _check_new(opening: Opening, seen: dict[object, int], number: int) -> None:
    """Raises ValueError if the opening's name or moves appeared on an earlier line; records both."""
    line = ("moves", opening.start_fen, tuple(opening.moves))
    for key, what in ((("name", opening.name), "name"), (line, "move sequence" if opening.moves else "position")):
        if key in seen:
            raise ValueError(f"the same {what} as line {seen[key]}")
        seen[key] = number


OPENING_ORDERS = ("sequential", "random")


def ordered_openings(openings: list[Opening], order: str, seed: int) -> list[Opening]:
    """Puts a book in the order a match plays it: as written ('sequential') or shuffled by ``seed``
    ('random', as cutechess-cli's ``order=random``). Raises UserError for another order."""
    if order not in OPENING_ORDERS:
        raise UserError(f"the openings' order is one of {', '.join(OPENING_ORDERS)}, got {order!r}")
    if order == "sequential":
        return list(openings)
    import random

    shuffled = list(openings)
    random.Random(seed).shuffle(shuffled)
    return shuffled
