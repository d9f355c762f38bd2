"""`alphazero curve --run R`: the run's Elo over its training, as in the AlphaZero paper's Figure 1.

Over 600 lines: the choice of checkpoints and opponents, the rounds as the
ladder's estimates come in, and the fit and its table read together. The
rounds (the ladder's part) are to move into a module of their own.

Chosen checkpoints of the run play as search agents (``search:N`` with the
run's own search settings, its policy temperature included: the start plays
exactly as the trained networks do, so a gain is the training's) against
each other and against fixed anchors:

- each checkpoint against the one chosen before it, and against the run's
  start (its step-0 checkpoint: the ``--init`` weights or fresh ones);
- each checkpoint, the start included, against ``random``, against the
  ladder's rungs nearest it (``--rungs``, eval.ladder: its estimate is the
  fit of the games on disk, else the periodic evaluation's rating of that
  step, else none, and the rungs are spread from the bottom to Stockfish's
  weakest level; after each round of games the estimates are refitted and
  rungs that came nearer are played, for up to RUNG_ROUNDS rounds), and
  against Stockfish at fixed UCI_Elo levels (``stockfish:elo=E``) when asked.

All games go into one fit (eval.elo.fit_ratings): the rungs anchored at
their calibrated Elo and the Stockfish levels at their UCI_Elo, else the
start at 0. A checkpoint that lost (or won) every game against the anchors
it met is shown as its bound ("below 1320"), not as a number. Checkpoints
are chosen by the run's wall time (``run_seconds``
in each checkpoint: every sitting's time, from its learner's start), one per
hour by default (the nearest to each hour; the learner keeps one checkpoint
per ``learner.keep_every_minutes`` of the run for this), the start and the
latest always included.

Games are kept: ``RUN/curve/games/<a>-vs-<b>-<first opening>.jsonl`` (and
``RUN/games/curve/`` for the PGN), written after each game, so Ctrl-C keeps
every finished game and a rerun plays only what is missing, with new
checkpoints' games added to the old ones. The periodic evaluation's games
(``RUN/eval/step_*/``) join the fit where they were played with the same
settings (the quick evaluation's: search:64, 200-ply games), including those
of an evaluation a run's deadline stopped.

Outputs: a table (step, hours of the run, games, Elo, 95% interval, and
the gain over the checkpoint before from their own games: the fit's
intervals measure the distance from the anchors, loose when those are far
below or above the run, the head-to-head one the gain itself), the
points in ``RUN/curve/curve.json``, the picture ``RUN/curve/curve.png`` (Elo
against hours, intervals drawn, anchors as lines; a log time axis where the
times triple twice, or as --time-axis says) and TensorBoard scalars
``curve/elo`` (``_low``, ``_high``) at each checkpoint's step under
``RUN/tb/curve/`` (their wall time is the run's time, so TensorBoard's
"relative" axis reads the run's hours).

Example::

    points = run_curve(RunDir("runs/init"), config, CurveSettings(games=40), per_hour=1.0)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alphazero.errors import UserError
from alphazero.store.checkpoint import checkpoint_name, checkpoint_steps, read_payload
from alphazero.store.rundir import RunDir, atomic_write_text, check_writable_directory
from alphazero.store.sources import Network, NetworkSource, load_network
from eval.agents import Agent, RandomAgent, StockfishAgent
from eval.curve_picture import CURVE_JSON, Panel, draw_curve, draw_panels, fixed_lines, read_panel
from eval.elo import Rating, Ratings, Summary, fit_ratings, match_summary
from eval.eval_settings import QUICK_PLY_LIMIT, QUICK_SIMULATIONS, SETTINGS_FILE
from eval.evaluate import stockfish_name
from eval.match import match_id_of, play_match
from eval.match_records import read_game_records
from eval.openings import load_openings

CURVE_SIMULATIONS = QUICK_SIMULATIONS  # the quick evaluation's settings, so that its games join the fit
CURVE_PLY_LIMIT = QUICK_PLY_LIMIT
CURVE_FORMAT = "alphazero-curve"
RANDOM = "random"
RUNG_ROUNDS = 3
"""Rounds of choosing each checkpoint's nearest rungs from the fit of the games so far, then playing them."""


@dataclass(frozen=True)
class CurveSettings:
    """How the curve's games are played: ``games`` per pairing (rounded up to even), the search agents'
    ``simulations``, the anchors (``stockfish_elos``, ``include_random``), ``ply_limit`` and
    ``concurrency``; ``stockfish_depth`` replaces the Elo-calibrated limit (tests); ``openings`` names a
    book (eval.openings: the suite's 46 lines allow 92 distinct games a pairing, a book more); ``rungs`` is
    how many of the ladder's rungs each checkpoint plays, those nearest it (0: none)."""

    games: int = 20
    simulations: int = CURVE_SIMULATIONS
    stockfish_elos: tuple[int, ...] = ()
    include_random: bool = True
    ply_limit: int = CURVE_PLY_LIMIT
    concurrency: int = 16
    stockfish_depth: int | None = None
    openings: str | None = None  # an opening book (EPD, PGN or the suite's format); None: the suite
    rungs: int = 0

    def check(self) -> None:
        """Raises UserError on a value out of range."""
        if self.games < 1 or self.simulations < 1 or self.ply_limit < 1 or self.concurrency < 1:
            raise UserError("games, simulations, the ply limit and concurrency must each be at least 1")
        if self.rungs < 0:
            raise UserError(f"--rungs takes 0 or more, got {self.rungs}")
        if len(set(self.stockfish_elos)) != len(self.stockfish_elos):
            raise UserError(f"Stockfish levels repeat: {list(self.stockfish_elos)}")

    def matches(self, played: dict[str, Any]) -> bool:
        """Whether games played with ``played`` settings (a settings.json) may join this curve's fit."""
        return (played.get("simulations") == self.simulations and played.get("ply_limit") == self.ply_limit
                and played.get("stockfish_depth") == self.stockfish_depth)


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint of the run: its step, the run's hours when it was written, and whether those hours were
    read from the checkpoint (``run_seconds``) or guessed from the files' times (older runs)."""

    step: int
    hours: float
    exact: bool = True


def checkpoint_name_of(step: int, simulations: int) -> str:
    """The curve's name of a checkpoint's search agent: 'step1200:search:64'."""
    return f"step{step}:search:{simulations}"


# --- choosing checkpoints ------------------------------------------------------------------------


def run_checkpoints(run: RunDir) -> list[Checkpoint]:
    """Lists the run's checkpoints with their hours, oldest first.

    Raises:
        UserError: the run has no checkpoints, or one cannot be read.
    """
    steps = checkpoint_steps(run)
    if not steps:
        raise UserError(f"run {run.root} has no checkpoints: train it first (alphazero train --run {run.root})")
    first_mtime = (run.checkpoints / checkpoint_name(steps[0])).stat().st_mtime
    points = []
    for step in steps:
        path = run.checkpoints / checkpoint_name(step)
        seconds = read_payload(path).get("run_seconds")
        if isinstance(seconds, (int, float)):
            points.append(Checkpoint(step, float(seconds) / 3600.0))
        else:  # written before checkpoints kept the run's time: the file times (sittings' gaps included)
            points.append(Checkpoint(step, (path.stat().st_mtime - first_mtime) / 3600.0, exact=False))
    return points


def choose_checkpoints(points: Sequence[Checkpoint], *, every: int | None = None, per_hour: float | None = None,
                       hours: Sequence[float] | None = None, steps: Sequence[int] | None = None) -> list[Checkpoint]:
    """Chooses the curve's checkpoints (at most one way may be given; default one per hour).

    ``every``: every Nth checkpoint; ``per_hour``: the checkpoint nearest to
    each 1/per_hour hours of the run (up to its end); ``hours``: the one
    nearest to each of these hours; ``steps``: these steps. The first
    checkpoint (the start) and the latest are always chosen. (The learner
    keeps one checkpoint per learner.keep_every_minutes for this.)

    Raises:
        UserError: more than one way given, a bad value, or a step the run does not have.
    """
    if sum(option is not None for option in (every, per_hour, hours, steps)) > 1:
        raise UserError("choose checkpoints one way: --every, --per-hour, --hours or --steps")
    chosen: list[Checkpoint] = []
    if steps is not None:
        by_step = {point.step: point for point in points}
        missing = [step for step in steps if step not in by_step]
        if missing:
            raise UserError(f"the run has no checkpoint at step {missing[0]} "
                            f"(its checkpoints: {', '.join(str(p.step) for p in points)})")
        chosen = [by_step[step] for step in steps]
    elif every is not None:
        if every < 1:
            raise UserError(f"--every takes 1 or more, got {every}")
        chosen = list(points[::every])
    else:
        if hours is None:
            rate = 1.0 if per_hour is None else per_hour
            if not 0 < rate < math.inf:  # an infinite rate has no hours to mark
                raise UserError(f"--per-hour must be positive and finite, got {per_hour}")
            last = points[-1].hours
            hours = [k / rate for k in range(1, int(math.floor(last * rate + 1e-9)) + 1)]
        for mark in hours:
            if not mark >= 0:
                raise UserError(f"hours must be 0 or more, got {mark}")
            chosen.append(min(points, key=lambda point: (abs(point.hours - mark), point.hours)))
    chosen = [points[0], *chosen, points[-1]]
    return sorted({point.step: point for point in chosen}.values(), key=lambda point: point.step)


# --- the games -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pairing:
    """Two players of the curve and the games they should have played."""

    a: str
    b: str
    games: int


def pairings(chosen: Sequence[Checkpoint], settings: CurveSettings,
             rungs: dict[int, tuple[str, ...]] | None = None) -> list[Pairing]:
    """Gets every pairing the curve needs (see the module docstring); `rungs` maps a checkpoint's step to the
    ladder rungs it plays."""
    names = [checkpoint_name_of(point.step, settings.simulations) for point in chosen]
    games = settings.games + settings.games % 2
    pairs = []
    for index, name in enumerate(names[1:], start=1):
        pairs.append(Pairing(name, names[index - 1], games))
        if index > 1:
            pairs.append(Pairing(name, names[0], games))
    anchors = [RANDOM] if settings.include_random else []
    anchors += [stockfish_name(elo) for elo in settings.stockfish_elos]
    pairs += [Pairing(name, anchor, games) for name in names for anchor in anchors]
    for point, name in zip(chosen, names, strict=True):
        pairs += [Pairing(name, rung, games) for rung in (rungs or {}).get(point.step, ())
                  if rung not in anchors]
    return pairs


def _ladder_anchors(settings: CurveSettings) -> dict[str, float]:
    """The shipped ladder's rungs at their calibrated Elo when the curve plays rungs, else none."""
    if settings.rungs == 0:
        return {}
    from eval.ladder import load_ladder

    return load_ladder().anchors()


def _eval_games(run: RunDir, settings: CurveSettings) -> list[tuple[str, str, float]]:
    """Gets the periodic evaluation's games that fit the curve: its search agent's games against the
    start's, random and Stockfish levels, from folders played with the curve's settings."""
    games = []
    search = f"search:{settings.simulations}"
    for folder in sorted(run.eval.glob("step_*")) if run.eval.is_dir() else []:
        try:
            played = json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8"))
            step = int(folder.name.removeprefix("step_"))
        except (OSError, ValueError):
            continue
        if not isinstance(played, dict) or not settings.matches(played):
            continue
        names = {search: checkpoint_name_of(step, settings.simulations),
                 f"start:{search}": checkpoint_name_of(0, settings.simulations), RANDOM: RANDOM}
        names.update({stockfish_name(elo): stockfish_name(elo) for elo in settings.stockfish_elos})
        names.update({spec: spec for spec in _ladder_anchors(settings)})
        for path in sorted(folder.glob("*.jsonl")):
            for record in read_game_records(path):
                a, b = names.get(record["agent_a"]), names.get(record["agent_b"])
                if a is not None and b is not None and a != b:
                    games.append((a, b, float(record["score_a"])))
    return games


def curve_games(run: RunDir, settings: CurveSettings) -> list[tuple[str, str, float]]:
    """Gets every game the curve can use: its own (RUN/curve/games/) and the periodic evaluation's."""
    games = []
    folder = run.root / "curve" / "games"
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        games += [(r["agent_a"], r["agent_b"], float(r["score_a"])) for r in read_game_records(path)]
    return games + _eval_games(run, settings)


def _played(games: Iterable[tuple[str, str, float]]) -> dict[frozenset[str], int]:
    counts: dict[frozenset[str], int] = defaultdict(int)
    for a, b, _ in games:
        counts[frozenset((a, b))] += 1
    return counts


class _Players:
    """Makes the curve's agents on first use and closes them at the end."""

    def __init__(self, run: RunDir, settings: CurveSettings, device: str) -> None:
        self.run, self.settings, self.device = run, settings, device
        self.networks: dict[int, Network] = {}
        self.agents: dict[str, Agent] = {}

    def get(self, name: str) -> Agent:
        if name not in self.agents:
            self.agents[name] = self._make(name)
        return self.agents[name]

    def _make(self, name: str) -> Agent:
        from eval.network_agents import SearchAgent

        if name == RANDOM:
            return RandomAgent(0, name=RANDOM)
        if name.startswith("stockfish:elo="):
            return StockfishAgent(elo=int(name.split("=", 1)[1]), depth=self.settings.stockfish_depth, name=name)
        if not name.startswith("step"):  # a rung of the ladder
            from eval.agents import parse_player

            return parse_player(name)
        step = int(name.removeprefix("step").split(":", 1)[0])
        if step not in self.networks:
            self.networks[step] = load_network(NetworkSource(self.run.root, str(step)), device=self.device)
        return SearchAgent(self.networks[step], self.settings.simulations, name)

    def close(self) -> None:
        for agent in self.agents.values():
            agent.close()


def choose_rungs(run: RunDir, chosen: Sequence[Checkpoint], settings: CurveSettings) -> dict[int, tuple[str, ...]]:
    """Chooses each checkpoint's ladder rungs: the settings.rungs nearest its estimate (eval.ladder.estimate_of
    of its rating in the fit of the games on disk, else in the periodic evaluation's ratings of that step, else
    none: spread over the ladder), among the rungs whose engine is installed."""
    if settings.rungs == 0:
        return {}
    from eval.ladder import estimate_of, playable_ladder

    ladder, _ = playable_ladder()
    if not ladder.rungs:
        return {}
    estimates = _estimates(run, chosen, settings)
    return {point.step: tuple(rung.spec for rung in ladder.nearest(estimate_of(estimates.get(point.step)),
                                                                    settings.rungs))
            for point in chosen}


def _estimates(run: RunDir, chosen: Sequence[Checkpoint], settings: CurveSettings) -> dict[int, Rating]:
    """Each checkpoint's rating in the fit of the games on disk, else in its periodic evaluation's file."""
    from eval.checkpoint_ratings import load_ratings, ratings_path

    fitted: Ratings | dict[str, Rating] = {}
    try:
        _, fitted, _ = fit_curve(curve_games(run, settings), chosen, settings)
    except UserError:
        pass  # no game links the checkpoints to an anchor yet
    estimates = {}
    for point in chosen:
        rating = fitted.get(checkpoint_name_of(point.step, settings.simulations))
        path = ratings_path(run, point.step)
        if rating is None and path.is_file():
            try:
                rating = load_ratings(path).get(f"search:{settings.simulations}")
            except UserError:
                rating = None
        if rating is not None:
            estimates[point.step] = rating
    return estimates


def play_curve_games(run: RunDir, pairs: Sequence[Pairing], settings: CurveSettings, *, device: str = "auto",
                     progress: bool = True) -> int:
    """Plays what each pairing still misses (games already on disk count); returns the games played.

    Each pairing's new games start at the suite's next unplayed opening. The
    files are written after every game, so an interruption (Ctrl-C, raised
    here) keeps every finished game.
    """
    have = _played(curve_games(run, settings))
    todo = [(pair, pair.games - have[frozenset((pair.a, pair.b))]) for pair in pairs]
    todo = [(pair, missing + missing % 2) for pair, missing in todo if missing > 0]
    if not todo:
        return 0
    games_dir, pgn_dir = run.root / "curve" / "games", run.games / "curve"
    check_writable_directory(games_dir, "the curve's games")
    check_writable_directory(pgn_dir, "the curve's PGN")
    total = sum(missing for _, missing in todo)
    if progress:
        print(f"curve: {total} games to play in {len(todo)} pairings "
              f"({sum(have.values())} on disk already)", flush=True)
    openings = load_openings(settings.openings)
    players = _Players(run, settings, device)
    played = 0
    try:
        for number, (pair, missing) in enumerate(todo, start=1):
            first = (have[frozenset((pair.a, pair.b))] + 1) // 2  # the next opening of the suite
            while (games_dir / f"{match_id_of(pair.a, pair.b, f'-{first:04d}')}.jsonl").exists():
                first += 1  # never overwrite kept games
            if progress:
                print(f"curve: pairing {number} of {len(todo)}: {pair.a} vs {pair.b}, {missing} games", flush=True)
            result = play_match(players.get(pair.a), players.get(pair.b), games=missing,
                                concurrency=min(settings.concurrency, missing), ply_limit=settings.ply_limit,
                                out_dir=games_dir, pgn_dir=pgn_dir, progress=progress, openings=openings,
                                seed=first,
                                match_id=match_id_of(pair.a, pair.b, f"-{first:04d}"))
            played += len(result.games)
    finally:
        players.close()
    return played


# --- the fit and its outputs ------------------------------------------------------------------------


@dataclass(frozen=True)
class CurvePoint:
    """A checkpoint's place on the curve."""

    step: int
    hours: float
    exact_hours: bool
    games: int
    elo: float
    low: float
    high: float
    # Head to head against the checkpoint chosen before it (the module docstring says why); ``before`` is None
    # for the first point, ``gain`` None while the two have no game.
    before: int | None = None
    gain: float | None = None
    gain_low: float | None = None
    gain_high: float | None = None
    gain_games: int = 0
    # 'below 1320' when every game against the anchors was lost ('above ...' all won): elo, low and high then
    # come from the fit's prior, not the games, and are not shown.
    bound: str | None = None


def head_to_head(games: Iterable[tuple[str, str, float]], a: str, b: str) -> Summary:
    """Sums a's games against b (either order in the records) as a match from a's side."""
    wins = draws = losses = 0
    for first, second, score in games:
        if (first, second) == (b, a):
            score = 1.0 - score
        elif (first, second) != (a, b):
            continue
        wins += score == 1.0
        draws += score == 0.5
        losses += score == 0.0
    return match_summary(wins, draws, losses)


def fit_curve(games: Sequence[tuple[str, str, float]], chosen: Sequence[Checkpoint],
              settings: CurveSettings) -> tuple[list[CurvePoint], Ratings, dict[str, float]]:
    """Fits every game at once: (the chosen checkpoints' points, every rating, the anchors).

    Raises:
        UserError: no game yet links the checkpoints to an anchor.
    """
    names = {checkpoint_name_of(point.step, settings.simulations) for point in chosen}
    anchors: dict[str, float] = {stockfish_name(elo): float(elo) for elo in settings.stockfish_elos}
    anchors.update(_ladder_anchors(settings))  # the ladder's Stockfish rung keeps its calibrated Elo
    if not anchors:
        anchors = {checkpoint_name_of(chosen[0].step, settings.simulations): 0.0}
    wanted = names | set(anchors) | ({RANDOM} if settings.include_random else set())
    used = [(a, b, score) for a, b, score in games if a in wanted and b in wanted]
    anchors = {name: elo for name, elo in anchors.items() if any(name in (a, b) for a, b, _ in used)} or anchors
    try:
        ratings = fit_ratings(used, anchors)
    except ValueError as error:
        raise UserError(f"the curve cannot be fitted yet: {error}; play its games first") from None
    points = []
    for index, point in enumerate(chosen):
        name = checkpoint_name_of(point.step, settings.simulations)
        rating = ratings.get(name)
        if rating is None:
            continue
        gain: dict[str, Any] = {}
        if index > 0:
            before = chosen[index - 1].step
            summary = head_to_head(used, name, checkpoint_name_of(before, settings.simulations))
            gain = {"before": before, "gain_games": summary.games}
            if summary.games:
                gain |= {"gain": summary.elo, "gain_low": summary.elo_low, "gain_high": summary.elo_high}
        bound = rating.bound.text() if rating.bound is not None else None
        points.append(CurvePoint(point.step, point.hours, point.exact, rating.games, rating.elo, rating.low,
                                 rating.high, **gain, bound=bound))
    return points, ratings, anchors


def curve_table(points: Sequence[CurvePoint], ratings: Ratings, anchors: dict[str, float], title: str) -> Any:
    """The rich table: step, hours, games, Elo, 95% interval, the gain over the checkpoint before (head to
    head); then the anchors and random."""
    from rich.table import Table

    table = Table(title=title, caption="gain: head to head against the checkpoint above it, from their own games")
    for column in ("checkpoint", "hours", "games", "Elo", "95%", "gain", "95%"):
        table.add_column(column, justify="left" if column == "checkpoint" else "right", no_wrap=True)
    for point in points:
        hours = f"{point.hours:.2f}" + ("" if point.exact_hours else " ~")
        anchored = point.low == point.high and any(name.startswith(f"step{point.step}:") for name in anchors)
        elo, interval = f"{point.elo:.0f}", "anchor" if anchored else f"{point.low:.0f}..{point.high:.0f}"
        if point.bound is not None:
            elo, interval = point.bound, "-"
        table.add_row(f"step {point.step:,}", hours, str(point.games), elo, interval, *_gain_text(point))
    for name, rating in sorted(ratings.items(), key=lambda item: -item[1].elo):
        if name == RANDOM or name in anchors and not name.startswith("step"):
            interval = "anchor" if name in anchors else f"{rating.low:.0f}..{rating.high:.0f}"
            elo = rating.bound.text() if rating.bound is not None else f"{rating.elo:.0f}"
            table.add_row(name, "", str(rating.games), elo, "-" if rating.bound is not None else interval, "", "")
    return table


def _gain_text(point: CurvePoint) -> tuple[str, str]:
    """('+306', '+232..+412') against the checkpoint before; blank for the first; 'none' with no game yet."""
    if point.before is None:
        return "", ""
    if point.gain is None or point.gain_low is None or point.gain_high is None:
        return "none", ""
    return f"{point.gain:+.0f}", f"{point.gain_low:+.0f}..{point.gain_high:+.0f}"


def write_curve_json(path: Path, points: Sequence[CurvePoint], ratings: Ratings, anchors: dict[str, float],
                     settings: CurveSettings) -> None:
    payload = {
        "format": CURVE_FORMAT, "version": 1, "settings": dataclasses.asdict(settings), "anchors": anchors,
        "draw_elo": ratings.draw_elo, "points": [dataclasses.asdict(point) for point in points],
        "ratings": {name: dataclasses.asdict(rating) for name, rating in ratings.items()},
    }
    atomic_write_text(path, json.dumps(payload, indent=2) + "\n")


def curve_title(run: RunDir, simulations: int) -> str:
    """The curve's title: the run's name (its folder's), never its path, which names the machine it was drawn on.

    >>> curve_title(RunDir("/home/me/runs/zero3h"), 64)
    'zero3h: Elo of search:64 over the run'
    """
    name = run.root.name or run.root.resolve().name  # "." has no name of its own
    return f"{name}: Elo of search:{simulations} over the run"


def write_curve_tensorboard(run: RunDir, points: Sequence[CurvePoint]) -> None:
    """Writes curve/elo (and _low, _high) at each point's step, its wall time the run's seconds; a point with a
    bound writes curve/elo_bound at the bound instead."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(run.tb / "curve"))
    try:
        for point in points:
            if point.bound is not None:
                writer.add_scalar("curve/elo_bound", float(point.bound.split()[1]), point.step,
                                  walltime=point.hours * 3600.0)
                continue
            for suffix, value in (("", point.elo), ("_low", point.low), ("_high", point.high)):
                if math.isfinite(value):
                    writer.add_scalar(f"curve/elo{suffix}", value, point.step, walltime=point.hours * 3600.0)
    finally:
        writer.close()


# --- the command ------------------------------------------------------------------------------


def _number_list(text: str | None, kind: type, option: str) -> list[Any] | None:
    if text is None:
        return None
    try:
        return [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"{option} takes numbers separated by commas, got {text!r}") from None


def run_curve_command(args: argparse.Namespace) -> None:
    """Runs `alphazero curve`: plays what is missing, fits, prints, writes curve.json, curve.png, TensorBoard."""
    from rich.console import Console

    from alphazero.chess.stockfish import find_stockfish

    run, config = RunDir.open(args.run, [])
    for other in args.beside:
        if not (Path(other) / CURVE_JSON).is_file():
            raise UserError(f"--beside {other}: no {CURVE_JSON} there; run `alphazero curve --run {other}` first")
    rungs = _ladder_rungs(args.rungs)
    elos = _number_list(args.stockfish_elos, int, "--stockfish-elos")
    if elos is None:  # the ladder's rungs replace the lowest Stockfish level as the default anchors
        elos = [min(config.eval.stockfish_elos)] if config.eval.stockfish_elos and find_stockfish() \
            and rungs == 0 else []
    settings = CurveSettings(games=args.games, simulations=args.simulations, stockfish_elos=tuple(elos),
                             include_random=not args.no_random, ply_limit=args.ply_limit,
                             concurrency=args.concurrency, stockfish_depth=args.stockfish_depth,
                             openings=args.openings, rungs=rungs)
    settings.check()
    chosen = choose_checkpoints(run_checkpoints(run), every=args.every, per_hour=args.per_hour,
                                hours=_number_list(args.hours, float, "--hours"),
                                steps=_number_list(args.steps, int, "--steps"))
    interrupted = False
    try:
        if not args.no_play:
            _say_missing_rung_engines(settings)
            for _ in range(RUNG_ROUNDS if settings.rungs else 1):  # rungs follow the estimates as games come in
                pairs = pairings(chosen, settings, choose_rungs(run, chosen, settings))
                if not play_curve_games(run, pairs, settings, device=args.device, progress=not args.no_progress):
                    break
    except KeyboardInterrupt:
        interrupted = True
        print("curve: interrupted; the finished games are kept, and a rerun plays the rest", file=sys.stderr)
    report_curve(run, chosen, settings, Console(), axis=args.time_axis)
    if args.beside:
        # Each panel from its run's curve.json, this one's just written: one reader for all.
        panels = [read_panel(root, CurvePoint, RANDOM) for root in (run.root, *map(Path, args.beside))]
        path = run.root / "curve" / "beside.png"
        draw_panels(path, panels, axis=args.time_axis)
        print(f"curve: {path} draws {', '.join(panel.title for panel in panels)} side by side")
    if interrupted:
        raise KeyboardInterrupt


def _ladder_rungs(count: int) -> int:
    """The rungs each checkpoint plays: `count`, or 0 (said on stderr) when the shipped ladder cannot be read."""
    from eval.ladder import load_ladder

    if count > 0:
        try:
            load_ladder()
        except UserError as error:
            print(f"curve: the ladder is off: {error}", file=sys.stderr)
            return 0
    return count


def _say_missing_rung_engines(settings: CurveSettings) -> None:
    """Says on stderr, one line each, which rung engines are missing here (and how to install them)."""
    if settings.rungs:
        from eval.ladder import playable_ladder

        for line in playable_ladder()[1]:
            print(f"curve: {line}", file=sys.stderr)


def report_curve(run: RunDir, chosen: Sequence[Checkpoint], settings: CurveSettings,
                 console: Any, *, axis: str = "auto") -> list[CurvePoint]:
    """Fits the games on disk and writes the table, curve.json, curve.png (its time axis as ``axis`` says:
    eval.curve_picture.time_axis) and TensorBoard; returns the points."""
    points, ratings, anchors = fit_curve(curve_games(run, settings), chosen, settings)
    title = curve_title(run, settings.simulations)
    console.print(curve_table(points, ratings, anchors, title))
    folder = run.root / "curve"
    check_writable_directory(folder, "the curve")
    write_curve_json(folder / "curve.json", points, ratings, anchors, settings)
    relative = all(name.startswith("step") for name in anchors)
    draw_curve(folder / "curve.png", Panel(title, points, fixed_lines(ratings, anchors, RANDOM)), relative=relative,
               axis=axis)
    try:
        write_curve_tensorboard(run, points)
    except OSError as error:
        print(f"warning: cannot write TensorBoard events in {run.tb / 'curve'}: {error.strerror or error}",
              file=sys.stderr)
    console.print(f"curve written to {folder / 'curve.png'} and {folder / 'curve.json'}")
    if not all(point.exact_hours for point in points):
        console.print("hours marked ~ come from the checkpoint files' times (written before checkpoints kept the "
                      "run's time): they include the gaps between sittings")
    return points


__all__ = [
    "Checkpoint", "CurvePoint", "CurveSettings", "choose_checkpoints", "choose_rungs", "curve_games", "curve_title",
    "fit_curve", "head_to_head", "pairings", "play_curve_games", "report_curve", "run_checkpoints", "run_curve_command",
]
