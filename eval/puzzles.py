"""`alphazero puzzles FILE`: accuracy on Lichess puzzles, by puzzle rating, as ChessBench measures it.

The file is the Lichess puzzle database's CSV (https://database.lichess.org/#puzzles,
CC0) or any part of it: a header naming at least ``FEN``, ``Moves`` and
``Rating`` (and ``PuzzleId``, else a puzzle is named by its row), one
puzzle a row. ``FEN`` is the position before the opponent's move; ``Moves``
is the solution in UCI, its first move the opponent's, then the solver's
and the opponent's replies in turn. ChessBench's ``puzzles.csv`` gives the
game's ``PGN`` instead of the FEN: its last position is the FEN.

Any player (eval.agents: ``search:400``, ``policy``, ``uci:...``,
``stockfish:...``) plays the solver's side. A puzzle is solved only if the
player finds every one of its moves (ChessBench's rule); a move that mates
counts wherever the solution mates, as on Lichess, since a mate in one may
have several. Puzzles are played many at once (``concurrency``): each step
asks the player for the move of every puzzle waiting for one in one call,
which is how a network player batches them. Every search is a new game
(Agent.choose_fresh: ``ucinewgame`` for a UCI player, an empty tree for
ours; the board still carries the puzzle's moves), so nothing carries from
one puzzle, or one move of a puzzle, to the next: the order of the file and
``concurrency`` change no answer.

Example::

    puzzles = read_puzzles("eval/data/lichess_puzzles_sample.csv", limit=100)
    with parse_player("search:400", run=run_dir) as player:
        report = solve_puzzles(player, puzzles)
    print(report.accuracy)
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import chess
import chess.pgn

from alphazero.chess.puzzles import puzzle_rows, solution_boards
from alphazero.errors import UserError
from eval.agents import Agent

REQUIRED_COLUMNS = ("Moves", "Rating")
POSITION_COLUMNS = ("FEN", "PGN")  # one of them: Lichess's FEN, or ChessBench's PGN of the game before it
DEFAULT_BUCKET_WIDTH = 200  # ChessBench's puzzle figure groups ratings in 200-point bins


@dataclass(frozen=True)
class Puzzle:
    """One puzzle: its id, rating, start position and solution (UCI, the opponent's move first)."""

    puzzle_id: str
    rating: int
    fen: str
    moves: tuple[str, ...]

    def start(self) -> chess.Board:
        """The board after the opponent's first move: the solver to move."""
        board = chess.Board(self.fen)
        board.push_uci(self.moves[0])
        return board


def _check_puzzle(puzzle: Puzzle) -> None:
    """Raises ValueError unless the FEN is legal and every move of the solution is legal in turn."""
    if len(puzzle.moves) < 2:
        raise ValueError("the solution needs the opponent's move and at least one of the solver's")
    solution_boards(puzzle.fen, puzzle.moves)


def _rating(row: dict[str, str]) -> int:
    """The row's rating; a row cut short (csv gives its missing fields as None) is said as such."""
    missing = [column for column in REQUIRED_COLUMNS if row.get(column) is None]
    if missing:
        raise ValueError(f"the row has too few fields: no {', '.join(missing)}")
    try:
        return int(row["Rating"])
    except ValueError:
        raise ValueError(f"its rating {row['Rating']!r} is not a whole number") from None


def _start_fen(row: dict[str, str]) -> str:
    """The row's position before the opponent's move: its FEN, or the end of its game's PGN."""
    if row.get("FEN"):
        return row["FEN"].strip()
    game = chess.pgn.read_game(io.StringIO(row.get("PGN") or ""))
    if game is None or game.errors:
        raise ValueError(f"bad PGN {(row.get('PGN') or '')[:60]!r}" + (f" ({game.errors[0]})" if game else ""))
    return game.end().board().fen()


def read_puzzles(path: str | Path, *, limit: int | None = None, rating_range: tuple[int, int] | None = None,
                 on_reject: Callable[[str], None] | None = None) -> list[Puzzle]:
    """Reads a Lichess puzzle CSV: the first ``limit`` puzzles (after the rating filter, lo..hi inclusive).

    A malformed row (or one with an illegal move) is passed to ``on_reject`` as
    a message naming its line and puzzle, and skipped; without ``on_reject`` it
    raises.

    Raises:
        UserError: the file cannot be read, its header lacks a required
            column, holds no puzzles, or (without ``on_reject``) a row is bad.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UserError(f"cannot read the puzzle file {str(path)!r}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a text file (a compressed .zst? decompress it first)") from None
    try:
        rows = puzzle_rows(io.StringIO(text), str(path), REQUIRED_COLUMNS, any_of=POSITION_COLUMNS)
    except ValueError as error:
        raise UserError(str(error)) from None
    puzzles: list[Puzzle] = []
    for puzzle_id, line, row in rows:
        try:
            puzzle = Puzzle(puzzle_id, _rating(row), _start_fen(row), tuple((row["Moves"] or "").split()))
            _check_puzzle(puzzle)
        except (ValueError, TypeError, AttributeError) as error:
            message = f"{path}, line {line} (puzzle {puzzle_id!r}): {error}"
            if on_reject is None:
                raise UserError(message) from None
            on_reject(message)
            continue
        if rating_range is not None and not rating_range[0] <= puzzle.rating <= rating_range[1]:
            continue
        puzzles.append(puzzle)
        if limit is not None and len(puzzles) >= limit:
            break
    if not puzzles:
        raise UserError(f"{path} holds no puzzles" + (" in the rating range" if rating_range else ""))
    return puzzles


@dataclass
class PuzzleResult:
    """How one puzzle went: solved or not, and the solver's moves played (its wrong move last)."""

    puzzle_id: str
    rating: int
    solved: bool
    played: list[str]


@dataclass(frozen=True)
class Bucket:
    """The puzzles whose rating lies in [low, high): solved of total."""

    low: int
    high: int
    solved: int
    total: int

    @property
    def accuracy(self) -> float:
        return self.solved / self.total if self.total else math.nan


@dataclass
class PuzzleReport:
    """Every puzzle's result, and the accuracy in all and per rating bucket."""

    player: str
    results: list[PuzzleResult]
    bucket_width: int = DEFAULT_BUCKET_WIDTH

    @property
    def solved(self) -> int:
        return sum(result.solved for result in self.results)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def accuracy(self) -> float:
        return self.solved / self.total if self.total else math.nan

    def buckets(self) -> list[Bucket]:
        """The rating buckets that hold puzzles, lowest first."""
        counts: dict[int, list[int]] = {}
        for result in self.results:
            low = result.rating // self.bucket_width * self.bucket_width
            counts.setdefault(low, [0, 0])
            counts[low][0] += result.solved
            counts[low][1] += 1
        return [Bucket(low, low + self.bucket_width, solved, total) for low, (solved, total) in sorted(counts.items())]

    def to_json(self) -> dict[str, object]:
        return {"player": self.player, "solved": self.solved, "total": self.total, "accuracy": self.accuracy,
                "buckets": [{**dataclasses.asdict(bucket), "accuracy": bucket.accuracy} for bucket in self.buckets()],
                "puzzles": [dataclasses.asdict(result) for result in self.results]}


class _Attempt:
    """A puzzle being solved: its board and how far into the solution it is."""

    def __init__(self, puzzle: Puzzle) -> None:
        self.puzzle = puzzle
        self.board = puzzle.start()
        self.next = 1  # the index in puzzle.moves of the solver's next move
        self.result = PuzzleResult(puzzle.puzzle_id, puzzle.rating, False, [])

    def answer(self, move: chess.Move) -> bool:
        """Plays the solver's move; returns True when the puzzle is over (solved or failed)."""
        expected = chess.Move.from_uci(self.puzzle.moves[self.next])
        self.result.played.append(move.uci())
        if not self.board.is_legal(move):
            return True  # an illegal answer fails the puzzle (match play would call it a bug)
        self.board.push(move)
        if self.board.is_checkmate():  # any mate solves, wherever the solution mates (Lichess's rule)
            self.result.solved = True
            return True
        if move != expected:
            return True
        self.next += 2
        if self.next >= len(self.puzzle.moves):
            self.result.solved = True
            return True
        self.board.push_uci(self.puzzle.moves[self.next - 1])  # the opponent's reply
        return False


def solve_puzzles(player: Agent, puzzles: Sequence[Puzzle], *, concurrency: int = 16,
                  on_done: Callable[[PuzzleResult], object] | None = None) -> PuzzleReport:
    """Lets ``player`` solve ``puzzles`` (``concurrency`` at a time); returns the report in file order.

    ``on_done``, when given, is called with each finished PuzzleResult (a progress bar).
    """
    if concurrency < 1:
        raise UserError(f"concurrency must be at least 1, got {concurrency}")
    pending = list(reversed(list(enumerate(puzzles))))
    running: list[tuple[int, _Attempt]] = []
    finished: dict[int, PuzzleResult] = {}
    while pending or running:
        while pending and len(running) < concurrency:
            index, puzzle = pending.pop()
            running.append((index, _Attempt(puzzle)))
        choices = player.choose_fresh([attempt.board.copy() for _, attempt in running])
        still = []
        for (index, attempt), choice in zip(running, choices, strict=True):
            if attempt.answer(choice.move):
                finished[index] = attempt.result
                if on_done is not None:
                    on_done(attempt.result)
            else:
                still.append((index, attempt))
        running = still
    return PuzzleReport(player.name, [finished[index] for index in range(len(puzzles))])
