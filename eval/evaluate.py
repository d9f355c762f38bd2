"""`alphazero eval`: rates one checkpoint's agents against each other, random and Stockfish.

Over 600 lines: the agents, their pairings (the ladder's rungs among them),
the fit and the reports read together. The rung choice is to move into
eval.ladder.

The checkpoint plays as three agents, `policy`, `value` and `search:N` (see
eval.network_agents), and a fourth, `av`, where its network has an
action-value head (without one, av is left out and the evaluation says why
in one line). Matches: every pair of those agents, each of them
against `random`, and each against Stockfish at every UCI_Elo level
(`stockfish:elo=E`). All games go into one maximum-likelihood fit
(eval.elo.fit_ratings, BayesElo's draw model) with the Stockfish levels
anchored at their UCI_Elo, so every rating is on Stockfish's Elo scale.

**The start.** A run's step-0 checkpoint is where it began (the ``--init``
weights, or fresh ones), and every later checkpoint is also compared with
it directly: the policy, value and search agents each play the same agent of the step-0 network
(``start:policy``, ``start:value``, ``start:search:N``; av has no twin, since a
start from weights without the head has no av) from the suite's
openings with colours swapped. These twin matches join the one fit (so
TensorBoard draws ``elo/start:*`` beside the agents) and are summarised on
their own as the Elo difference from the start with its 95% interval
(``vs_start``). An agent whose difference is below ``-eval.fall_margin``
while its whole interval lies below 0 has *fallen* below the start: the
table, the live line of ``alphazero train`` and TensorBoard
(``vs_start/fallen``) say so.

Outputs, for learner step S (0 for fresh weights):

- `run/eval/ratings_step_<S:09d>.json`: the settings and every rating
  (written atomically; a temporary folder, named on stderr, when the run
  stops taking files after the games); `load_ratings` reads it back;
- `run/tb/eval/`: TensorBoard scalars `elo/<agent>` at step S, the anchors
  included (a Stockfish level is a flat line at its UCI_Elo), and a
  custom-scalars chart with all of them, so a flat curve reads as flat;
- `run/eval/step_<S:09d>/<match>.jsonl` and `run/games/eval/step_<S:09d>/<match>.pgn`;
- a table like ChessBench's Table 1 (agent, Elo, 95% interval, games, score),
  and one of the differences from the start.

Sizes: `EvalSettings.full(config.eval)` is the run's eval section (400
simulations, config.eval.games per pair, every Stockfish level, each agent's
twin match over config.eval.start_games); `EvalSettings.quick(config.eval)`
(4 games per pair, 64 simulations, the lowest Stockfish level, 200-ply
games; the policy's twin match over config.eval.start_games, cheap since
the policy needs one network call a move, and the search's over
QUICK_START_SEARCH_GAMES) finishes on a fresh tiny run in a few minutes on 2
CPU cores. The training loop calls `evaluate_checkpoint` every
K learner steps (PeriodicEvaluation), within a share of the wall time.

The settings are eval.eval_settings'; the ratings' tables, file and
TensorBoard curves are eval.checkpoint_ratings' (both re-exported here).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from alphazero.chess.stockfish import INSTALL_HINT, find_stockfish
from alphazero.config import Config
from alphazero.errors import UserError
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import AlphaZeroNet, build_network, cpu_state_dict, model_config, pick_device
from alphazero.store.checkpoint import checkpoint_name
from alphazero.store.rundir import RunDir, atomic_write_text, check_writable_directory
from alphazero.store.sources import FRESH, Network, NetworkSource, load_network
from eval.action_values import action_value_refusal, has_action_values
from eval.agents import Agent, RandomAgent, StockfishAgent
from eval.checkpoint_ratings import (
    CheckpointRatings,
    load_ratings,
    ratings_json,
    ratings_path,
    ratings_table,
    start_table,
    versus_start,
    write_ratings_tensorboard,
)
from eval.elo import Rating, fit_ratings, rating_text
from eval.eval_settings import QUICK_PLY_LIMIT, QUICK_SIMULATIONS, SETTINGS_FILE, EvalSettings
from eval.match import MatchResult, match_id_of, play_match
from eval.network_agents import ActionValueAgent, PolicyAgent, SearchAgent, ValueAgent
from eval.openings import Opening, load_openings, ordered_openings
from eval.probe import ProbeFigures, ProbeSet, probe_network, write_probe_tensorboard

RANDOM_ANCHOR_ELO = 0.0
"""The rating of `random` when no Stockfish level is played (ratings are then relative to it)."""

START_PREFIX = "start:"
"""Names the step-0 network's agents: `start:policy` is the start's policy agent."""


@dataclass
class _Pairing:
    """The agents of one evaluation and which pairs play, each pair with its number of games.

    ``twins`` pairs a network agent with the same agent of the start network
    and the games of their match.
    """

    network_agents: list[Agent]
    others: list[Agent]
    anchors: dict[str, float]
    games_per_pair: int
    twins: list[tuple[Agent, Agent, int]] = dataclasses.field(default_factory=list)
    left_out: list[str] = dataclasses.field(default_factory=list)  # one line for each agent that cannot play

    @property
    def pairs(self) -> list[tuple[Agent, Agent, int]]:
        games = self.games_per_pair
        pairs = [(a, b, games) for i, a in enumerate(self.network_agents) for b in self.network_agents[i + 1:]]
        return pairs + [(a, b, games) for b in self.others for a in self.network_agents] + self.twins

    def close(self) -> None:
        for agent in [*self.network_agents, *self.others, *(twin for _, twin, _ in self.twins)]:
            agent.close()


def stockfish_name(elo: int) -> str:
    """Names the Stockfish agent of a UCI_Elo level: 'stockfish:elo=1500'."""
    return f"stockfish:elo={elo}"


# --- the pieces ------------------------------------------------------------------------------


def _network(run: RunDir, config: Config, step: int | None, model: AlphaZeroNet | None, device: str,
             say_precision: bool = True) -> Network:
    """Gets the network to rate: `model` as step `step`, else the run's checkpoint `step` (None: latest)."""
    if model is not None:
        if step is None:
            raise UserError("evaluate_checkpoint needs the step of the model it is given")
        return Network(Evaluator(_copy_model(model, device)), f"step {step}", f"step{step}", step, None, False,
                       config)
    # A run's step 0 is rated as the run has it (fresh weights), never as the built-in network.
    source = NetworkSource(run.root, None if step is None else str(step), fallback=FRESH)
    network = load_network(source, device=device, say_precision=say_precision)
    if network.config is None:
        network.config = config
    return network


def _copy_model(model: AlphaZeroNet, device: str) -> AlphaZeroNet:
    """Copies a live model's weights into a new one, so that the caller's model (training, on its
    device, maybe compiled) is left exactly as it was. 'auto' keeps the model's device."""
    config = model_config(model)
    target = next(model.parameters()).device if device == "auto" else pick_device(device)
    copy = build_network(config)
    copy.load_state_dict(cpu_state_dict(model))
    return copy.to(target).eval()  # type: ignore[return-value]  # an AlphaZeroNet or a Chessformer: one interface


def _network_agents(network: Network, settings: EvalSettings, prefix: str = "") -> list[Agent]:
    """Makes a network's policy, value and search agents, their names prefixed with ``prefix``."""
    return [
        PolicyAgent(network, f"{prefix}policy"),
        ValueAgent(network, f"{prefix}value"),
        SearchAgent(network, settings.simulations, f"{prefix}search:{settings.simulations}"),
    ]


def _start_network(run: RunDir, step: int, device: str, say_precision: bool = True) -> Network | None:
    """Loads the run's step-0 network, the start the twin matches compare with; None for step 0 itself or
    a run without a step-0 checkpoint (old runs thinned it away)."""
    if step == 0 or not (run.checkpoints / checkpoint_name(0)).is_file():
        return None
    return load_network(NetworkSource(run.root, "0"), device=device, say_precision=say_precision)


def _build_agents(network: Network, settings: EvalSettings, start: Network | None = None) -> _Pairing:
    """Makes the network agents (av where the network has the head), random, the Stockfish levels, the
    ladder's rungs (anchored at their calibrated Elo) and the start's twins (raises UserError without
    Stockfish, or for a rung that is not on the ladder or whose engine is missing)."""
    agents = _network_agents(network, settings)
    pairing = _Pairing(list(agents), [], {}, settings.games_per_pair)
    if has_action_values(network):
        pairing.network_agents.append(ActionValueAgent(network, "av"))
    else:
        pairing.left_out.append(f"av is not rated: {action_value_refusal(network, 'av')}")
    if start is not None:
        twin_games = (settings.start_policy_games, settings.start_value_games, settings.start_search_games)
        for agent, twin, games in zip(agents, _network_agents(start, settings, START_PREFIX), twin_games, strict=True):
            if games > 0:
                pairing.twins.append((agent, twin, games))
            else:
                twin.close()
    try:
        if settings.include_random:
            pairing.others.append(RandomAgent(settings.seed, name="random"))
        for elo in settings.stockfish_elos:
            name = stockfish_name(elo)
            pairing.others.append(StockfishAgent(elo=elo, depth=settings.stockfish_depth, name=name))
            pairing.anchors[name] = float(elo)
        _add_rungs(pairing, settings)
    except BaseException:
        pairing.close()
        raise
    if not pairing.anchors:
        if not settings.include_random:
            raise UserError("nothing to anchor the ratings: give Stockfish levels or keep the random agent")
        pairing.anchors["random"] = RANDOM_ANCHOR_ELO
    return pairing


def _add_rungs(pairing: _Pairing, settings: EvalSettings) -> None:
    """Adds the settings' ladder rungs as anchors at their calibrated Elo; `random`, when it plays anyway, is
    anchored rather than added twice."""
    if not settings.rungs:
        return
    from eval.agents import parse_player
    from eval.ladder import load_ladder

    ladder = load_ladder()
    for spec in settings.rungs:
        elo = ladder.elo(spec)
        if spec not in {agent.name for agent in pairing.others}:
            pairing.others.append(parse_player(spec, seed=settings.seed))
        pairing.anchors[spec] = elo


def nearest_rungs(estimate: float | None, count: int = 2,
                  leave_out: tuple[str, ...] = ()) -> tuple[tuple[str, ...], list[str]]:
    """Chooses the `count` ladder rungs nearest a network's estimated Elo (None: spread over the ladder) among
    those whose engine is installed, less `leave_out`; returns them and one line for each engine missing."""
    from eval.ladder import Ladder, playable_ladder

    ladder, missing = playable_ladder()
    ladder = Ladder(tuple(rung for rung in ladder.rungs if rung.spec not in leave_out), ladder.anchor,
                    ladder.anchor_elo, ladder.ply_limit)
    if not ladder.rungs or count < 1:
        return (), missing
    return tuple(rung.spec for rung in ladder.nearest(estimate, count)), missing


def last_search_rating(run: RunDir, up_to: int | None = None) -> Rating | None:
    """The search agent's rating in the run's latest ratings file (of step `up_to` or earlier, when given);
    None when the run has none yet. It guesses where the next evaluation's network stands."""
    files = sorted(run.eval.glob("ratings_step_*.json")) if run.eval.is_dir() else []
    for path in reversed(files):
        try:
            step = int(path.stem.removeprefix("ratings_step_"))
            ratings = load_ratings(path)
        except (ValueError, UserError):
            continue
        if up_to is not None and step > up_to:
            continue
        searches = [rating for name, rating in ratings.items() if name.startswith("search:")]
        if searches:
            return searches[0]
    return None


def _play_pair(a: Agent, b: Agent, games: int, run: RunDir, step: int, settings: EvalSettings,
               progress: bool, stop: threading.Event | None = None,
               openings: Sequence[Opening] | None = None) -> MatchResult:
    """Plays one match of ``games`` games (rounded up to even); JSON lines go to run/eval/step_S/, the PGN
    to run/games/eval/step_S/."""
    folder = checkpoint_name(step).removesuffix(".pt")
    jsonl_dir = run.eval / folder
    pgn_dir = run.games / "eval" / folder
    games += games % 2
    result = play_match(
        a, b, games=games, concurrency=min(settings.concurrency, games),
        ply_limit=settings.ply_limit, out_dir=jsonl_dir, pgn_dir=pgn_dir, progress=progress, openings=openings,
        seed=settings.seed if settings.openings_order == "sequential" else 0,
        match_id=match_id_of(a.name, b.name), stop=stop,
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


class EvaluationStopped(Exception):
    """An evaluation ended by its stop event before its last game: the games it finished are on disk
    (``folder``), no ratings were fitted."""

    def __init__(self, step: int, games: int, folder: Path) -> None:
        super().__init__(f"the evaluation of step {step:,} stopped after {games} games (kept in {folder})")
        self.step, self.games, self.folder = step, games, folder


# --- the entry point ----------------------------------------------------------------------------


def evaluate_checkpoint(
    run: RunDir | str | os.PathLike[str],
    config: Config,
    step: int | None = None,
    *,
    settings: EvalSettings | None = None,
    model: AlphaZeroNet | None = None,
    device: str = "auto",
    progress: bool = True,
    report: bool = True,
    console: Console | None = None,
    stop: threading.Event | None = None,
    say_precision: bool = True,
) -> CheckpointRatings:
    """Rates a checkpoint's policy, value, search and (with an action-value head) av agents; writes JSON,
    TensorBoard and games.

    `step` picks the run's checkpoint (None: the latest; a run without any
    plays fresh weights as step 0, with a warning). The training loop can
    pass its live `model` with its `step` instead of a file. Sizes come
    from `settings` (default EvalSettings.full(config.eval)). `progress` shows a bar per match; `report` prints
    the rating table on `console` (default stdout). `say_precision` false keeps the note of what the
    networks run in on a CPU to itself (a run's periodic evaluations say it once, at the first).

    Returns the fitted ratings (name -> Rating, plus draw_elo) with each
    agent's difference from the run's step-0 network (CheckpointRatings; no
    twin match for step 0 itself or a run that has lost its step-0 file).

    Every output folder is checked for writing before the first game; if a
    file cannot be written after the games (a disk that filled up or went
    read-only), the games and the ratings go to a temporary folder that a
    warning on stderr names, and missing TensorBoard events are only warned of.

    A ``stop`` event (a run's deadline) ends the evaluation after the move
    in progress: its finished games stay in the match files, and
    EvaluationStopped is raised instead of fitting ratings.

    Raises UserError for a missing checkpoint or Stockfish, bad settings, or an
    output folder that cannot be written; whatever an agent raises.
    """
    run = run if isinstance(run, RunDir) else RunDir(run)
    settings = settings or EvalSettings.full(config.eval)
    settings.check()
    console = console or Console()
    network = _network(run, config, step, model, device, say_precision)
    step = network.step if network.step is not None else (step or 0)
    _check_outputs(run, step)
    _write_settings(run.eval / checkpoint_name(step).removesuffix(".pt") / SETTINGS_FILE, settings)
    openings = ordered_openings(load_openings(settings.openings), settings.openings_order, settings.seed)
    start = _start_network(run, step, device, say_precision and report) if _plays_start(settings) else None
    pairing = _build_agents(network, settings, start)
    if progress or report:
        for line in pairing.left_out:
            console.print(line)
    try:
        if progress:
            twins = f" and {len(pairing.twins)} against the start (step 0)" if pairing.twins else ""
            console.print(f"Evaluating {network.label}: {len(pairing.pairs) - len(pairing.twins)} matches of "
                          f"{settings.games_per_pair + settings.games_per_pair % 2} games{twins}, "
                          f"search:{settings.simulations}, ply limit {settings.ply_limit}")
        results, stopped = [], False
        for a, b, count in pairing.pairs:
            stopped = stop is not None and stop.is_set()
            if stopped:
                break
            results.append(_play_pair(a, b, count, run, step, settings, progress, stop, openings))
            stopped = len(results[-1].games) < count + count % 2
    finally:
        pairing.close()
    if stopped:
        raise EvaluationStopped(step, sum(len(r.games) for r in results),
                                run.eval / checkpoint_name(step).removesuffix(".pt"))
    games = _games(results)
    ratings = CheckpointRatings(fit_ratings(games, pairing.anchors),
                                versus_start(results[len(results) - len(pairing.twins):]), settings.fall_margin)
    scores = _scores(games)
    written = _write_ratings(ratings_path(run, step),
                             ratings_json(network, step, settings, ratings, scores, pairing.anchors, results))
    try:
        write_ratings_tensorboard(run, step, ratings, pairing.anchors)
    except OSError as error:
        print(f"warning: cannot write TensorBoard events in {run.tb / 'eval'} ({error.strerror or error}); "
              f"the ratings are in {written}", file=sys.stderr, flush=True)
    if report:
        console.print(ratings_table(ratings, scores, pairing.anchors, f"{run.root}: {network.label}"))
        if ratings.vs_start:
            console.print(start_table(ratings))
        for line in ratings.fall_warnings():
            console.print(f"[bold red]{line}[/]")
        console.print(f"ratings written to {written}")
    return ratings


def _plays_start(settings: EvalSettings) -> bool:
    return max(settings.start_policy_games, settings.start_value_games, settings.start_search_games) > 0


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


def _write_settings(path: Path, settings: EvalSettings) -> None:
    """Writes what the games are played with beside them (`alphazero curve` takes in the games that fit its
    own); a folder that takes no file only loses the curve those games, so it is warned of, not raised."""
    try:
        atomic_write_text(path, json.dumps(dataclasses.asdict(settings)) + "\n")
    except OSError as error:
        print(f"warning: cannot write {path} ({error.strerror or error}): `alphazero curve` will not use these "
              f"games", file=sys.stderr, flush=True)


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


class PeriodicEvaluation:
    """Rates every `every_steps`-th checkpoint in the background, so the Elo curve grows with the run.

    Called with (step, checkpoint path) after each checkpoint (the learner's
    on_checkpoint hook). One quick evaluation (EvalSettings.quick: the
    network's agents against `random`, the two ladder rungs nearest the last
    rating of its search agent (eval.ladder; the first evaluation plays the
    bottom rung and Stockfish's weakest level; without the shipped ladder,
    the lowest Stockfish level) and the start's policy and search agents)
    runs at a time, on its own thread, from the checkpoint file. A checkpoint that
    comes due while one runs, or before the evaluations' share of the wall
    time has fallen to `time_share` (config.eval.time_share: the next starts
    no sooner than the last one's duration / time_share after it started), is
    skipped. Without Stockfish the curve is off, and it says so once. Failures
    are printed, never raised into the learner. A checkpoint that fell below
    the start is printed on stderr when its evaluation ends and stays on the
    live line (status) until a later one did not fall. With eval.probe_data
    set, each rated checkpoint is first probed on it (eval.probe: TensorBoard
    ``probe/*``, and the live line). ``close()`` is the run's end: the
    evaluation in progress stops after its current move (so ``--minutes``
    means minutes), its finished games kept for `alphazero curve`.
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
        self.last: tuple[int, CheckpointRatings] | None = None  # the last step rated and its ratings
        self.last_probe: tuple[int, ProbeFigures] | None = None  # the last step probed and its figures
        self.stopping = threading.Event()  # set by close(): the evaluation in progress ends after its move
        self._probe_set: ProbeSet | None = None
        self._precision_said = False  # what the networks run in is said at the first evaluation only
        self._ladder_said = False  # a missing ladder or rung engine is said once
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
        if self.off_reason is not None or step < self.every_steps or step // self.every_steps == self.last_due \
                or self.stopping.is_set():
            return
        if self.thread is not None and self.thread.is_alive() or self.clock() < self.next_start:
            return
        self.last_due = step // self.every_steps
        self.running_step = step
        # The rungs are chosen here, from the last evaluation's ratings, before the next one's thread starts.
        rungs = self._rungs()
        self.thread = threading.Thread(target=self._evaluate, args=(step, rungs), name=f"eval-{step}", daemon=True)
        self.thread.start()

    def _evaluate(self, step: int, rungs: tuple[str, ...] = ()) -> None:
        started = self.clock()
        try:
            self._probe(step)
            say, self._precision_said = not self._precision_said, True
            settings = EvalSettings.quick(self.config.eval, rungs=rungs)
            ratings = evaluate_checkpoint(self.run, self.config, step, settings=settings,
                                          device=self.device, progress=False, report=False, stop=self.stopping,
                                          say_precision=say)
            if ratings is not None:
                self.last = (step, ratings)
                for line in ratings.fall_warnings():
                    print(f"warning: step {step:,}: {line}", file=sys.stderr, flush=True)
        except EvaluationStopped as stopped:
            print(f"{stopped}: the run ended", file=sys.stderr, flush=True)
        except Exception as error:  # noqa: BLE001 - an evaluation must not stop training
            if self.stopping.is_set():  # a signal to the process group ends its Stockfish too: not a failure
                print(f"the evaluation of step {step:,} ended with the run ({error})", file=sys.stderr, flush=True)
            else:
                print(f"evaluation of step {step} failed: {error}", file=sys.stderr, flush=True)
        finally:
            self.next_start = started + (self.clock() - started) / self.time_share
            self.running_step = None

    def _rungs(self) -> tuple[str, ...]:
        """The ladder rungs nearest the last rating of the search agent (none without the ladder)."""
        from eval.ladder import RUNGS_PLAYED, estimate_of

        last = self.last[1].get(f"search:{QUICK_SIMULATIONS}") if self.last is not None else None
        try:
            rungs, missing = nearest_rungs(estimate_of(last), RUNGS_PLAYED)
        except UserError as error:
            rungs, missing = (), [f"the ladder is off: {error}"]
        if missing and not self._ladder_said:
            self._ladder_said = True
            for line in missing:
                print(line, file=sys.stderr, flush=True)
        return rungs

    def _probe(self, step: int) -> None:
        """Probes checkpoint ``step`` on eval.probe_data (when set) and writes its TensorBoard figures."""
        if not self.config.eval.probe_data:
            return
        if self._probe_set is None:
            folder = Path(self.config.eval.probe_data).expanduser()
            self._probe_set = ProbeSet.load(folder if folder.is_absolute() else self.run.root / folder)
        network = load_network(NetworkSource(self.run.root, str(step)), device=self.device, precision="float32",
                               say_precision=False)
        figures = probe_network(network.evaluator.model, self._probe_set)
        write_probe_tensorboard(self.run, step, figures)
        self.last_probe = (step, figures)

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
        probe = ""
        if self.last_probe is not None:
            probe = f"; probe (step {self.last_probe[0]:,}): {self.last_probe[1].text()}"
        if self.last is None:
            return f"elo: {next_text}{probe}"
        step, ratings = self.last
        agents = ", ".join(f"{name} {rating_text(rating, interval=False)}" for name, rating in
                           sorted(ratings.items(), key=lambda item: -item[1].elo)
                           if not name.startswith(START_PREFIX))
        start = f"; {ratings.start_text()}" if ratings.vs_start else ""
        fallen = ratings.fallen()
        warning = f"; FELL BELOW THE START: {', '.join(fallen)}" if fallen else ""
        return f"elo (step {step:,}): {agents}{start}{warning}; {next_text}{probe}"

    def wait(self) -> None:
        """Waits for the evaluation in progress to end by itself."""
        if self.thread is not None:
            self.thread.join()

    def close(self) -> None:
        """Ends the evaluation in progress after its current move (a run's end is its deadline: ``--minutes``
        means minutes) and waits for it; its finished games stay on disk."""
        self.stopping.set()
        step = self.running_step
        if self.thread is not None and self.thread.is_alive():
            if step is not None:
                print(f"stopping the evaluation of step {step:,}: its finished games are kept",
                      file=sys.stderr, flush=True)
            self.thread.join()


__all__ = [  # the settings and the ratings' outputs are re-exported from their modules
    "QUICK_PLY_LIMIT",
    "QUICK_SIMULATIONS",
    "SETTINGS_FILE",
    "START_PREFIX",
    "CheckpointRatings",
    "EvalSettings",
    "EvaluationStopped",
    "PeriodicEvaluation",
    "evaluate_checkpoint",
    "load_ratings",
    "ratings_path",
    "ratings_table",
    "start_table",
    "stockfish_name",
]
