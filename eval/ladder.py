"""The ladder: rungs below Stockfish's weakest level, each with an Elo that games on this project's machine measured.

A network that learns from zero spends its first hours far below Stockfish's
weakest level, where Stockfish alone cannot measure it: every game is lost.
The ladder's rungs fill that gap, from `random` up through mixes of random
moves and Fairy-Stockfish's negative skill levels to Stockfish 15.1 at
`UCI_Elo` 1350 and a rung above it.

**The anchor.** Stockfish 15.1 maps `UCI_Elo` 1350 onto skill level 0 (its
formula gives a fractional level of 0.01; the move is picked at depth 1 with
the largest weakness). Stockfish's own 2023 calibration of its skill levels
(commit a08b8d4, PR 4341, at 120+1 against CCRL-rated engines) rates skill 0
at about 1320, so the ladder takes `stockfish:elo=1350` as 1320 (ANCHOR,
ANCHOR_ELO). Every other rung's rating is fitted from games.

**Load-independent games.** Every rung plays at a fixed depth, never a clock:
Stockfish and Fairy-Stockfish at a skill level pick their move at depth
1 + max(level, 0) (search.cpp, Skill::time_to_pick), and `stockfish:depth=1`
is a fixed depth too. A busy or slow machine plays the same games.

**The calibration** (`alphazero ladder calibrate`, calibrate() here) plays
each rung against its neighbours and the rungs near the anchor against it,
`games` a pairing from an opening book with colours swapped, and fits every
game at once (eval.elo.fit_ratings, BayesElo's draw model) with the anchor
fixed. Its table and the games' results (per pairing, in order) ship in
eval/data/ladder.json, which load_ladder reads; `curve`, `eval` and
`train`'s periodic evaluation take the rungs as anchors at those ratings
and choose those nearest each network (Ladder.nearest).

Example::

    >>> ladder = load_ladder()
    >>> ladder.elo("stockfish:elo=1350")
    1320.0
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alphazero.errors import UserError

if TYPE_CHECKING:  # numpy's fit is imported when a ladder is fitted, so that building the CLI's parser stays cheap
    from eval.elo import Rating, Ratings

LADDER_FORMAT = "alphazero-ladder"
LADDER_FILE = Path(__file__).parent / "data" / "ladder.json"
"""The shipped calibration."""

ANCHOR = "stockfish:elo=1350"
ANCHOR_ELO = 1320.0
"""Stockfish 15.1 at UCI_Elo 1350 is its skill level 0, which Stockfish's 2023 calibration (commit a08b8d4,
PR 4341) rates at about 1320."""

DEFAULT_RUNGS = (
    "random",
    "fairy:skill=-20,random=0.5",
    "fairy:skill=-20",
    "fairy:skill=-8",
    "fairy:skill=-5",
    "fairy:skill=-3",
    "fairy:skill=-1",
    ANCHOR,
    "stockfish:depth=1",
)
"""The calibrated rungs, weakest first, chosen by 20-game trials so that each scores about 10-30% against the
next: Fairy-Stockfish's levels -20 to -10 play alike, and the steps from -8 up are steep (at -4 and below the
weakness term favours worse moves). stockfish:depth=1 is the rung above the anchor."""

DEFAULT_BOOK = Path(__file__).parent / "books" / "balanced-400.pgn"
DEFAULT_GAMES = 200
DEFAULT_PLY_LIMIT = 512
ANCHOR_REACH = 2
"""Rungs this many steps or fewer from the anchor play it (the nearest play it as its neighbours anyway)."""


# --- the shipped ladder ---------------------------------------------------------------------


@dataclass(frozen=True)
class Rung:
    """A rung: its player spec, its fitted Elo with the 95% interval, and the games of its calibration;
    `bound` ('below 1320') when its games against the anchor were all lost or all won (eval.elo.Bound)."""

    spec: str
    elo: float
    low: float
    high: float
    games: int
    bound: str | None = None


@dataclass(frozen=True)
class Ladder:
    """The calibrated rungs, weakest first, with the anchor they were fitted to and the games' ply limit."""

    rungs: tuple[Rung, ...]
    anchor: str = ANCHOR
    anchor_elo: float = ANCHOR_ELO
    ply_limit: int = DEFAULT_PLY_LIMIT

    def rung(self, spec: str) -> Rung:
        """Finds a rung by its spec.

        Raises:
            UserError: no rung has that spec (the message lists them).
        """
        for rung in self.rungs:
            if rung.spec == spec:
                return rung
        raise UserError(f"{spec!r} is not a rung of the ladder; its rungs: {', '.join(self.specs())}")

    def elo(self, spec: str) -> float:
        """The rung's calibrated Elo (UserError for a spec that is no rung)."""
        return self.rung(spec).elo

    def specs(self) -> list[str]:
        return [rung.spec for rung in self.rungs]

    def anchors(self, rungs: Iterable[Rung] | None = None) -> dict[str, float]:
        """The rungs (default all) as anchors of a fit: spec -> calibrated Elo."""
        return {rung.spec: rung.elo for rung in (self.rungs if rungs is None else rungs)}

    def nearest(self, estimate: float | None, count: int = 2) -> list[Rung]:
        """Chooses the `count` rungs nearest a network's estimated Elo, weakest first.

        Ties go to the weaker rung. With no estimate (a network not yet
        rated), the rungs are spread over the ladder from the bottom: the
        weakest, the anchor, and the ones between at even steps.

        >>> ladder = Ladder(tuple(Rung(s, e, e, e, 0) for s, e in (("a", 0.0), ("b", 500.0), ("c", 1000.0))))
        >>> [rung.spec for rung in ladder.nearest(600.0)], [rung.spec for rung in ladder.nearest(None)]
        (['b', 'c'], ['a', 'c'])

        Raises:
            UserError: count below 1.
        """
        if count < 1:
            raise UserError(f"the number of rungs to play must be at least 1, got {count}")
        ordered = sorted(self.rungs, key=lambda rung: rung.elo)
        if estimate is None:
            top = next((k for k, rung in enumerate(ordered) if rung.spec == self.anchor), len(ordered) - 1)
            picks = {round(k * top / max(count - 1, 1)) for k in range(count)} if count > 1 else {0}
            return [ordered[k] for k in sorted(picks)]
        chosen = sorted(ordered, key=lambda rung: (abs(rung.elo - estimate), rung.elo))[:count]
        return sorted(chosen, key=lambda rung: rung.elo)


BOUND_STEP = 150.0
"""How far beyond its bound a network that lost (won) every game against the anchors is guessed to be: about
half the step between rungs, so that the next rungs chosen are the one it lost to and the one below."""

RUNGS_PLAYED = 2
"""How many rungs a network plays by default in `curve`, `eval` and train's periodic evaluation."""


def estimate_of(rating: Rating | None) -> float | None:
    """Guesses a network's Elo from its last rating: the number, or BOUND_STEP beyond its bound; None unrated."""
    if rating is None:
        return None
    if rating.bound is not None:
        return rating.bound.elo + (-BOUND_STEP if rating.bound.side == "below" else BOUND_STEP)
    return rating.elo


def rung_engine_missing(spec: str) -> str | None:
    """Says why a rung cannot play here (its engine is not installed, with how to install it); None if it can."""
    from alphazero.chess.stockfish import FAIRY_INSTALL_HINT, INSTALL_HINT, find_fairy_stockfish, find_stockfish

    kind = spec.split(":", 1)[0]
    if kind == "fairy" and find_fairy_stockfish() is None:
        return f"the rung {spec} needs Fairy-Stockfish, which was not found; {FAIRY_INSTALL_HINT}"
    if kind == "stockfish" and find_stockfish() is None:
        return f"the rung {spec} needs Stockfish, which was not found; {INSTALL_HINT}"
    return None


def playable_ladder(ladder: Ladder | None = None) -> tuple[Ladder, list[str]]:
    """The shipped ladder (or `ladder`) less the rungs whose engine is missing here, and one line for each
    kind of engine missing (saying how to install it)."""
    ladder = ladder or load_ladder()
    missing: dict[str, str] = {}
    rungs = []
    for rung in ladder.rungs:
        why = rung_engine_missing(rung.spec)
        if why is None:
            rungs.append(rung)
        else:
            missing.setdefault(rung.spec.split(":", 1)[0], why)
    return Ladder(tuple(rungs), ladder.anchor, ladder.anchor_elo, ladder.ply_limit), list(missing.values())


def load_ladder(path: str | Path | None = None) -> Ladder:
    """Reads a ladder's calibration (default: the shipped eval/data/ladder.json).

    Raises:
        UserError: the file is missing or is not a ladder.
    """
    source = Path(path) if path is not None else LADDER_FILE
    try:
        payload = json.loads(source.read_text(encoding="utf-8"))
        if payload.get("format") != LADDER_FORMAT:
            raise ValueError(f"its format is {payload.get('format')!r}, not {LADDER_FORMAT!r}")
        rungs = tuple(Rung(r["spec"], float(r["elo"]), float(r["low"]), float(r["high"]), int(r["games"]),
                           r.get("bound")) for r in payload["rungs"])
        return Ladder(rungs, payload["anchor"], float(payload["anchor_elo"]), int(payload["ply_limit"]))
    except FileNotFoundError:
        raise UserError(f"{source}: no ladder there; `alphazero ladder calibrate` writes one") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise UserError(f"{source} is not a ladder calibration: {error}") from None


# --- the calibration -------------------------------------------------------------------------


@dataclass(frozen=True)
class Pairing:
    """Two rungs that play each other in the calibration, `a` the weaker by the order given."""

    a: str
    b: str


def calibration_pairings(specs: Sequence[str], anchor: str = ANCHOR) -> list[Pairing]:
    """The calibration's pairings: each rung against the next, and each rung within ANCHOR_REACH steps of
    the anchor against it.

    >>> [(p.a, p.b) for p in calibration_pairings(["r", "f", "g", "sf"], anchor="sf")]
    [('r', 'f'), ('f', 'g'), ('g', 'sf'), ('f', 'sf')]

    Raises:
        UserError: fewer than two rungs, a rung given twice, or no anchor among them.
    """
    if len(specs) < 2:
        raise UserError(f"a ladder needs at least two rungs, got {list(specs)}")
    if len(set(specs)) != len(specs):
        raise UserError(f"a rung is given twice: {list(specs)}")
    if anchor not in specs:
        raise UserError(f"the rungs must include the anchor {anchor!r} (rated {ANCHOR_ELO:.0f}); got {list(specs)}")
    pairs = [Pairing(a, b) for a, b in zip(specs, specs[1:])]
    top = list(specs).index(anchor)
    for k, spec in enumerate(specs):
        if 1 < abs(k - top) <= ANCHOR_REACH:
            pairs.append(Pairing(spec, anchor) if k < top else Pairing(anchor, spec))
    return pairs


@dataclass
class PairingResult:
    """A pairing's games in the order played, each as a's score: '1', '=' or '0'."""

    a: str
    b: str
    results: str = ""

    def counts(self) -> tuple[int, int, int]:
        """(wins, draws, losses) from a's side."""
        return self.results.count("1"), self.results.count("="), self.results.count("0")


_SCORE_MARK = {1.0: "1", 0.5: "=", 0.0: "0"}
_MARK_SCORE = {mark: score for score, mark in _SCORE_MARK.items()}


def pairing_games(results: Iterable[PairingResult]) -> list[tuple[str, str, float]]:
    """The games of the pairings as (a, b, a's score) for eval.elo.fit_ratings."""
    return [(r.a, r.b, _MARK_SCORE[mark]) for r in results for mark in r.results]


def fit_ladder(results: Sequence[PairingResult], specs: Sequence[str], ply_limit: int,
               anchor: str = ANCHOR) -> tuple[Ladder, Ratings]:
    """Fits the rungs from the pairings' games with the anchor at ANCHOR_ELO; rungs kept in the order given.

    Raises:
        UserError: a rung is not yet linked to the anchor by games.
    """
    from eval.elo import fit_ratings

    try:
        ratings = fit_ratings(pairing_games(results), {anchor: ANCHOR_ELO})
    except ValueError as error:
        raise UserError(f"the ladder cannot be fitted yet: {error}; play its games first") from None
    rungs = tuple(_rung(spec, ratings[spec]) for spec in specs if spec in ratings)
    return Ladder(rungs, anchor, ANCHOR_ELO, ply_limit), ratings


def _rung(spec: str, rating: Rating) -> Rung:
    bound = rating.bound.text() if rating.bound is not None else None
    return Rung(spec, round(rating.elo, 1), round(rating.low, 1), round(rating.high, 1), rating.games, bound)


def _read_results(games_dir: Path, pairs: Sequence[Pairing]) -> list[PairingResult]:
    """Reads each pairing's finished games from its JSONL files in games_dir, in the order they were played.

    Each file is a match that play_calibration played with the pairing's first rung as agent A, so a game's
    score_a is that rung's score (whatever name an agent gave itself: `random` seeded 75 calls itself
    `random:seed=75`)."""
    from eval.match import match_id_of
    from eval.match_records import read_game_records

    results = []
    for pair in pairs:
        marks = []
        for path in sorted(games_dir.glob(f"{match_id_of(pair.a, pair.b)}-[0-9][0-9][0-9][0-9].jsonl")):
            marks += [_SCORE_MARK[float(record["score_a"])] for record in read_game_records(path)]
        results.append(PairingResult(pair.a, pair.b, "".join(marks)))
    return results


@dataclass(frozen=True)
class CalibrationSettings:
    """How the calibration plays: `games` a pairing (rounded up to even), the ply limit, the opening book,
    the games in flight (one engine search runs at a time whatever the number) and the progress output."""

    games: int = DEFAULT_GAMES
    ply_limit: int = DEFAULT_PLY_LIMIT
    openings: str = str(DEFAULT_BOOK)
    concurrency: int = 4
    progress: bool = True

    def check(self) -> None:
        if self.games < 1 or self.ply_limit < 1 or self.concurrency < 1:
            raise UserError("games, the ply limit and concurrency must each be at least 1")


def play_calibration(specs: Sequence[str], games_dir: Path, settings: CalibrationSettings) -> list[PairingResult]:
    """Plays what each pairing still misses (games on disk count, so a rerun after Ctrl-C goes on); returns
    every pairing's results.

    Raises:
        UserError: bad rungs or settings, a missing engine (with how to install it), a folder that takes no file.
    """
    from alphazero.store.rundir import check_writable_directory
    from eval.agents import parse_player
    from eval.match import match_id_of, play_match
    from eval.openings import load_openings

    settings.check()
    pairs = calibration_pairings(specs)
    for spec in specs:  # every rung's engine must start before the first game
        parse_player(spec).close()
    check_writable_directory(games_dir, "the ladder's games")
    openings = load_openings(settings.openings)
    wanted = settings.games + settings.games % 2
    for number, (pair, have) in enumerate(zip(pairs, _read_results(games_dir, pairs), strict=True), start=1):
        missing = wanted - len(have.results)
        missing += missing % 2
        if missing <= 0:
            continue
        first = len(have.results) // 2  # the book's next unplayed opening
        if settings.progress:
            print(f"ladder: pairing {number} of {len(pairs)}: {pair.a} vs {pair.b}, {missing} games "
                  f"({len(have.results)} on disk)", flush=True)
        with parse_player(pair.a, seed=first) as a, parse_player(pair.b, seed=first + 1) as b:
            a.name, b.name = pair.a, pair.b  # the records name the rungs, whatever the seed
            result = play_match(a, b, games=missing, concurrency=min(settings.concurrency, missing),
                                ply_limit=settings.ply_limit, out_dir=games_dir, progress=settings.progress,
                                openings=openings, seed=first, match_id=match_id_of(pair.a, pair.b, f"-{first:04d}"))
        if settings.progress:
            print(f"ladder: {pair.a} vs {pair.b}: +{result.wins} ={result.draws} -{result.losses}", flush=True)
    return _read_results(games_dir, pairs)


def ladder_json(ladder: Ladder, ratings: Ratings, results: Sequence[PairingResult],
                settings: CalibrationSettings) -> str:
    """The calibration as JSON: the table (rungs with Elo and 95% interval), how it was played, and every
    pairing's results in order (a's score per game: 1, = or 0; game 2k and 2k+1 play the book's line k with
    colours swapped, a White first)."""
    payload: dict[str, Any] = {
        "format": LADDER_FORMAT,
        "version": 1,
        "anchor": ladder.anchor,
        "anchor_elo": ladder.anchor_elo,
        "anchor_source": "Stockfish 15.1 UCI_Elo 1350 is skill level 0; Stockfish's 2023 calibration "
                         "(commit a08b8d4, PR 4341) rates skill 0 at about 1320",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": _cpu_model(),
        "engines": _engine_names(ladder),
        "ply_limit": ladder.ply_limit,
        "openings": Path(settings.openings).name,
        "games_per_pairing": settings.games + settings.games % 2,
        "draw_elo": round(ratings.draw_elo, 1),
        "rungs": [vars(rung) for rung in ladder.rungs],
        "pairings": [{"a": r.a, "b": r.b, "wins": r.counts()[0], "draws": r.counts()[1], "losses": r.counts()[2],
                      "results": r.results} for r in results],
    }
    return json.dumps(payload, indent=1) + "\n"


def _cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo, as lscpu shows it), else the platform's machine."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def _engine_names(ladder: Ladder) -> dict[str, str]:
    """The engines' own names (their `id name`), for the record."""
    from eval.agents import parse_player

    names = {}
    for kind in ("stockfish", "fairy"):
        spec = next((rung.spec for rung in ladder.rungs if rung.spec.startswith(kind)), None)
        if spec is not None:
            with parse_player(spec.split(",random=")[0]) as agent:
                engine = getattr(agent, "_engines", [None])[0]
                names[kind] = engine.id.get("name", "?") if engine is not None else "?"
    return names


# --- the tables ----------------------------------------------------------------------------------


def ladder_table(ladder: Ladder, title: str) -> Any:
    """The rich table of the rungs, strongest first: spec, Elo, 95% interval, games (anchor marked)."""
    from rich.table import Table

    table = Table(title=title, caption=f"anchor: {ladder.anchor} = {ladder.anchor_elo:.0f} "
                                       f"(Stockfish's own calibration of skill 0); games to {ladder.ply_limit} plies")
    for column in ("rung", "Elo", "95%", "games"):
        table.add_column(column, justify="left" if column == "rung" else "right", no_wrap=True)
    for rung in sorted(ladder.rungs, key=lambda rung: -rung.elo):
        interval = "anchor" if rung.spec == ladder.anchor else f"{rung.low:.0f}..{rung.high:.0f}"
        elo = f"{rung.elo:.0f}"
        if rung.bound is not None:  # its games support no number
            elo, interval = rung.bound, "-"
        table.add_row(rung.spec, elo, interval, str(rung.games))
    return table


def pairings_table(results: Sequence[PairingResult]) -> Any:
    """The rich table of the pairings: a, b, a's wins, draws, losses and score."""
    from rich.table import Table

    table = Table(title="pairings (from the first rung's side)")
    for column in ("rung", "vs", "+", "=", "-", "score"):
        table.add_column(column, justify="left" if column in ("rung", "vs") else "right", no_wrap=True)
    for result in results:
        wins, draws, losses = result.counts()
        games = wins + draws + losses
        score = f"{100 * (wins + draws / 2) / games:.1f}%" if games else "-"
        table.add_row(result.a, result.b, str(wins), str(draws), str(losses), score)
    return table


def stored_results(path: str | Path | None = None) -> list[PairingResult]:
    """The pairings' results kept in a ladder file (default the shipped one).

    Raises:
        UserError: the file cannot be read as a ladder.
    """
    source = Path(path) if path is not None else LADDER_FILE
    load_ladder(source)  # says what is wrong with the file
    payload = json.loads(source.read_text(encoding="utf-8"))
    return [PairingResult(p["a"], p["b"], p["results"]) for p in payload.get("pairings", [])]


# --- the command ---------------------------------------------------------------------------------


def add_ladder_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `alphazero ladder [show | calibrate] [--rung SPEC ...] [--games N] ...`."""
    parser.add_argument("action", nargs="?", choices=("show", "calibrate"), default="show",
                        help="show: print the shipped calibration (default); calibrate: play the rungs' games "
                             "(those on disk count) and fit them")
    parser.add_argument("--rung", action="append", default=None, metavar="SPEC",
                        help="a rung, weakest first, once per rung (default: the shipped rungs: "
                             f"{'; '.join(DEFAULT_RUNGS)}); the anchor {ANCHOR} must be one")
    parser.add_argument("--games", type=int, default=DEFAULT_GAMES,
                        help=f"games of each pairing (default {DEFAULT_GAMES}; a rerun with more adds the difference)")
    parser.add_argument("--games-dir", type=Path, default=Path("runs/ladder"),
                        help="where the games go, one JSONL file per pairing (default runs/ladder)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the calibration to write (default GAMES_DIR/ladder.json; the shipped one is "
                             "eval/data/ladder.json)")
    parser.add_argument("--file", type=Path, default=None, help="show: a ladder file other than the shipped one")
    parser.add_argument("--ply-limit", type=int, default=DEFAULT_PLY_LIMIT,
                        help=f"plies after which a game is drawn (default {DEFAULT_PLY_LIMIT})")
    parser.add_argument("--openings", default=str(DEFAULT_BOOK), metavar="FILE",
                        help="opening book, each line played with colours swapped (default the shipped "
                             "balanced-400.pgn)")
    parser.add_argument("--concurrency", type=int, default=4,
                        help="games in flight (default 4; the engines search one move at a time either way)")
    parser.add_argument("--no-progress", action="store_true", help="no progress output")


def run_ladder_command(args: argparse.Namespace) -> None:
    """Runs `alphazero ladder`: prints the shipped table, or calibrates and writes a new one."""
    from rich.console import Console

    from alphazero.store.rundir import atomic_write_text

    console = Console()
    if args.action == "show":
        source = args.file or LADDER_FILE
        console.print(ladder_table(load_ladder(source), f"the ladder ({source})"))
        console.print(pairings_table(stored_results(source)))
        return
    specs = args.rung or list(DEFAULT_RUNGS)
    settings = CalibrationSettings(args.games, args.ply_limit, args.openings, args.concurrency, not args.no_progress)
    results = play_calibration(specs, args.games_dir, settings)
    ladder, ratings = fit_ladder(results, specs, settings.ply_limit)
    out = args.out or args.games_dir / "ladder.json"
    atomic_write_text(out, ladder_json(ladder, ratings, results, settings))
    console.print(ladder_table(ladder, f"the ladder, {settings.games + settings.games % 2} games a pairing"))
    console.print(pairings_table(results))
    console.print(f"ladder written to {out}")


__all__ = [
    "ANCHOR", "ANCHOR_ELO", "DEFAULT_RUNGS", "LADDER_FILE", "CalibrationSettings", "Ladder", "PairingResult", "Rung",
    "calibration_pairings", "fit_ladder", "ladder_json", "ladder_table", "load_ladder", "play_calibration",
    "run_ladder_command",
]
