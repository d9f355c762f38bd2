"""`alphazero eval`: rates one checkpoint's agents against each other, random and Stockfish.

The checkpoint plays as three agents, `policy`, `value` and `search:N` (see
eval.network_agents). Matches: every pair of those three, each of them
against `random`, and each against Stockfish at every UCI_Elo level
(`stockfish:elo=E`). All games go into one maximum-likelihood fit
(eval.elo.fit_ratings, BayesElo's draw model) with the Stockfish levels
anchored at their UCI_Elo, so every rating is on Stockfish's Elo scale.

Outputs, for learner step S (0 for fresh weights):

- `run/eval/ratings_step_<S:09d>.json`: the settings and every rating
  (written atomically; a temporary folder, named on stderr, when the run
  stops taking files after the games); `load_ratings` reads it back;
- `run/tb/eval/`: TensorBoard scalars `elo/<agent>` at step S, the anchors
  included (a Stockfish level is a flat line at its UCI_Elo), and a
  custom-scalars chart with all of them, so a flat curve reads as flat;
- `run/eval/step_<S:09d>/<match>.jsonl` and `run/games/eval/step_<S:09d>/<match>.pgn`;
- a table like ChessBench's Table 1 (agent, Elo, 95% interval, games, score).

Sizes: `EvalSettings.full(config.eval)` is the run's eval section (400
simulations, config.eval.games per pair, every Stockfish level);
`EvalSettings.quick(config.eval)` (4 games per pair, 64 simulations, the
lowest Stockfish level, 200-ply games) finishes on a fresh tiny run in a few
minutes on 2 CPU cores. The training loop calls `evaluate_checkpoint` every
K learner steps (PeriodicEvaluation), within a share of the wall time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from alphazero.checkpoint import checkpoint_name
from alphazero.config import Config, EvalConfig
from alphazero.errors import UserError
from alphazero.network import AlphaZeroNet, Evaluator, build_network, cpu_state_dict, pick_device
from alphazero.rundir import RunDir, atomic_write_text, check_writable_directory
from alphazero.stockfish import INSTALL_HINT, find_stockfish
from eval.agents import Agent, RandomAgent, StockfishAgent
from eval.elo import Rating, Ratings, fit_ratings
from eval.match import MatchResult, play_match
from eval.network_agents import (
    FRESH, Network, NetworkSource, PolicyAgent, SearchAgent, ValueAgent, load_network,
)

QUICK_GAMES_PER_PAIR = 4
QUICK_SIMULATIONS = 64
QUICK_PLY_LIMIT = 200
FULL_PLY_LIMIT = 512
RANDOM_ANCHOR_ELO = 0.0
"""The rating of `random` when no Stockfish level is played (ratings are then relative to it)."""

RATINGS_FORMAT = "alphazero-ratings"


@dataclass(frozen=True)
class EvalSettings:
    """How big an evaluation is.

    `games_per_pair` is rounded up to even (each opening with both colours);
    `stockfish_depth`, when set, replaces the calibrated default search limit
    of the Stockfish levels (for tests; the anchors keep their UCI_Elo).
    """

    games_per_pair: int
    simulations: int
    stockfish_elos: tuple[int, ...]
    stockfish_depth: int | None = None
    include_random: bool = True
    ply_limit: int = FULL_PLY_LIMIT
    concurrency: int = 16
    seed: int = 0

    @classmethod
    def full(cls, config: EvalConfig) -> EvalSettings:
        """Returns the run's eval section as settings: config.eval.games per pair, its simulations and levels."""
        return cls(config.games, config.simulations, tuple(config.stockfish_elos))

    @classmethod
    def quick(cls, config: EvalConfig) -> EvalSettings:
        """Returns settings for a CPU: 4 games per pair, 64 simulations, the lowest Stockfish level, 200 plies."""
        elos = (min(config.stockfish_elos),) if config.stockfish_elos else ()
        return cls(QUICK_GAMES_PER_PAIR, QUICK_SIMULATIONS, elos, ply_limit=QUICK_PLY_LIMIT)

    def check(self) -> None:
        """Raises UserError on a value out of range."""
        if self.games_per_pair < 1:
            raise UserError(f"games per pair must be at least 1, got {self.games_per_pair}")
        if self.simulations < 1:
            raise UserError(f"simulations must be at least 1, got {self.simulations}")
        if self.ply_limit < 1 or self.concurrency < 1:
            raise UserError(f"ply limit and concurrency must be at least 1, got {self.ply_limit}, {self.concurrency}")
        if len(set(self.stockfish_elos)) != len(self.stockfish_elos):
            raise UserError(f"Stockfish levels repeat: {list(self.stockfish_elos)}")


@dataclass
class _Pairing:
    """The agents of one evaluation and which pairs play."""

    network_agents: list[Agent]
    others: list[Agent]
    anchors: dict[str, float]

    @property
    def pairs(self) -> list[tuple[Agent, Agent]]:
        pairs = [(a, b) for i, a in enumerate(self.network_agents) for b in self.network_agents[i + 1:]]
        return pairs + [(a, b) for b in self.others for a in self.network_agents]

    def close(self) -> None:
        for agent in [*self.network_agents, *self.others]:
            agent.close()


def stockfish_name(elo: int) -> str:
    """Names the Stockfish agent of a UCI_Elo level: 'stockfish:elo=1500'."""
    return f"stockfish:elo={elo}"


def ratings_path(run: RunDir, step: int) -> Path:
    """Returns the ratings JSON of a step: run/eval/ratings_step_000001200.json."""
    return run.eval / f"ratings_{checkpoint_name(step).removesuffix('.pt')}.json"


# --- the pieces ------------------------------------------------------------------------------


def _network(run: RunDir, config: Config, step: int | None, model: AlphaZeroNet | None, device: str) -> Network:
    """Gets the network to rate: `model` as step `step`, else the run's checkpoint `step` (None: latest)."""
    if model is not None:
        if step is None:
            raise UserError("evaluate_checkpoint needs the step of the model it is given")
        return Network(Evaluator(_copy_model(model, device)), f"step {step}", f"step{step}", step, None, False,
                       config)
    # A run's step 0 is rated as the run has it (fresh weights), never as the built-in network.
    source = NetworkSource(run.root, None if step is None else str(step), fallback=FRESH)
    network = load_network(source, device=device)
    if network.config is None:
        network.config = config
    return network


def _copy_model(model: AlphaZeroNet, device: str) -> AlphaZeroNet:
    """Copies a live model's weights into a new one, so that the caller's model (training, on its
    device, maybe compiled) is left exactly as it was. 'auto' keeps the model's device."""
    config = getattr(model, "_orig_mod", model).config
    target = next(model.parameters()).device if device == "auto" else pick_device(device)
    copy = build_network(config)
    copy.load_state_dict(cpu_state_dict(model))
    return copy.to(target).eval()


def _build_agents(network: Network, settings: EvalSettings) -> _Pairing:
    """Makes the three network agents, random and the Stockfish levels (raises UserError without Stockfish)."""
    agents: list[Agent] = [
        PolicyAgent(network, "policy"),
        ValueAgent(network, "value"),
        SearchAgent(network, settings.simulations, f"search:{settings.simulations}"),
    ]
    pairing = _Pairing(agents, [], {})
    try:
        if settings.include_random:
            pairing.others.append(RandomAgent(settings.seed, name="random"))
        for elo in settings.stockfish_elos:
            name = stockfish_name(elo)
            pairing.others.append(StockfishAgent(elo=elo, depth=settings.stockfish_depth, name=name))
            pairing.anchors[name] = float(elo)
    except BaseException:
        pairing.close()
        raise
    if not pairing.anchors:
        if not settings.include_random:
            raise UserError("nothing to anchor the ratings: give Stockfish levels or keep the random agent")
        pairing.anchors["random"] = RANDOM_ANCHOR_ELO
    return pairing


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "-", text).strip("-.")


def _play_pair(a: Agent, b: Agent, run: RunDir, step: int, settings: EvalSettings, progress: bool) -> MatchResult:
    """Plays one match; JSON lines go to run/eval/step_S/, the PGN to run/games/eval/step_S/."""
    folder = checkpoint_name(step).removesuffix(".pt")
    jsonl_dir = run.eval / folder
    pgn_dir = run.games / "eval" / folder
    games = settings.games_per_pair + settings.games_per_pair % 2
    result = play_match(
        a, b, games=games, concurrency=min(settings.concurrency, games),
        ply_limit=settings.ply_limit, out_dir=jsonl_dir, pgn_dir=pgn_dir, progress=progress, seed=settings.seed,
        match_id=f"{_slug(a.name)}-vs-{_slug(b.name)}",
    )
    return result


def _games(results: Sequence[MatchResult]) -> list[tuple[str, str, float]]:
    return [(r.agent_a, r.agent_b, g.score_a) for r in results for g in r.games]


def _scores(games: Sequence[tuple[str, str, float]]) -> dict[str, float]:
    """Returns each player's mean points per game."""
    points: dict[str, float] = defaultdict(float)
    played: dict[str, int] = defaultdict(int)
    for a, b, score in games:
        points[a] += score
        points[b] += 1.0 - score
        played[a] += 1
        played[b] += 1
    return {p: points[p] / played[p] for p in played}


# --- outputs ----------------------------------------------------------------------------------


def ratings_table(ratings: Ratings, scores: dict[str, float], anchors: dict[str, float], title: str) -> Table:
    """Builds the rich table: agent, Elo, 95% interval, games, score; best first, anchors marked."""
    table = Table(title=title)
    for column, justify in (("Agent", "left"), ("Elo", "right"), ("95% interval", "right"),
                            ("Games", "right"), ("Score", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for name, rating in sorted(ratings.items(), key=lambda item: -item[1].elo):
        interval = "anchor" if name in anchors else f"{rating.low:.0f}..{rating.high:.0f}"
        score = f"{100 * scores[name]:.1f}%" if name in scores else "-"
        table.add_row(name, f"{rating.elo:.0f}", interval, str(rating.games), score)
    return table


def _ratings_json(network: Network, step: int, settings: EvalSettings, ratings: Ratings,
                  scores: dict[str, float], anchors: dict[str, float], results: Sequence[MatchResult]) -> str:
    payload: dict[str, Any] = {
        "format": RATINGS_FORMAT,
        "version": 1,
        "step": step,
        "network": network.label,
        "checkpoint": str(network.path) if network.path is not None else None,
        "fresh_weights": network.fresh,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": dataclasses.asdict(settings),
        "anchors": anchors,
        "draw_elo": ratings.draw_elo,
        "ratings": {
            name: {**dataclasses.asdict(r), "score": scores.get(name), "anchor": name in anchors}
            for name, r in ratings.items()
        },
        "matches": [
            {"agent_a": r.agent_a, "agent_b": r.agent_b, "wins": r.wins, "draws": r.draws, "losses": r.losses,
             "jsonl": str(r.jsonl_path) if r.jsonl_path else None, "pgn": str(r.pgn_path) if r.pgn_path else None}
            for r in results
        ],
    }
    return json.dumps(payload, indent=2) + "\n"


def load_ratings(path: str | os.PathLike[str]) -> dict[str, Rating]:
    """Reads the ratings of a ratings JSON written by evaluate_checkpoint.

    Raises UserError if the file is missing or not a ratings file.
    """
    try:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        return {name: Rating(r["elo"], r["low"], r["high"], r["games"]) for name, r in payload["ratings"].items()}
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path} is not a ratings file: {error}") from None


# TensorBoard's Custom Scalars tab: every agent and anchor on one chart.
ELO_LAYOUT = {"eval": {"Elo of every agent, with the anchors": ["Multiline", [r"elo/.*"]]}}


def _write_tensorboard(run: RunDir, step: int, ratings: Ratings, anchors: dict[str, float]) -> None:
    """Adds `elo/<agent>` scalars at `step` under run/tb/eval/, anchors included, and the one-chart layout."""
    from torch.utils.tensorboard import SummaryWriter  # imported here: it is slow and only needed now

    writer = SummaryWriter(log_dir=str(run.tb / "eval"))
    try:
        writer.add_custom_scalars(ELO_LAYOUT)
        for name, rating in sorted(ratings.items()):
            writer.add_scalar(f"elo/{name}", rating.elo, step)
    finally:
        writer.close()


# --- the entry point ----------------------------------------------------------------------------


def evaluate_checkpoint(
    run: RunDir | str | os.PathLike[str],
    config: Config,
    step: int | None = None,
    *,
    settings: EvalSettings | None = None,
    games_per_pair: int | None = None,
    simulations: int | None = None,
    stockfish_elos: Sequence[int] | None = None,
    stockfish_depth: int | None = None,
    model: AlphaZeroNet | None = None,
    device: str = "auto",
    progress: bool = True,
    report: bool = True,
    console: Console | None = None,
) -> Ratings:
    """Rates a checkpoint's policy, value and search agents; writes JSON, TensorBoard and games.

    `step` picks the run's checkpoint (None: the latest; a run without any
    plays fresh weights as step 0, with a warning). The training loop can
    pass its live `model` with its `step` instead of a file. Sizes come
    from `settings` (default EvalSettings.full(config.eval)), then the
    keyword overrides. `progress` shows a bar per match; `report` prints
    the rating table on `console` (default stdout).

    Returns the fitted ratings (name -> Rating, plus draw_elo).

    Every output folder is checked for writing before the first game; if a
    file cannot be written after the games (a disk that filled up or went
    read-only), the games and the ratings go to a temporary folder that a
    warning on stderr names, and missing TensorBoard events are only warned of.

    Raises UserError for a missing checkpoint or Stockfish, bad settings, or an
    output folder that cannot be written; whatever an agent raises.
    """
    run = run if isinstance(run, RunDir) else RunDir(run)
    settings = _override(settings or EvalSettings.full(config.eval), games_per_pair, simulations,
                         stockfish_elos, stockfish_depth)
    settings.check()
    console = console or Console()
    network = _network(run, config, step, model, device)
    step = network.step if network.step is not None else (step or 0)
    _check_outputs(run, step)
    pairing = _build_agents(network, settings)
    try:
        if progress:
            console.print(f"Evaluating {network.label}: {len(pairing.pairs)} matches of "
                          f"{settings.games_per_pair + settings.games_per_pair % 2} games, "
                          f"search:{settings.simulations}, ply limit {settings.ply_limit}")
        results = [_play_pair(a, b, run, step, settings, progress) for a, b in pairing.pairs]
    finally:
        pairing.close()
    games = _games(results)
    ratings = fit_ratings(games, pairing.anchors)
    scores = _scores(games)
    written = _write_ratings(ratings_path(run, step),
                             _ratings_json(network, step, settings, ratings, scores, pairing.anchors, results))
    try:
        _write_tensorboard(run, step, ratings, pairing.anchors)
    except OSError as error:
        print(f"warning: cannot write TensorBoard events in {run.tb / 'eval'} ({error.strerror or error}); "
              f"the ratings are in {written}", file=sys.stderr, flush=True)
    if report:
        console.print(ratings_table(ratings, scores, pairing.anchors, f"{run.root}: {network.label}"))
        console.print(f"ratings written to {written}")
    return ratings


def _check_outputs(run: RunDir, step: int) -> None:
    """Checks, before any game, that every folder the evaluation writes to takes files.

    Raises:
        UserError: one does not (the message names it).
    """
    folder = checkpoint_name(step).removesuffix(".pt")
    check_writable_directory(run.eval, "the ratings")
    check_writable_directory(run.eval / folder, "the match records")
    check_writable_directory(run.games / "eval" / folder, "the games")
    check_writable_directory(run.tb / "eval", "TensorBoard events")


def _write_ratings(path: Path, text: str) -> Path:
    """Writes the ratings JSON to ``path``, or, when that fails after the games were played, to a
    temporary folder (a warning names it); returns where it went.

    Raises:
        UserError: neither could be written (the ratings are still printed by the caller).
    """
    try:
        atomic_write_text(path, text)
        return path
    except OSError as error:
        failure = error
    try:
        fallback = Path(tempfile.mkdtemp(prefix="alphazero-eval-")) / path.name
        atomic_write_text(fallback, text)
    except OSError as error:
        raise UserError(f"cannot write the ratings to {path} ({failure.strerror or failure}) nor to a temporary "
                        f"folder ({error.strerror or error})") from None
    print(f"warning: cannot write {path} ({failure.strerror or failure}); the ratings go to {fallback} instead",
          file=sys.stderr, flush=True)
    return fallback


def _override(settings: EvalSettings, games_per_pair: int | None, simulations: int | None,
              stockfish_elos: Sequence[int] | None, stockfish_depth: int | None) -> EvalSettings:
    changes: dict[str, Any] = {}
    if games_per_pair is not None:
        changes["games_per_pair"] = games_per_pair
    if simulations is not None:
        changes["simulations"] = simulations
    if stockfish_elos is not None:
        changes["stockfish_elos"] = tuple(stockfish_elos)
    if stockfish_depth is not None:
        changes["stockfish_depth"] = stockfish_depth
    return dataclasses.replace(settings, **changes)


__all__ = [
    "EvalSettings",
    "evaluate_checkpoint",
    "load_ratings",
    "ratings_path",
    "ratings_table",
    "stockfish_name",
]


class PeriodicEvaluation:
    """Rates every `every_steps`-th checkpoint in the background, so the Elo curve grows with the run.

    Called with (step, checkpoint path) after each checkpoint (the learner's
    on_checkpoint hook). One quick evaluation (EvalSettings.quick: the
    network's agents against `random` and the lowest Stockfish level) runs at
    a time, on its own thread, from the checkpoint file. A checkpoint that
    comes due while one runs, or before the evaluations' share of the wall
    time has fallen to `time_share` (config.eval.time_share: the next starts
    no sooner than the last one's duration / time_share after it started), is
    skipped. Without Stockfish the curve is off, and it says so once. Failures
    are printed, never raised into the learner.
    """

    def __init__(self, run: RunDir, config: Config, every_steps: int, *, device: str = "cpu",
                 time_share: float | None = None, clock: Any = time.monotonic) -> None:
        self.run, self.config, self.every_steps, self.device = run, config, every_steps, device
        self.time_share = config.eval.time_share if time_share is None else time_share
        self.clock = clock
        self.last_due = -1
        self.thread: threading.Thread | None = None
        self.next_start = -float("inf")  # clock time before which no evaluation starts
        self.running_step: int | None = None
        self.last: tuple[int, Ratings] | None = None  # the last step rated and its ratings
        self.off_reason = self._off_reason()
        if self.off_reason is not None and every_steps > 0:
            print(f"Elo curve off: {self.off_reason}", file=sys.stderr, flush=True)

    def _off_reason(self) -> str | None:
        if self.every_steps <= 0:
            return "eval.every_steps is 0"
        if not self.config.eval.stockfish_elos:
            return "eval.stockfish_elos is empty (the curve is anchored to Stockfish)"
        if find_stockfish() is None:
            return f"Stockfish was not found; {INSTALL_HINT}"
        return None

    def __call__(self, step: int, path: Path) -> None:
        if self.off_reason is not None or step < self.every_steps or step // self.every_steps == self.last_due:
            return
        if self.thread is not None and self.thread.is_alive() or self.clock() < self.next_start:
            return
        self.last_due = step // self.every_steps
        self.running_step = step
        self.thread = threading.Thread(target=self._evaluate, args=(step,), name=f"eval-{step}", daemon=True)
        self.thread.start()

    def _evaluate(self, step: int) -> None:
        started = self.clock()
        try:
            ratings = evaluate_checkpoint(self.run, self.config, step, settings=EvalSettings.quick(self.config.eval),
                                          device=self.device, progress=False, report=False)
            if ratings is not None:
                self.last = (step, ratings)
        except Exception as error:  # noqa: BLE001 - an evaluation must not stop training
            print(f"evaluation of step {step} failed: {error}", file=sys.stderr, flush=True)
        finally:
            self.next_start = started + (self.clock() - started) / self.time_share
            self.running_step = None

    def status(self) -> str:
        """Says what the Elo curve is doing, for a live line: off and why, running, or the last ratings."""
        if self.off_reason is not None:
            return f"Elo curve off: {self.off_reason}"
        share = f"at most {self.time_share:.0%} of the time"
        if self.running_step is not None:
            return f"elo: rating step {self.running_step:,} in the background ({share})"
        wait = self.next_start - self.clock()
        after = f" and in {wait / 60:.1f} min" if wait > 0 else ""
        due = max(self.every_steps * (self.last_due + 1), self.every_steps)
        next_text = f"next at step >= {due:,}{after} ({share})"
        if self.last is None:
            return f"elo: {next_text}"
        step, ratings = self.last
        agents = ", ".join(f"{name} {rating.elo:.0f}" for name, rating in
                           sorted(ratings.items(), key=lambda item: -item[1].elo))
        return f"elo (step {step:,}): {agents}; {next_text}"

    def close(self) -> None:
        """Waits for an evaluation in progress."""
        if self.thread is not None:
            self.thread.join()
