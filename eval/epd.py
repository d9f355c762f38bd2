"""`alphazero epd FILE`: an EPD test suite, scored as engine authors score them.

Each line is a position with operations (python-chess's ``Board.from_epd``):

- ``bm`` (best moves, SAN): the position is *found* when the player's move is one of them;
- ``am`` (avoid moves): found when the player's move is none of them;
- points, as the Strategic Test Suite gives them: ``c0 "Rxb2=10, Rc1=4, Rd1=3"``
  (SAN=points), or ``c8 "10 4 3"`` with ``c9 "b2b7 c1c2 d1d2"`` (points and
  UCI moves, as the suite's "LAN" files write them). A move not listed scores 0;
  a position's most is its best move's points (10 in STS, so 15,000 for its
  1,500 positions). Without points, a found position scores 1 of 1.

``id`` names the position; the part before a final ``.NNN`` names its theme
(``STS(v1.0) Undermining.001`` is theme ``STS(v1.0) Undermining``), and the
report gives points and found moves per theme and in all.

Each position is searched as a new game (Agent.choose_fresh: ``ucinewgame``
for a UCI player, an empty tree for ours), so a position's answer does not
depend on the positions searched before it: the order of the file and
``concurrency`` change no score.

Example::

    positions = read_epd("eval/data/sts.epd", limit=100)
    with parse_player("search:400", run=run_dir) as player:
        report = score_epd(player, positions)
    print(report.points, report.max_points)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import chess

from alphazero.errors import UserError
from eval.agents import Agent

_POINTS = re.compile(r"^\s*(\S+?)\s*=\s*(\d+)\s*$")
_THEME = re.compile(r"^(.*?)[.\s]+\d+$")


@dataclass(frozen=True)
class EpdPosition:
    """One test position: its board, the moves it wants (``best``) or forbids (``avoid``), and
    each scored move's points."""

    name: str
    theme: str
    fen: str
    line: int
    best: tuple[chess.Move, ...] = ()
    avoid: tuple[chess.Move, ...] = ()
    points: dict[chess.Move, int] = field(default_factory=dict)

    @property
    def max_points(self) -> int:
        return max(self.points.values()) if self.points else 1

    def found(self, move: chess.Move) -> bool:
        """Whether the move is what the position asks: one of bm, none of am (and, with only points, a top
        scorer)."""
        if self.best:
            return move in self.best and move not in self.avoid
        if self.avoid:
            return move not in self.avoid
        return self.points.get(move, 0) == self.max_points

    def score(self, move: chess.Move) -> int:
        return self.points.get(move, 0) if self.points else int(self.found(move))


def _move_list(board: chess.Board, value: object, what: str) -> tuple[chess.Move, ...]:
    moves = value if isinstance(value, list) else [value]
    for move in moves:
        if not isinstance(move, chess.Move) or not board.is_legal(move):
            raise ValueError(f"{what} {move} is not a legal move")
    return tuple(moves)


def _points(board: chess.Board, operations: Mapping[str, object]) -> dict[chess.Move, int]:
    """Reads c0 "SAN=points, ..." or c8 "points ..." with c9 "uci ...". Raises ValueError."""
    points: dict[chess.Move, int] = {}
    if isinstance(operations.get("c8"), str) and isinstance(operations.get("c9"), str):
        values, moves = str(operations["c8"]).split(), str(operations["c9"]).split()
        if len(values) != len(moves):
            raise ValueError("c8 and c9 list different numbers of entries")
        for uci, value in zip(moves, values, strict=True):
            move = chess.Move.from_uci(uci)
            if not board.is_legal(move):
                raise ValueError(f"c9 move {uci} is not legal")
            points[move] = int(value)
        return points
    comment = operations.get("c0")
    if isinstance(comment, str) and "=" in comment:
        for item in comment.split(","):
            matched = _POINTS.match(item)
            if matched is None:
                raise ValueError(f"c0 entry {item.strip()!r} is not MOVE=POINTS")
            try:
                move = board.parse_san(matched.group(1))
            except ValueError:
                raise ValueError(f"c0 move {matched.group(1)!r} is not a legal move") from None
            points[move] = int(matched.group(2))
    return points


def parse_epd_line(text: str, line: int) -> EpdPosition:
    """Parses one EPD test line. Raises ValueError saying what is wrong."""
    board, operations = chess.Board.from_epd(text)
    if board.status() != chess.STATUS_VALID:
        raise ValueError("not a legal position")
    if not any(board.legal_moves):
        raise ValueError("the side to move has no legal move")
    best = _move_list(board, operations["bm"], "bm") if "bm" in operations else ()
    avoid = _move_list(board, operations["am"], "am") if "am" in operations else ()
    points = _points(board, operations)
    if not best and not avoid and not points:
        raise ValueError("no bm, am or points (c0, or c8 with c9): nothing to score")
    name = str(operations.get("id") or f"line {line}")
    theme = _THEME.match(name)
    return EpdPosition(name, theme.group(1).strip() if theme else name, board.fen(), line, best, avoid, points)


def read_epd(path: str | Path, *, limit: int | None = None,
             on_reject: Callable[[str], None] | None = None) -> list[EpdPosition]:
    """Reads an EPD test suite (the first ``limit`` positions).

    A line that does not parse is passed to ``on_reject`` as a message naming
    its number, and skipped; without ``on_reject`` it raises.

    Raises:
        UserError: the file cannot be read, holds no positions, or (without
            ``on_reject``) a line does not parse.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UserError(f"cannot read the EPD file {str(path)!r}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a text file") from None
    positions = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            positions.append(parse_epd_line(stripped, number))
        except (ValueError, KeyError) as error:
            message = f"{path}, line {number}: {stripped[:80]!r}: {error}"
            if on_reject is None:
                raise UserError(message) from None
            on_reject(message)
            continue
        if limit is not None and len(positions) >= limit:
            break
    if not positions:
        raise UserError(f"{path} holds no positions")
    return positions


@dataclass
class EpdResult:
    """The player's answer to one position."""

    name: str
    theme: str
    move: str
    found: bool
    points: int
    max_points: int


@dataclass(frozen=True)
class Tally:
    """Points and found positions of a group (a theme, or all)."""

    name: str
    points: int
    max_points: int
    found: int
    total: int


@dataclass
class EpdReport:
    """Every position's result, with totals in all and per theme."""

    player: str
    results: list[EpdResult]

    @property
    def points(self) -> int:
        return sum(result.points for result in self.results)

    @property
    def max_points(self) -> int:
        return sum(result.max_points for result in self.results)

    @property
    def found(self) -> int:
        return sum(result.found for result in self.results)

    @property
    def total(self) -> int:
        return len(self.results)

    def themes(self) -> list[Tally]:
        """Per theme, in the order themes first appear."""
        groups: dict[str, list[EpdResult]] = {}
        for result in self.results:
            groups.setdefault(result.theme, []).append(result)
        return [Tally(theme, sum(r.points for r in rows), sum(r.max_points for r in rows),
                      sum(r.found for r in rows), len(rows)) for theme, rows in groups.items()]

    def to_json(self) -> dict[str, object]:
        return {"player": self.player, "points": self.points, "max_points": self.max_points, "found": self.found,
                "total": self.total, "themes": [dataclasses.asdict(tally) for tally in self.themes()],
                "positions": [dataclasses.asdict(result) for result in self.results]}


def score_epd(player: Agent, positions: Sequence[EpdPosition], *, concurrency: int = 16,
              on_done: Callable[[EpdResult], object] | None = None) -> EpdReport:
    """Asks ``player`` for a move in every position (``concurrency`` positions a call, each a new game) and
    scores it."""
    if concurrency < 1:
        raise UserError(f"concurrency must be at least 1, got {concurrency}")
    results = []
    for start in range(0, len(positions), concurrency):
        batch = positions[start:start + concurrency]
        choices = player.choose_fresh([chess.Board(position.fen) for position in batch])
        for position, choice in zip(batch, choices, strict=True):
            result = EpdResult(position.name, position.theme, choice.move.uci(), position.found(choice.move),
                               position.score(choice.move), position.max_points)
            results.append(result)
            if on_done is not None:
                on_done(result)
    return EpdReport(player.name, results)
