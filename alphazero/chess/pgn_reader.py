"""Chess games from PGN files as training samples: the mainline's positions, moves, evaluations and result.

Files may be plain text or compressed (``.gz``, ``.bz2``, ``.zst``); Zstandard
is read with the ``zstandard`` module when it is installed, else through the
``zstd`` program, else refused with a message saying how to get either.

Games are read with python-chess and a visitor that keeps the mainline only:
variations are skipped unparsed (their comments with them), NAGs are
ignored, and each mainline move keeps the text of the comments after it
(several are joined with a space, as python-chess joins them; a comment
before the first move belongs to no move). A game is skipped, with its
reason counted, when it is not standard chess (a Variant header such as
"Chess960" or "fischerandom", Chess960 castling rights: ``SKIP_VARIANT``),
when it starts from a SetUp/FEN position other than chess.STARTING_FEN
(``SKIP_NONSTANDARD_START``), when python-chess reports an error in it (an
illegal or unparsable move, a bad FEN: ``SKIP_ILLEGAL``), when its result is
unknown (``*``: ``SKIP_NO_RESULT``), when it has no moves (``SKIP_EMPTY``) or
when its start position is one the chess core refuses (``SKIP_START``, counted
by the callers of ``game_record``).

Evaluations: ``comment_eval`` reads an engine's evaluation from a move's
comment, from White's point of view: first a ``[%eval ...]`` annotation
(Lichess: python-chess's ``chess.pgn.EVAL_REGEX``, read as
``chess.pgn.GameNode.eval()`` reads it: pawns, or ``#N`` a mate in N, negative
when Black mates), else TCEC's ``wv=`` token (pawns, or a mate ``M5``, ``#21``,
negative when Black mates: ``-M5``, ``-#21``). A mate in 0 is the side to
move being mated. A comment whose ``[%eval`` or ``wv=`` cannot be read
(``wv=abc``, ``[%eval x]``) has no evaluation and is counted in the game's
``malformed_evals``; the game is kept.

**The comment after move k evaluates the position after move k** (the
position of python-chess's node of move k, whose ``eval()`` reads it), so it
becomes the value target of the sample at ply k + 1, the position before
move k + 1. The first position, and every position whose preceding move has
no evaluation, take the game's result.

``game_record`` turns a game into the samples of alphazero.store.shards (one per
position before a mainline move): the compact input with the game's history,
as search encodes it; the policy target, the played move (optionally
smoothed over the legal moves); ``results``, the game's result for the side
to move; ``root_values``, the value target: ``2 w - 1`` of the side to move's
win probability w (alphazero.chess.scores.win_probability) where an
evaluation applies, else the result.

Example::

    with open_text("games.pgn.zst") as handle:
        for item in read_games(handle):
            if isinstance(item, PgnGame):
                record = game_record(item)
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import os
import re
import shutil
import subprocess
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TextIO

import chess
import chess.engine
import chess.pgn
import numpy as np

from alphazero.chess.scores import win_probability
from alphazero.errors import UserError
from mcts_ext import Board, ChessError
from mcts_ext.encode import encode_board, legal_move_indices, new_batch, uci_to_index

__all__ = [
    "READ_ERRORS", "SKIP_EMPTY", "SKIP_ILLEGAL", "SKIP_NONSTANDARD_START", "SKIP_NO_RESULT", "SKIP_START",
    "SKIP_VARIANT", "ZSTD_HINT", "PgnGame", "comment_eval", "game_record", "open_text", "read_games",
    "result_for_white",
]

SKIP_ILLEGAL = "illegal or unparsable move"
SKIP_VARIANT = "not standard chess"
SKIP_NO_RESULT = "no result"
SKIP_EMPTY = "no moves"
SKIP_START = "unsupported start position"
SKIP_NONSTANDARD_START = "non-standard start position"

ZSTD_HINT = "install the zstandard module (pip install zstandard) or the zstd program (apt-get install zstd)"
# Errors a damaged or truncated compressed file raises while it is read.
READ_ERRORS = (OSError, EOFError, ValueError, zlib.error, UnicodeError)

_RESULTS = {"1-0": 1, "0-1": -1, "1/2-1/2": 0}
_STANDARD_VARIANTS = {"", "standard", "chess", "normal", "from position", "fromposition"}

# An [%eval annotation, readable or not (EVAL_REGEX matches the readable ones).
_EVAL_TAG = re.compile(r"\[%eval(?![A-Za-z0-9_])")
# TCEC's wv= token and its value: pawns from White's side, or a mate (M or #) for White (+) or Black (-).
_WV_TOKEN = re.compile(r"(?<![A-Za-z0-9_.])wv=([^\s,;}\]]*)")
_WV_VALUE = re.compile(r"(?P<sign>[+-]?)(?:[M#](?P<mate>\d{1,10})|(?P<pawns>\d{1,10}(?:\.\d{0,10})?|\.\d{1,10}))")


# --- files --------------------------------------------------------------------------------------


def _zstd_stream(raw: IO[bytes], path: Path, stack: contextlib.ExitStack) -> IO[bytes]:
    """Decompresses a Zstandard file: the zstandard module, else the zstd program; UserError if neither."""
    try:
        import zstandard  # not a dependency: used when present
    except ImportError:
        program = shutil.which("zstd")
        if program is None:
            raise UserError(f"cannot read {path}: reading .zst files needs Zstandard; {ZSTD_HINT}") from None
        process = subprocess.Popen([program, "-dc", "--", str(path)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        stack.callback(_finish_zstd, process, path)
        assert process.stdout is not None
        return process.stdout
    return stack.enter_context(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True))


def _finish_zstd(process: subprocess.Popen[bytes], path: Path) -> None:
    """Reaps the zstd program; raises OSError when it failed on a file that was read to the end."""
    assert process.stdout is not None and process.stderr is not None
    finished = process.stdout.read(1) == b""  # false when the reader stopped early
    process.stdout.close()
    if not finished:
        process.kill()
    message = process.stderr.read().decode(errors="replace").strip()
    process.stderr.close()
    if process.wait() != 0 and finished:
        raise OSError(f"zstd failed on {path}: {message.splitlines()[-1] if message else 'exit status'}")


@contextlib.contextmanager
def open_text(path: str | os.PathLike[str]) -> Iterator[TextIO]:
    """Opens a PGN (or EPD) file as text, decompressing ``.gz``, ``.bz2`` and ``.zst`` by the name's suffix.

    Bytes that are not UTF-8 are replaced, not fatal. The raw file's position
    (compressed bytes read so far) is ``handle.raw_position()`` when known.

    Raises:
        UserError: the file is missing, a folder or unreadable, or a ``.zst``
            file with neither the zstandard module nor the zstd program.
        OSError, EOFError, zlib.error (READ_ERRORS): while reading, the
            compressed data are damaged or cut short.
    """
    path = Path(path)
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed by the stack below
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a directory, not a file") from None
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror or error}") from None
    with contextlib.ExitStack() as stack:
        stack.enter_context(raw)
        suffix = path.suffix.lower()
        stream: IO[bytes]
        if suffix == ".gz":
            stream = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))  # type: ignore[arg-type]  # IO[bytes]
        elif suffix == ".bz2":
            stream = stack.enter_context(bz2.BZ2File(raw, mode="rb"))
        elif suffix == ".zst":
            stream = _zstd_stream(raw, path, stack)
        else:
            stream = raw
        text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline=None)
        text.raw_position = raw.tell  # type: ignore[attr-defined]
        try:
            yield text
        finally:
            text.detach()  # the stack closes the streams, in order


# --- evaluations in comments --------------------------------------------------------------------


def comment_eval(comment: str, turn: chess.Color) -> tuple[chess.engine.PovScore | None, bool]:
    """Parses the evaluation in a move's comment: (the score from White's point of view or None, malformed).

    ``turn`` is the side to move after the move (it resolves a mate in 0:
    the side to move is mated). A ``[%eval ...]`` annotation is read as
    python-chess's ``GameNode.eval()`` reads it (the first readable one);
    without one, TCEC's ``wv=`` token. ``malformed`` is True when the comment
    has an ``[%eval`` or ``wv=`` that cannot be read; its score is then None.

    >>> comment_eval("d=34, sd=34, pv=Bc4 Nh6 d4, wv=1.38, R50=48,", chess.BLACK)
    (PovScore(Cp(+138), WHITE), False)
    >>> comment_eval("[%eval #-3] [%clk 0:03:00]", chess.WHITE)
    (PovScore(Mate(-3), WHITE), False)
    >>> comment_eval("book, mb=+0+0+0+0+0,", chess.WHITE), comment_eval("wv=abc", chess.WHITE)
    ((None, False), (None, True))
    """
    if _EVAL_TAG.search(comment):
        match = chess.pgn.EVAL_REGEX.search(comment)
        if match is None:
            return None, True
        mate, pawns, sign = match.group("mate"), match.group("cp"), ""
    else:
        token = _WV_TOKEN.search(comment)
        if token is None:
            return None, False
        match = _WV_VALUE.fullmatch(token.group(1))
        if match is None:
            return None, True
        mate, pawns, sign = match.group("mate"), match.group("pawns"), match.group("sign")
    try:
        if mate is not None:
            moves = int(sign + mate)
            if moves == 0:
                return chess.engine.PovScore(chess.engine.Mate(0), turn), False
            return chess.engine.PovScore(chess.engine.Mate(moves), chess.WHITE), False
        return chess.engine.PovScore(chess.engine.Cp(round(float(sign + pawns) * 100)), chess.WHITE), False
    except ValueError:  # more digits than int() reads (EVAL_REGEX does not bound a mate's)
        return None, True


# --- games --------------------------------------------------------------------------------------


@dataclass
class PgnGame:
    """A game's mainline: ``moves`` (UCI) from ``start_fen``, its ``result`` and headers.

    ``number`` counts the games of the file from 1, skipped ones included.
    ``evals[k]`` is the evaluation in the comment after move k, from White's
    point of view (None: none); ``malformed_evals`` counts the comments whose
    evaluation could not be read.
    """

    number: int
    start_fen: str
    moves: list[str]
    result: str
    headers: dict[str, str] = field(default_factory=dict)
    evals: list[chess.engine.PovScore | None] = field(default_factory=list)
    malformed_evals: int = 0


@dataclass
class _Collected:
    headers: dict[str, str] = field(default_factory=dict)
    start: chess.Board | None = None
    moves: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)  # the text of the comments after each move
    errors: list[str] = field(default_factory=list)
    variant: bool = False


class _MainlineVisitor(chess.pgn.BaseVisitor[_Collected]):
    """Collects headers, the start board, the mainline's moves and their comments; skips variations unparsed."""

    def begin_game(self) -> None:
        self.game = _Collected()

    def visit_header(self, tagname: str, tagvalue: str) -> None:
        self.game.headers[tagname] = tagvalue

    def end_headers(self) -> Any:
        if self.game.headers.get("Variant", "").strip().lower() not in _STANDARD_VARIANTS:
            self.game.variant = True
            return chess.pgn.SKIP  # python-chess then skips the movetext without parsing it
        return None

    def visit_board(self, board: chess.Board) -> None:
        if self.game.start is None:  # called again after every move; the first is the start
            self.game.start = board.copy(stack=False)
            self.game.variant = self.game.variant or type(board) is not chess.Board or board.chess960

    def begin_variation(self) -> Any:
        return chess.pgn.SKIP

    def visit_move(self, board: chess.Board, move: chess.Move) -> None:
        self.game.moves.append(move.uci())
        self.game.comments.append("")

    def visit_comment(self, comment: str) -> None:
        # Called after the move it follows (python-chess does not call it inside skipped variations).
        if self.game.comments:
            self.game.comments[-1] = " ".join(filter(None, [self.game.comments[-1], comment]))

    def handle_error(self, error: Exception) -> None:
        self.game.errors.append(str(error))

    def result(self) -> _Collected:
        return self.game


def read_games(handle: TextIO) -> Iterator[PgnGame | str]:
    """Reads every game of an open PGN file: a PgnGame, or the reason (a SKIP_* constant) it is skipped.

    Raises:
        READ_ERRORS: the file's compressed data are damaged or cut short.
    """
    number = 0
    while True:
        collected = chess.pgn.read_game(handle, Visitor=_MainlineVisitor)
        if collected is None:
            return
        number += 1
        result = collected.headers.get("Result", "*").strip()
        if collected.variant:
            yield SKIP_VARIANT
        elif collected.start is not None and collected.start.fen() != chess.STARTING_FEN:
            yield SKIP_NONSTANDARD_START
        elif collected.errors or collected.start is None:
            yield SKIP_ILLEGAL
        elif result not in _RESULTS:
            yield SKIP_NO_RESULT
        elif not collected.moves:
            yield SKIP_EMPTY
        else:
            game = PgnGame(number, collected.start.fen(), collected.moves, result, collected.headers)
            mover = collected.start.turn
            for comment in collected.comments:
                mover = not mover  # now the side to move after the move
                score, malformed = comment_eval(comment, mover) if comment else (None, False)
                game.evals.append(score)
                game.malformed_evals += malformed
            yield game


def result_for_white(result: str) -> int:
    """Gets a PGN result as White's score: 1, 0 or -1. Raises KeyError for '*' and other text."""
    return _RESULTS[result]


def game_record(game: PgnGame, *, smoothing: float = 0.0, game_id: str = "", use_evals: bool = True) -> dict[str, Any]:
    """Builds the shard record (alphazero.store.shards.shard_from_records) of a game's mainline.

    One sample per position before a move: the compact input with the game's
    history; the policy, ``1 - smoothing`` on the played move plus
    ``smoothing`` spread over every legal move; ``results``, the game's result
    for the side to move; ``root_values``, with ``use_evals`` the value of the
    evaluation after the previous move (``2 w - 1`` of the side to move's win
    probability w; see the module docstring) where there is one, else the
    result. The record's ``evals`` counts the samples valued by an evaluation.

    Raises:
        ValueError: the chess core refuses the start position or a move
            (python-chess accepted them; the message quotes the FEN).
    """
    try:
        board = Board(game.start_fen, ply_limit=None)
    except ChessError as error:
        raise ValueError(f"start position {game.start_fen!r}: {error}") from None
    count = len(game.moves)
    planes, scalars = new_batch(count)
    offsets = np.zeros(count + 1, dtype=np.int64)
    indices: list[np.ndarray] = []
    probs: list[np.ndarray] = []
    white_score = result_for_white(game.result)
    results = np.empty(count, dtype=np.int8)
    values = np.empty(count, dtype=np.float32)
    evaluated = 0
    for ply, uci in enumerate(game.moves):
        encode_board(board, planes, scalars, ply)
        legal = legal_move_indices(board)
        try:
            played = uci_to_index(board, uci)
            share = np.full(len(legal), smoothing / len(legal), dtype=np.float32)
            share[legal == played] += 1.0 - smoothing
            results[ply] = white_score if board.turn else -white_score
            score = game.evals[ply - 1] if use_evals and 0 < ply <= len(game.evals) else None
            if score is None:
                values[ply] = results[ply]
            else:
                values[ply] = 2.0 * win_probability(score.pov(bool(board.turn))) - 1.0
                evaluated += 1
            board.push_uci(uci)
        except ChessError as error:
            raise ValueError(f"move {ply + 1} ({uci}) of the game from {game.start_fen!r}: {error}") from None
        indices.append(legal.astype(np.int16))
        probs.append(share)
        offsets[ply + 1] = offsets[ply] + len(legal)
    return {
        "game_id": game_id,
        "start_fen": game.start_fen,
        "moves": list(game.moves),
        "result": game.result,
        "winner": {1: "white", -1: "black"}.get(white_score),
        "termination": "pgn",
        "plies": count,
        "planes": planes,
        "scalars": scalars,
        "plies_of_samples": np.arange(count, dtype=np.int16),
        "root_values": values,
        "policy_offsets": offsets,
        "policy_indices": np.concatenate(indices),
        "policy_probs": np.concatenate(probs),
        "results": results,
        "evals": evaluated,
    }
