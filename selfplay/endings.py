"""How a run's self-play games ended, over the run: `alphazero games`.

Every shard keeps the list of its games (result, the rule that ended each,
plies, the learner step of the weights that played it), and shards are named
by their write time, so the games can be read back in the order they were
written without decompressing a sample. Split into equal parts by count, they
show a run that collapses into repetition draws (a search that loops, a value
target that says draw everywhere) as a rising repetition share, and a run that
learns as shorter, more decisive games.

Example::

    endings, unreadable = read_endings(Path("runs/tiny/selfplay"))
    print(EndingsReport.of(endings, parts=10).table())
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from alphazero.chess.pgn import REPETITIONS
from alphazero.errors import UserError

DRAW = "1/2-1/2"
T = TypeVar("T")


@dataclass(frozen=True)
class Ending:
    """One self-play game's end, as its shard's game list says."""

    result: str         # "1-0", "0-1" or "1/2-1/2"
    termination: str    # the rule's name (alphazero.chess.pgn): checkmate, threefold_repetition, ply_limit, ...
    plies: int
    weights_step: int   # the learner step of the weights that played the game's last move


def read_endings(selfplay: Path) -> tuple[list[Ending], int]:
    """Gets the ending of every game in a run's shard folder, oldest first (a shard's name starts with its
    write time), and the count of shards skipped as unreadable (one being written, a damaged file)."""
    from alphazero.store.shards import ShardError, list_shards, read_shard_games  # numpy: not at parse time

    endings: list[Ending] = []
    unreadable = 0
    for path in list_shards(selfplay):
        try:
            endings.extend([Ending(str(game.get("result", "")), str(game.get("termination", "")),
                                   int(game.get("plies", 0)), int(game.get("weights_step", 0)))
                            for game in read_shard_games(path)])
        except (ShardError, TypeError, ValueError):  # unreadable, or a game list of another program's making
            unreadable += 1
    return endings, unreadable


def is_draw(ending: Ending) -> bool:
    return ending.result == DRAW


def is_repetition(ending: Ending) -> bool:
    return ending.termination in REPETITIONS


def share(endings: Sequence[Ending], kind: Callable[[Ending], bool]) -> float:
    """Gets the share of ``endings`` of that kind (0 for none)."""
    return sum(map(kind, endings)) / len(endings) if endings else 0.0


def split(endings: Sequence[T], parts: int) -> list[Sequence[T]]:
    """Splits the games (or anything), in order, into ``parts`` runs of equal count (the first ones one longer
    where the count does not divide); fewer parts when there are fewer games."""
    parts = min(parts, len(endings))
    size, extra = divmod(len(endings), parts) if parts else (0, 0)
    pieces: list[Sequence[T]] = []
    start = 0
    for index in range(parts):
        end = start + size + (index < extra)
        pieces.append(endings[start:end])
        start = end
    return pieces


@dataclass(frozen=True)
class PartSummary:
    """One stretch of the run's games: how many, the weights that played them, their length and ends."""

    games: int
    weights_steps: tuple[int, int]  # the lowest and the highest learner step of the weights that played them
    mean_plies: float
    white_wins: float               # shares of the games, 0..1
    draws: float
    black_wins: float
    repetition_draws: float
    ply_limit: float
    resigned: float
    checkmates: float

    @classmethod
    def of(cls, endings: Sequence[Ending]) -> PartSummary:
        steps = [ending.weights_step for ending in endings]
        return cls(
            games=len(endings),
            weights_steps=(min(steps), max(steps)) if steps else (0, 0),
            mean_plies=sum(ending.plies for ending in endings) / len(endings) if endings else 0.0,
            white_wins=share(endings, lambda e: e.result == "1-0"),
            draws=share(endings, is_draw),
            black_wins=share(endings, lambda e: e.result == "0-1"),
            repetition_draws=share(endings, is_repetition),
            ply_limit=share(endings, lambda e: e.termination == "ply_limit"),
            resigned=share(endings, lambda e: e.termination == "resignation"),
            checkmates=share(endings, lambda e: e.termination == "checkmate"),
        )

    def row(self, name: str) -> str:
        """Gets the part as a row of EndingsReport.table's table."""
        low, high = self.weights_steps
        return (f"| {name} | {self.games:,} | {low:,}..{high:,} | {self.mean_plies:.0f} | "
                f"{self.white_wins:.0%} / {self.draws:.0%} / {self.black_wins:.0%} | {self.repetition_draws:.0%} | "
                f"{self.ply_limit:.0%} | {self.resigned:.0%} | {self.checkmates:.0%} |")


@dataclass(frozen=True)
class EndingsReport:
    """The whole run's figures, each part's, and the count of every ending rule: what --json writes."""

    games: int
    unreadable_shards: int
    whole: PartSummary
    parts: list[PartSummary]
    terminations: dict[str, int]   # most frequent first

    @classmethod
    def of(cls, endings: Sequence[Ending], parts: int, unreadable: int = 0) -> EndingsReport:
        return cls(games=len(endings), unreadable_shards=unreadable, whole=PartSummary.of(endings),
                   parts=[PartSummary.of(part) for part in split(endings, parts)],
                   terminations=dict(Counter(ending.termination for ending in endings).most_common()))

    def table(self) -> str:
        """Gets the report as a Markdown table, a row a part then the whole run, and the rules' counts."""
        header = ("| part | games | weights' steps | plies (mean) | white / draw / black | by repetition | "
                  "ply limit | resigned | checkmate |")
        lines = [header, "|" + "---|" * (header.count(" | ") + 1)]
        lines += [part.row(f"{index} of {len(self.parts)}") for index, part in enumerate(self.parts, start=1)]
        lines.append(self.whole.row("whole run"))
        total = max(1, self.games)
        lines += ["", "Ended by: " + ", ".join(f"{name or 'unknown'} {count:,} ({count / total:.1%})"
                                               for name, count in self.terminations.items())]
        return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from alphazero.store.rundir import DEFAULT_RUN_DIR

    parser.add_argument("--run", type=Path, default=DEFAULT_RUN_DIR,
                        help=f"the run directory, whose selfplay/ folder holds the games (default {DEFAULT_RUN_DIR})")
    parser.add_argument("--parts", type=int, default=10,
                        help="split the games, in the order they were written, into this many parts of equal "
                             "count (default 10: the first tenth to the last)")
    parser.add_argument("--json", dest="json_path", default=None, metavar="FILE",
                        help="also write the figures as JSON to FILE")


def run(args: argparse.Namespace) -> None:
    from alphazero.store.rundir import atomic_write_text

    run_dir: Path = args.run
    if args.parts < 1:
        raise UserError(f"--parts must be at least 1, got {args.parts}")
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    selfplay = run_dir / "selfplay"
    endings, unreadable = read_endings(selfplay)
    if not endings:
        raise UserError(f"{selfplay}: no self-play games (a run's games are its shards there)"
                        + (f"; {unreadable} shards could not be read" if unreadable else ""))
    report = EndingsReport.of(endings, args.parts, unreadable)
    print(f"{run_dir}: {len(endings):,} self-play games, oldest first"
          + (f" ({unreadable} unreadable shards skipped)" if unreadable else ""))
    print()
    print(report.table())
    if args.json_path:
        try:
            atomic_write_text(Path(args.json_path), json.dumps(dataclasses.asdict(report), indent=1) + "\n")
        except OSError as error:
            raise UserError(f"cannot write {args.json_path}: {error.strerror or error}") from None
        print(f"\nwrote {args.json_path}")
