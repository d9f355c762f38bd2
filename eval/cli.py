"""The command-line front ends of eval: `alphazero match`, `alphazero eval` and `alphazero uci`.

Each command is a pair, `add_<name>_arguments(parser)` and a runner taking
the parsed namespace, for alphazero/app/cli.py to wire in::

    def _add_match(sub):
        from eval.cli import add_match_arguments, run_match
        p = sub.add_parser("match", help="play a match: alphazero match [A] vs B")
        add_match_arguments(p)
        p.set_defaults(func=run_match)

At load time this module imports only the standard library,
alphazero.store.rundir and the constants of eval.match, eval.probe_defaults
and eval.uci_options (no torch), so building the parser stays cheap; the
runners import the rest.
Runners raise UserError for bad input, which the CLI prints.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alphazero.arguments import positive_float
from alphazero.store.rundir import DEFAULT_RUN_DIR, add_run_option
from eval.curve_picture import TIME_AXES
from eval.match import DEFAULT_CONCURRENCY
from eval.probe_defaults import DEFAULT_PROBE_POSITIONS
from eval.uci_options import OPTIONS, options_table

_VERSUS = "vs"


# --- alphazero match --------------------------------------------------------------------



def add_concurrency_option(parser: argparse.ArgumentParser, role: str, *, clock_note: str = "") -> None:
    """Adds --concurrency N, one default for every command that plays many games or items at once
    (``clock_note``: a command whose default differs on a clock leaves it None and says so)."""
    parser.add_argument("--concurrency", type=int, default=None if clock_note else DEFAULT_CONCURRENCY,
                        help=f"{role} (default {DEFAULT_CONCURRENCY}{clock_note})")

def add_match_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `alphazero match [A] vs B [--games N] [--run DIR] [--elo E] ...`."""
    parser.add_argument(
        "players", nargs="+", metavar="[A] vs B",
        help="players such as search:400, policy, value, av (a network with an action-value head), random, "
             "stockfish, stockfish:depth=3, stockfish:elo=1500, uci:leaves=32,movetime=1000 (this project's UCI "
             "engine in a subprocess); "
             "A defaults to the run's latest checkpoint searching --simulations",
    )
    parser.add_argument("--games", type=int, default=None,
                        help="games to play, half with each colour, so an odd number is rounded up "
                             "(default: the run's eval.games)")
    add_run_option(parser, "run directory: network checkpoints, and where games go")
    parser.add_argument("--elo", type=int, default=None, help="UCI_Elo of a bare `stockfish` player, e.g. 1500")
    add_concurrency_option(parser, "games played at once", clock_note="; 1 with --clock, so engines keep their trees")
    parser.add_argument("--clock", default=None, metavar="BASE+INC",
                        help="play on a clock, e.g. 10+0.1 (seconds): every move goes to its UCI engine as "
                             "`go wtime btime winc binc` (stockfish, uci players), and running out of time loses")
    parser.add_argument("--simulations", type=int, default=None,
                        help="simulations of A and of a bare `search` (default: the run's eval.simulations)")
    parser.add_argument("--device", default="auto", help="network device: auto, cpu, cuda or cuda:N")
    parser.add_argument("--ply-limit", type=int, default=512, help="plies after which a game is drawn (default 512)")
    parser.add_argument("--resign", type=float, default=None, metavar="VALUE",
                        help="resign when both sides' values agree below VALUE, e.g. -0.9 (default: never)")
    parser.add_argument("--syzygy", default=None, metavar="PATH",
                        help="Syzygy tablebase folders (':'-separated): a game ends as soon as they hold its "
                             "position, with their result under the fifty-move rule (default: played out)")
    parser.add_argument("--seed", type=int, default=0,
                        help="first opening of the book (or the shuffle's seed), and random's seed")
    add_openings_arguments(parser)
    parser.add_argument("--match-id", default=None, help="names the output files (default: players and time)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_openings_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --openings FILE and --openings-order: the book a match plays from (eval.openings)."""
    parser.add_argument("--openings", default=None, metavar="FILE",
                        help="opening book: an EPD file (a position a line) or a PGN file (each game's line), "
                             "each played twice, colours swapped (default: the suite of eval/openings.txt)")
    parser.add_argument("--openings-order", choices=("sequential", "random"), default="sequential",
                        help="play the book as written (from --seed's opening) or shuffled by --seed")


def parse_versus(tokens: list[str], default_a: str) -> tuple[str, str]:
    """Splits `[A] vs B` into two player specs, A defaulting to `default_a`.

    Raises UserError unless the tokens are `vs B` or `A vs B`.
    """
    from alphazero.errors import UserError

    lowered = [token.lower() for token in tokens]
    if lowered.count(_VERSUS) != 1:
        raise UserError(f"write the players as `[A] vs B`, e.g. `search:400 vs stockfish:elo=1500`; "
                        f"got {' '.join(tokens)!r}")
    split = lowered.index(_VERSUS)
    left, right = tokens[:split], tokens[split + 1:]
    if len(left) > 1 or len(right) != 1:
        raise UserError(f"write one player on each side of `vs` (A may be left out); got {' '.join(tokens)!r}")
    return (left[0] if left else default_a), right[0]


def _apply_elo(specs: list[str], elo: int | None) -> list[str]:
    """Gives every bare `stockfish` the --elo level. Raises UserError if --elo has no bare stockfish."""
    from alphazero.errors import UserError
    from eval.agents import split_spec

    if elo is None:
        return specs
    bare = [split_spec(spec) == ("stockfish", []) for spec in specs]
    if not any(bare):
        raise UserError(f"--elo applies to a bare `stockfish` player; write stockfish:elo={elo} instead")
    return [f"stockfish:elo={elo}" if is_bare else spec for spec, is_bare in zip(specs, bare)]


def run_match(args: argparse.Namespace) -> None:
    """Plays `alphazero match`: JSON lines to run/eval/, PGN to run/games/, the summary line on stdout.

    Both folders are checked for writing before anything is loaded or played;
    games that cannot be written afterwards go to a temporary folder (named),
    or, failing that, to stdout as PGN.

    Raises UserError for a bad player spec or option, a missing Stockfish or
    checkpoint, a --syzygy path without tables, or a run directory whose folders cannot be written.
    """
    from alphazero.chess.syzygy import Tables
    from alphazero.config import DEFAULT_PRESET
    from alphazero.errors import UserError
    from alphazero.presets import get_preset
    from alphazero.store.rundir import RunDir, check_writable_directory
    from alphazero.store.sources import NetworkCache
    from eval.agents import parse_player
    from eval.match import Clock, format_summary, play_match
    from eval.openings import load_openings, ordered_openings

    run = RunDir(args.run)
    if run.root.exists() and not run.root.is_dir():
        raise UserError(f"--run {run.root} is a file, not a run directory")
    config = run.read_config() if run.exists() else get_preset(DEFAULT_PRESET)
    simulations = args.simulations if args.simulations is not None else config.eval.simulations
    games = args.games if args.games is not None else config.eval.games
    if games < 1:
        raise UserError(f"--games must be at least 1, got {games}")
    clock = Clock.parse(args.clock) if args.clock is not None else None
    concurrency = args.concurrency
    if concurrency is None:
        concurrency = 1 if clock is not None else DEFAULT_CONCURRENCY
    spec_a, spec_b = parse_versus(args.players, f"search:{simulations}")
    spec_a, spec_b = _apply_elo([spec_a, spec_b], args.elo)
    openings = ordered_openings(load_openings(args.openings), args.openings_order, args.seed)
    start = args.seed if args.openings_order == "sequential" else 0
    tables = Tables.open(args.syzygy) if args.syzygy is not None else None  # SyzygyPathError says what is wrong
    check_writable_directory(run.eval, "the match's records")
    check_writable_directory(run.games, "the match's games")
    if games % 2:
        print(f"playing {games + 1} games, not {games}: each opening is played twice, colours swapped", flush=True)
    context: dict[str, Any] = {"run": run.root, "device": args.device, "simulations": simulations,
                               "networks": NetworkCache(), "seed": args.seed}
    with parse_player(spec_a, **context) as agent_a, parse_player(spec_b, **context) as agent_b:
        result = play_match(agent_a, agent_b, games=games, concurrency=concurrency, ply_limit=args.ply_limit,
                            agreed_resign_value=args.resign, out_dir=run.eval, pgn_dir=run.games,
                            progress=not args.no_progress, openings=openings,
                            seed=start, match_id=args.match_id, clock=clock, syzygy=tables)
    print(format_summary(result))
    if result.pgn_path is not None:
        print(f"games: {result.pgn_path}\nrecords: {result.jsonl_path}")
    elif result.games:
        print("games (written nowhere else):\n")
        print("".join(f"{game.to_pgn()}\n\n" for game in result.games), end="")


# --- alphazero eval ---------------------------------------------------------------------------


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `alphazero eval --run DIR [--checkpoint STEP] [--games N] ...`."""
    add_run_option(parser, "run directory")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field for this evaluation, e.g. --set eval.stockfish_elos=1400,1700 "
                             "(repeatable; --full reads the eval section)")
    parser.add_argument("--checkpoint", type=int, default=None, metavar="STEP",
                        help="learner step to rate (default: the latest checkpoint)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_const", const="quick", dest="size",
                      help="4 games per pair, 64 simulations, the lowest Stockfish level, 200-ply games "
                           "(the default on a CPU)")
    size.add_argument("--full", action="store_const", const="full", dest="size",
                      help="the run's eval section: eval.games per pair, eval.simulations, every "
                           "eval.stockfish_elos level (the default on a GPU)")
    parser.add_argument("--games", type=int, default=None, help="games per pair of agents (overrides the size)")
    parser.add_argument("--simulations", type=int, default=None, help="simulations of the search agent")
    parser.add_argument("--stockfish-elos", default=None, metavar="E1,E2,...",
                        help="Stockfish UCI_Elo levels, the rating anchors (e.g. 1400,1700,2000); '' for none")
    parser.add_argument("--stockfish-depth", type=int, default=None,
                        help="search depth of the Stockfish levels (default: Elo-calibrated)")
    parser.add_argument("--ply-limit", type=int, default=None, help="plies after which a game is drawn")
    add_concurrency_option(parser, "games of a match played at once")
    parser.add_argument("--rungs", type=int, default=2, metavar="N",
                        help="play the N rungs of the shipped ladder nearest the network's last rating (the run's "
                             "latest ratings file; none yet: spread from random to Stockfish's weakest level), "
                             "anchored at their calibrated Elo (default 2; 0: none). With --quick they replace "
                             "the lowest Stockfish level")
    parser.add_argument("--no-random", action="store_true", help="leave the random agent out")
    parser.add_argument("--seed", type=int, default=0, help="first opening of the book (or the shuffle's seed)")
    add_openings_arguments(parser)
    parser.add_argument("--device", default="auto", help="network device: auto, cpu, cuda or cuda:N")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars or table")


def _parse_elos(text: str | None) -> tuple[int, ...] | None:
    """Parses '1400,1700' into levels; None when not given. Raises UserError on a non-integer."""
    from alphazero.errors import UserError

    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UserError(f"--stockfish-elos takes integers separated by commas, got {text!r}") from None


def run_eval(args: argparse.Namespace) -> None:
    """Runs `alphazero eval`: matches, the Elo table, ratings JSON and TensorBoard scalars.

    Raises UserError for a run that does not exist, a missing checkpoint or Stockfish, or bad sizes.
    """
    import dataclasses

    from alphazero.nn.network import pick_device
    from alphazero.store.rundir import RunDir
    from eval.evaluate import EvalSettings, evaluate_checkpoint

    run, config = RunDir.open(args.run, args.overrides)
    size = args.size or ("full" if pick_device(args.device).type == "cuda" else "quick")
    rungs = _eval_rungs(run, args.checkpoint, args.rungs, args.no_random)
    settings = (dataclasses.replace(EvalSettings.full(config.eval), rungs=rungs) if size == "full"
                else EvalSettings.quick(config.eval, rungs=rungs))
    changes: dict[str, Any] = {"include_random": not args.no_random, "concurrency": args.concurrency,
                               "seed": args.seed, "openings": args.openings, "openings_order": args.openings_order}
    given = {"ply_limit": args.ply_limit, "games_per_pair": args.games, "simulations": args.simulations,
             "stockfish_elos": _parse_elos(args.stockfish_elos), "stockfish_depth": args.stockfish_depth}
    changes.update({key: value for key, value in given.items() if value is not None})
    settings = dataclasses.replace(settings, **changes)
    evaluate_checkpoint(run, config, args.checkpoint, settings=settings, device=args.device,
                        progress=not args.no_progress)


def _eval_rungs(run: Any, checkpoint: int | None, count: int, no_random: bool) -> tuple[str, ...]:
    """The ladder rungs nearest the network's last rating (eval.evaluate.nearest_rungs; the random rung left
    out with --no-random); each missing engine said in one line on stderr.

    Raises UserError for a negative count.
    """
    from alphazero.errors import UserError
    from eval.evaluate import last_search_rating, nearest_rungs
    from eval.ladder import estimate_of

    if count < 0:
        raise UserError(f"--rungs takes 0 or more, got {count}")
    if count == 0:
        return ()
    try:
        rungs, missing = nearest_rungs(estimate_of(last_search_rating(run, checkpoint)), count,
                                       ("random",) if no_random else ())
    except UserError as error:  # no ladder file: the evaluation goes on without rungs
        rungs, missing = (), [f"the ladder is off: {error}"]
    for line in missing:
        print(line, file=sys.stderr)
    return rungs


# --- alphazero puzzles and alphazero epd: the papers' yardsticks --------------------------------------


def _add_yardstick_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """The options `puzzles` and `epd` share: the player, its budget, how many items, the outputs."""
    parser.add_argument("file", type=Path, help=what)
    parser.add_argument("--player", default=None, metavar="SPEC",
                        help="who answers: search:400, policy, value, av, uci:..., stockfish:... (default: the run's "
                             "network with 400 simulations)")
    add_run_option(parser, "run whose network plays; the built-in network without one")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--nodes", type=int, default=None, metavar="N",
                        help="nodes a move: a network search's simulations, Stockfish's or the engine's nodes")
    budget.add_argument("--movetime", type=int, default=None, metavar="MS", help="milliseconds a move (stockfish, uci)")
    parser.add_argument("--limit", type=int, default=None, metavar="K", help="only the first K items")
    add_concurrency_option(parser, "items answered in one call")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the summary to this JSON file")
    parser.add_argument("--device", default="auto", help="network device: auto, cpu, cuda or cuda:N")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_puzzles_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `alphazero puzzles FILE [--player SPEC] [--rating-range LO-HI] ...`."""
    _add_yardstick_arguments(parser, "a Lichess puzzle CSV (PuzzleId,FEN,Moves,Rating,...); a sample ships as "
                                     "eval/data/lichess_puzzles_sample.csv")
    parser.add_argument("--rating-range", default=None, metavar="LO-HI", help="only puzzles rated LO..HI")
    parser.add_argument("--bucket-width", type=int, default=200, help="rating points a bucket (default 200)")


def add_epd_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `alphazero epd FILE [--player SPEC] [--nodes N | --movetime MS] ...`."""
    _add_yardstick_arguments(parser, "an EPD test suite (bm, am, STS points in c0 or c8/c9); the Strategic Test "
                                     "Suite ships as eval/data/sts.epd")


def _yardstick_player(args: argparse.Namespace) -> Any:
    """Builds the --player agent with its --nodes or --movetime budget."""
    from alphazero.errors import UserError
    from alphazero.store.sources import NetworkCache
    from eval.agents import parse_player, with_budget

    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be at least 1, got {args.limit}")
    if args.concurrency < 1:
        raise UserError(f"--concurrency must be at least 1, got {args.concurrency}")
    spec = with_budget(args.player or "search", nodes=args.nodes, movetime=args.movetime)
    context: dict[str, Any] = {"run": args.run, "device": args.device, "simulations": 400,
                               "networks": NetworkCache(), "seed": 0}
    return parse_player(spec, **context)


def _write_json(path: Path | None, payload: dict[str, Any]) -> None:
    import json

    from alphazero.errors import UserError
    from alphazero.store.rundir import atomic_write_text

    if path is None:
        return
    try:
        atomic_write_text(path, json.dumps(payload, indent=2) + "\n")
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror or error}") from None
    print(f"summary written to {path}")


def _rating_range(text: str | None) -> tuple[int, int] | None:
    from alphazero.errors import UserError

    if text is None:
        return None
    low, _, high = text.partition("-")
    try:
        return int(low), int(high)
    except ValueError:
        raise UserError(f"--rating-range takes LO-HI, e.g. 1000-1600; got {text!r}") from None


def _rejecter(rejected: list[str]) -> Callable[[str], None]:
    """Returns the readers' on_reject for the commands: a bad line is said on stderr, kept for the JSON and
    skipped, so one malformed line of a large file costs that line only (the exit status still says it)."""
    def reject(message: str) -> None:
        rejected.append(message)
        print(f"skipped: {message}", file=sys.stderr)
    return reject


def _refuse_rejected(path: Path, rejected: list[str], played: int) -> None:
    """Ends a run that skipped malformed lines with exit status 2, after its results are out: the file needs
    fixing, and the figures of the lines that were fine are kept."""
    from alphazero.errors import UserError

    if rejected:
        lines = "line" if len(rejected) == 1 else "lines"
        raise UserError(f"{path}: {len(rejected)} malformed {lines} skipped (said above); the other {played:,} "
                        f"were played and their figures kept")


def run_puzzles(args: argparse.Namespace) -> None:
    """Runs `alphazero puzzles`: the player solves the puzzles; accuracy per rating bucket and in all."""
    from rich.console import Console
    from rich.table import Table

    from alphazero.console import LiveDisplay
    from alphazero.errors import UserError
    from eval.puzzles import read_puzzles, solve_puzzles

    if args.bucket_width < 1:
        raise UserError(f"--bucket-width must be at least 1, got {args.bucket_width}")
    rejected: list[str] = []
    puzzles = read_puzzles(args.file, limit=args.limit, rating_range=_rating_range(args.rating_range),
                           on_reject=_rejecter(rejected))
    with _yardstick_player(args) as player, LiveDisplay(enabled=not args.no_progress, label="puzzles",
                                                        bar=("label", "bar", "count", "elapsed", "remaining"),
                                                        total=len(puzzles), stderr=False) as bar:
        report = solve_puzzles(player, puzzles, concurrency=args.concurrency,
                               on_done=lambda result: bar.update(advance=1))
    report.bucket_width = args.bucket_width
    table = Table(title=f"{report.player} on {len(puzzles):,} puzzles of {args.file}")
    for column in ("rating", "puzzles", "solved", "accuracy"):
        table.add_column(column, justify="right")
    for bucket in report.buckets():
        table.add_row(f"{bucket.low}-{bucket.high - 1}", str(bucket.total), str(bucket.solved),
                      f"{100 * bucket.accuracy:.1f}%")
    table.add_row("all", str(report.total), str(report.solved), f"{100 * report.accuracy:.1f}%")
    Console().print(table)
    _write_json(args.json, {"file": str(args.file), **report.to_json(), "rejected": rejected})
    _refuse_rejected(args.file, rejected, report.total)


def run_epd(args: argparse.Namespace) -> None:
    """Runs `alphazero epd`: the player answers each position; points and found moves per theme and in all."""
    from rich.console import Console
    from rich.table import Table

    from alphazero.console import LiveDisplay
    from eval.epd import read_epd, score_epd

    rejected: list[str] = []
    positions = read_epd(args.file, limit=args.limit, on_reject=_rejecter(rejected))
    with _yardstick_player(args) as player, LiveDisplay(enabled=not args.no_progress, label="positions",
                                                        bar=("label", "bar", "count", "elapsed", "remaining"),
                                                        total=len(positions), stderr=False) as bar:
        report = score_epd(player, positions, concurrency=args.concurrency,
                           on_done=lambda result: bar.update(advance=1))
    table = Table(title=f"{report.player} on {len(positions):,} positions of {args.file}")
    for column in ("theme", "positions", "found", "points", "of"):
        table.add_column(column, justify="left" if column == "theme" else "right")
    for tally in report.themes():
        table.add_row(tally.name, str(tally.total), str(tally.found), str(tally.points), str(tally.max_points))
    table.add_row("all", str(report.total), str(report.found), str(report.points), str(report.max_points))
    Console().print(table)
    _write_json(args.json, {"file": str(args.file), **report.to_json(), "rejected": rejected})
    _refuse_rejected(args.file, rejected, report.total)


# --- alphazero book ------------------------------------------------------------------------------


def add_book_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `alphazero book OUT [--lines N] [--plies P] [--seed S] [--max-cp C] ...`."""
    parser.add_argument("out", type=Path, help="the PGN book to write")
    parser.add_argument("--lines", type=int, default=400, help="lines in the book (default 400)")
    parser.add_argument("--plies", type=int, default=8, help="plies a line (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the lines' draws (default 0)")
    parser.add_argument("--max-cp", type=int, default=40,
                        help="keep a line when Stockfish rates its end within this many centipawns (default 40)")
    parser.add_argument("--window-cp", type=int, default=60,
                        help="each move drawn among those within this many centipawns of the best (default 60)")
    parser.add_argument("--pick-nodes", type=int, default=20_000, help="Stockfish's nodes to pick a move")
    parser.add_argument("--judge-nodes", type=int, default=200_000, help="Stockfish's nodes to judge a line")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


# --- alphazero curve ---------------------------------------------------------------------------


def add_curve_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `alphazero curve --run DIR [--per-hour K | --hours LIST | --every N | --steps LIST]`."""
    add_run_option(parser, "run directory")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--per-hour", type=positive_float, default=None, metavar="K",
                       help="K checkpoints per hour of the run (default 1); the start and the latest always")
    which.add_argument("--hours", default=None, metavar="LIST",
                       help="the checkpoint nearest to each of these hours of the run, e.g. 0.33,1,3")
    which.add_argument("--every", type=int, default=None, metavar="N", help="every Nth checkpoint")
    which.add_argument("--steps", default=None, metavar="LIST", help="these steps, e.g. 0,400,1200")
    parser.add_argument("--games", type=int, default=20,
                        help="games of each pairing (default 20; a rerun with more adds the difference)")
    parser.add_argument("--simulations", type=int, default=64,
                        help="simulations of the checkpoints' search (default 64, the quick evaluation's, "
                             "whose games then join the fit)")
    parser.add_argument("--rungs", type=int, default=2, metavar="N",
                        help="each checkpoint plays the N rungs of the shipped ladder nearest it, anchored at their "
                             "calibrated Elo (default 2; 0: none, the lowest Stockfish level anchors instead)")
    parser.add_argument("--stockfish-elos", default=None, metavar="E1,E2,...",
                        help="Stockfish UCI_Elo levels as anchors at their UCI_Elo (default: none with --rungs, else "
                             "the lowest of eval.stockfish_elos when Stockfish is installed; '' for none: without "
                             "rungs the start is then 0)")
    parser.add_argument("--stockfish-depth", type=int, default=None,
                        help="search depth of the Stockfish levels (default: Elo-calibrated)")
    parser.add_argument("--no-random", action="store_true", help="leave the random agent out")
    parser.add_argument("--ply-limit", type=int, default=200, help="plies after which a game is drawn (default 200)")
    add_concurrency_option(parser, "games of a pairing played at once")
    parser.add_argument("--no-play", action="store_true", help="fit and draw the games on disk, play none")
    parser.add_argument("--beside", action="append", default=[], metavar="RUN",
                        help="also draw RUN/curve/beside.png: this run's curve and each RUN's (from its "
                             "curve/curve.json) side by side on one Elo axis, each against its own minutes or "
                             "hours (runs on different machines, anchored at the same Stockfish levels)")
    parser.add_argument("--time-axis", choices=TIME_AXES, default="auto",
                        help="the pictures' time axis: log, linear, or auto (default: log where the checkpoints' "
                             "times after the start span two triplings, 9x, or more)")
    parser.add_argument("--openings", default=None, metavar="FILE",
                        help="opening book (EPD or PGN) for the curve's games (default: the suite); each pairing "
                             "plays it in order, going on where its last games ended")
    parser.add_argument("--device", default="auto", help="network device: auto, cpu, cuda or cuda:N")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


# --- alphazero ladder --------------------------------------------------------------------------


def add_ladder_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `alphazero ladder [show | calibrate] ...` (eval.ladder's)."""
    from eval.ladder import add_ladder_arguments as add

    add(parser)


# --- alphazero probe ---------------------------------------------------------------------------

def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `alphazero probe --run DIR --data DIR [--steps LIST] [--weights FILE ...] [--no-sv]`."""
    add_run_option(parser, "run directory")
    parser.add_argument("--data", metavar="DIR", default=None,
                        help="a folder of Stockfish labels (`alphazero pretrain --data-only` writes RUN/pretrain/) "
                             "or a run that holds one (default: the run's eval.probe_data)")
    parser.add_argument("--steps", metavar="LIST", default="all",
                        help="the run's checkpoints to probe: 'all' (default), 'latest', or steps such as 0,400,1000")
    parser.add_argument("--weights", nargs="*", default=[], metavar="FILE",
                        help="also probe these networks: model files, checkpoints, runs or 'builtin'")
    parser.add_argument("--positions", type=int, default=DEFAULT_PROBE_POSITIONS, metavar="N",
                        help=f"the first N positions of the set (default {DEFAULT_PROBE_POSITIONS:,}; 0 = all)")
    parser.add_argument("--no-sv", dest="state_values", action="store_false",
                        help="leave out ChessBench's SV predictor, which evaluates the position after every move "
                             "(about 30 times the rest of the probe's work); BC and AV (with the head) stay")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the figures to this JSON file")


# --- alphazero uci -----------------------------------------------------------------------------


_OWN_FLAGS = ("Weights", "Device")
"""Engine options whose flags `uci` declares by hand (--weights goes with --run; --device has a default)."""

_UCI_DESCRIPTION = """\
A UCI engine for chess GUIs and lichess-bot. A GUI needs the command's absolute
path (`which alphazero`); a bare `alphazero uci` plays the built-in network.
Every engine option below may be set by the GUI (setoption) or here on the
command line, e.g. `alphazero uci --hash 256 --threads 1 --syzygy-path /tb`;
a bad value stops the engine before it starts. docs/engine.md says more."""


def _option_dest(name: str) -> str:
    return "option:" + name


def add_uci_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `alphazero uci [--run DIR [--fresh] | --weights FILE] [--device D]`, and a flag for
    every other engine option (eval.uci_options, UciOption.flag), with the options' table as the help's epilog."""
    parser.description = _UCI_DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "engine options (UCI name, flag: type, values, default; what it does):\n" + options_table()
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--run", type=Path, default=None,
                        help=f"run whose latest checkpoint plays (default {DEFAULT_RUN_DIR})")
    source.add_argument("--weights", type=Path, default=None,
                        help="a model file or checkpoint to play with; 'builtin' is the network that ships "
                             "('builtin-DATE' one that shipped before)")
    parser.add_argument("--fresh", action="store_true",
                        help="let a run without checkpoints play freshly initialised (about random) weights "
                             "instead of the built-in network (or, for a run that does not exist, instead of "
                             "refusing)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    options = parser.add_argument_group("engine options", "each sets the UCI option of its name (the table below)")
    for option in OPTIONS:
        if option.name not in _OWN_FLAGS:
            options.add_argument(option.flag, dest=_option_dest(option.name), default=None, metavar="VALUE",
                                 help=f"{option.name}: {option.summary()}")


def run_uci_command(args: argparse.Namespace) -> None:
    """Runs `alphazero uci` over stdin/stdout until `quit`.

    Raises UserError for an unusable network source: a missing or unusable
    weights file or run, or a run without checkpoints unless --fresh.
    """
    from alphazero.errors import UserError
    from eval.uci import run_uci

    if args.fresh and args.weights is not None:
        raise UserError("--fresh goes with a run (--run), not with --weights")
    given = {option.name: getattr(args, _option_dest(option.name)) for option in OPTIONS
             if option.name not in _OWN_FLAGS}
    run_uci(args.run, args.weights, args.device, fresh=args.fresh,
            options={name: text for name, text in given.items() if text is not None})


__all__ = [
    "add_eval_arguments",
    "add_ladder_arguments",
    "add_match_arguments",
    "add_uci_arguments",
    "parse_versus",
    "run_eval",
    "run_match",
    "run_uci_command",
]
