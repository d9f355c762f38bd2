"""Runs self-play on Ray: N actors (and, on GPUs, inference servers) filling a run directory.

Ray moves work and weights; the run directory keeps what matters. How shards
get there is ``selfplay.transport``:

- 'disk': each actor writes complete shards into the run directory itself,
  and polls it for new checkpoints and the resignation threshold. Every node
  must see the run directory (one machine, or shared storage).
- 'ray': the driver's fleet (selfplay.fleet) starts a shard sink (selfplay.sink) pinned to its own
  node, the one with the run directory; actors send it their finished shards
  and wait for its acknowledgements (a bounded window). The driver gives each
  actor its threshold when it starts and its first weights before its first
  play(), loads new checkpoints from the run directory and pushes them (as it
  pushes the threshold), and pushes both again to an actor that restarted.
  Actors never see the run directory, so no node but this one needs it.

A lost actor costs only its games in flight (and, with 'ray', the shards it
had not yet seen acknowledged). Actors restart after a crash (max_restarts),
the sink too; the driver resubmits their work.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alphazero.config import Config, for_gpus
from alphazero.console import LiveDisplay, clock_text, compact_number, fit_line
from alphazero.errors import UserError
from alphazero.store.checkpoint import latest_checkpoint, load_checkpoint
from alphazero.store.resign import ResignCalibrator
from alphazero.store.rundir import RunDir, remove_stale_temporaries
from selfplay import NAMESPACE
from selfplay.fleet import Placement, SelfPlayFleet, actors_that_fit
from selfplay.worker import PlayStats

log = logging.getLogger(__name__)


def connect_ray(address: str | None, num_cpus: int, num_gpus: float | None = None) -> bool:
    """Connects to the Ray cluster at `address`, or starts a local one; returns True if it started one.

    Reuses a connection that already exists in this process (tests, `alphazero train`).

    Raises:
        UserError: the address cannot be reached.
    """
    import ray

    if address:
        _check_reachable(address)
    if ray.is_initialized():
        return False
    _quiet_ray_auth_banner()
    if not address:
        ensure_ray_token()
    with _keeping_sigterm_handler():
        if address:
            try:
                ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, ValueError) as error:
                raise UserError(f"cannot connect to the Ray cluster at {address}: {error}") from None
            return True
        # A node's resources are whole numbers: --gpus 0.5 declares one GPU, of which self-play asks half.
        # "local": a Ray of its own, as --address's help says; with no address Ray would join the cluster that
        # RAY_ADDRESS or the newest `ray start` on this machine names, and refuse num_cpus there.
        ray.init(address="local", num_cpus=num_cpus, num_gpus=math.ceil(num_gpus) if num_gpus else None,
                 include_dashboard=False, namespace=NAMESPACE, logging_level=logging.WARNING)
    return True


@contextlib.contextmanager
def _keeping_sigterm_handler() -> Iterator[None]:
    """Puts back this process's SIGTERM handler after ray.init, which replaces it with abseil's failure handler
    (a stack dump, then an abort 3 s later; ray-project/ray issues 37288 and 64829): SIGTERM stops our commands
    as Ctrl-C does (alphazero.app.cli), with the finished work saved."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if handler is not None:  # None: installed outside Python, nothing of ours to put back
            signal.signal(signal.SIGTERM, handler)


_RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_RAY_AUTH_BANNER = "Token authentication is enabled for this Ray cluster"


class _DropRayAuthBanner(logging.Filter):
    """Drops Ray's note that it turned token authentication on (every other record passes)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_RAY_AUTH_BANNER)


def _quiet_ray_auth_banner() -> None:
    """Keeps Ray's token-authentication banner off the terminal, and the authentication on.

    Ray (2.5x and later) turns token authentication on for a cluster that
    ray.init starts (and for a local one found by 'auto' when a token exists),
    then logs a warning saying so on every start. Only that one record is
    dropped; the security stays as Ray sets it, and its warning that
    authentication is OFF still shows.
    """
    logger = logging.getLogger(_RAY_AUTH_LOGGER)
    if not any(isinstance(f, _DropRayAuthBanner) for f in logger.filters):
        logger.addFilter(_DropRayAuthBanner())


def ensure_ray_token(path: Path | None = None) -> None:
    """Writes the token of a local Ray's authentication (~/.ray/auth_token) when there is none, under a
    temporary name linked into place, where ray.init would write it in place: two commands starting their
    first Ray at once (two test workers on a fresh machine) could each write one, and a cluster's processes
    read its rival's. The token is Ray's kind (32 random bytes in hex), readable by this user alone."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled" or "RAY_AUTH_TOKEN" in os.environ \
            or "RAY_AUTH_TOKEN_PATH" in os.environ:
        return  # no token wanted, or the user's own
    path = path if path is not None else Path.home() / ".ray" / "auth_token"
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
        file.write(secrets.token_hex(32))
    try:
        os.link(temporary, path)  # never replaces: the first command's token stands
    except FileExistsError:
        pass
    finally:
        temporary.unlink()


def _check_reachable(address: str) -> None:
    """Fails fast, with a clear message, on a host:port nobody listens at (ray.init would retry for long)."""
    if address == "auto" or "://" in address and not address.startswith("ray://"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"a Ray address is HOST:PORT, ray://HOST:PORT or 'auto', got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        raise UserError(f"cannot reach the Ray cluster at {address}: {error.strerror or error}") from None


def check_checkpoint(run: RunDir, config: Config) -> int | None:
    """The step of the run's latest checkpoint after checking it loads into this architecture.

    Raises:
        UserError: the checkpoint is corrupt or of another architecture.
    """
    path = latest_checkpoint(run)
    if path is None:
        return None
    payload = load_checkpoint(path, "cpu", expected=config.network, mmap=True, check_optimizer=False)
    return int(payload["step"])


@dataclass
class Totals:
    """Self-play statistics summed over actors and play() calls."""

    started: float = field(default_factory=time.monotonic)
    games: int = 0
    moves: int = 0
    samples: int = 0
    evaluations: int = 0
    batches: int = 0
    network_seconds: float = 0.0
    sink_wait_seconds: float = 0.0
    actor_seconds: float = 0.0
    plies: list[int] = field(default_factory=list)
    results: dict[str, int] = field(default_factory=lambda: {"white": 0, "draw": 0, "black": 0})
    terminations: dict[str, int] = field(default_factory=dict)
    shards: list[str] = field(default_factory=list)
    resigned: int = 0
    played_through: int = 0
    would_have_resigned: int = 0
    false_resignations: int = 0
    lost_calls: int = 0
    weights_step: int = -1
    resign_status: str = ""  # the resignation calibration's last status line
    first_game_time: float | None = None  # time.time() when the first game of any actor ended
    lost_actors: int = 0     # actor processes lost (crashed, killed, or with their host) and restarted by Ray
    games_lost: int = 0      # their games started but never stored (finished or in flight)
    finished_lost: int = 0   # ... of which they had finished (counted in `games` when they reported them)

    def add(self, stats: PlayStats) -> None:
        self.games += stats.games
        self.moves += stats.moves
        self.samples += stats.samples
        self.evaluations += stats.evaluations
        self.batches += stats.batches
        self.network_seconds += stats.network_seconds
        self.sink_wait_seconds += stats.sink_wait_seconds
        self.actor_seconds += stats.wall_seconds
        self.plies.extend(stats.game_plies)
        for key, count in stats.results.items():
            self.results[key] += count
        for key, count in stats.terminations.items():
            self.terminations[key] = self.terminations.get(key, 0) + count
        self.shards.extend(stats.shards)
        self.resigned += stats.resigned
        self.played_through += stats.played_through
        self.would_have_resigned += stats.would_have_resigned
        self.false_resignations += stats.false_resignations
        self.weights_step = max(self.weights_step, stats.weights_step)
        if stats.first_game_time is not None:
            self.first_game_time = min(self.first_game_time or stats.first_game_time, stats.first_game_time)

    @property
    def elapsed(self) -> float:
        return max(time.monotonic() - self.started, 1e-9)

    def scalars(self) -> dict[str, float]:
        """The TensorBoard scalars of self-play (cumulative rates since the start)."""
        decided = max(self.games, 1)
        values = {
            "selfplay/positions_per_s": self.moves / self.elapsed,
            "selfplay/games_per_hour": self.games / self.elapsed * 3600,
            "selfplay/evaluations_per_s": self.evaluations / self.elapsed,
            "selfplay/average_batch": self.evaluations / max(self.batches, 1),
            "selfplay/network_share": self.network_seconds / max(self.actor_seconds, 1e-9),
            "selfplay/sink_wait_share": self.sink_wait_seconds / max(self.actor_seconds, 1e-9),
            "selfplay/games": self.games,
            "results/white_wins": self.results["white"] / decided,
            "results/draws": self.results["draw"] / decided,
            "results/black_wins": self.results["black"] / decided,
            "resign/resigned_share": self.resigned / decided,
            "selfplay/games_lost": self.games_lost,
        }
        if self.plies:
            values["selfplay/game_length"] = sum(self.plies) / len(self.plies)
        return values

    def line(self, actors_alive: int, actors: int, width: int | None = None) -> str:
        """The live progress line, fitted to ``width`` columns (the least telling parts go first)."""
        weights = "fresh weights" if self.weights_step < 0 else f"weights step {self.weights_step:,}"
        return fit_line([
            f"self-play {self.games:,} games",
            f"{compact_number(self.moves)} positions ({compact_number(self.moves / self.elapsed)}/s)",
            weights,
            f"W/D/B {self.results['white']}/{self.results['draw']}/{self.results['black']}",
            f"{actors_alive}/{actors} actors" + (f", {self.games_lost} games lost" if self.lost_actors else ""),
            f"{compact_number(self.evaluations / self.elapsed)} evals/s",
            f"batch {self.evaluations / max(self.batches, 1):.1f}",
        ], width)


    def lost_text(self) -> str:
        """The summary's words on lost actors ('' when none was lost)."""
        if not self.lost_actors:
            return ""
        return (f"{self.lost_actors} actor processes lost (and restarted), with {self.games_lost} games: "
                f"{self.finished_lost} finished but not yet stored, the rest unfinished")


@dataclass
class _ActorProcess:
    """What the driver last heard from one actor process (Ray's restart of an actor is a new one)."""

    incarnation: str = ""
    host: str = ""
    started: int = 0    # games it started
    finished: int = 0   # games it reported finished (summed over its play() calls)
    stored: int = 0     # games in shards it saw stored
    unreachable: bool = False  # said so already
    lost_at: float | None = None  # time.monotonic() when the actor at its index was lost, until its restart reports


class ActorLosses:
    """Follows each actor's process: says which was lost, on which host, with how many games, and its restart.

    A process is lost when a call to it fails with ActorDiedError (its
    process, or its node, died) or when a restart answers in its place. Its
    lost games are those it had started by its last answer (every
    ``chunk_seconds``) minus those the sink stored from it (the sink counts
    by process; with transport 'disk', what it reported stored): its games in
    flight and its finished games not yet stored. Games it started after its
    last answer were never known here and are not counted. A host that is
    unreachable for a while (ActorUnavailableError) loses nothing until Ray
    declares its node dead.
    """

    def __init__(self, fleet: SelfPlayFleet, totals: Totals, note: Callable[[str], None]) -> None:
        self.fleet, self.totals, self.note = fleet, totals, note
        self.processes: dict[int, _ActorProcess] = {}

    def heard(self, index: int, stats: PlayStats) -> None:
        """Takes a play() call's answer from actor ``index``."""
        process = self.processes.setdefault(index, _ActorProcess())
        if stats.incarnation != process.incarnation:
            if process.incarnation:  # a restart answered before a failed call said the process was gone
                self._count(index, process, "unreachable, then replaced" if process.unreachable else "replaced",
                            restarted_on=stats.host)
            elif process.lost_at is not None:
                self.note(f"self-play: actor {index} restarted on {stats.host}, "
                          f"{time.monotonic() - process.lost_at:.0f} s after it was lost")
            process = self.processes[index] = _ActorProcess(stats.incarnation, stats.host)
        process.finished += stats.games
        process.started, process.stored = stats.games_started, stats.games_stored

    def failed(self, index: int, error: Exception) -> None:
        """Takes a failed call to actor ``index`` (a RayActorError)."""
        from ray.exceptions import ActorUnavailableError

        process = self.processes.setdefault(index, _ActorProcess())
        if isinstance(error, ActorUnavailableError):
            if process.incarnation and not process.unreachable:
                process.unreachable = True
                self.note(f"self-play: actor {index} on {process.host} is unreachable; its games are kept if it "
                          f"comes back before Ray declares its node dead")
            return
        if not process.incarnation:
            if process.lost_at is None:  # never heard from: it held no finished game the driver knew of
                self.note(f"self-play: actor {index} was lost before its first answer ({_why(error)}); "
                          f"Ray restarts it")
                process.lost_at = time.monotonic()
            return
        self._count(index, process, _why(error))

    def gone(self, index: int, why: str) -> None:
        """Counts the games of actor ``index`` as lost, whatever the error (at the stop: no more chances)."""
        process = self.processes.get(index)
        if process is not None and process.incarnation:
            self._count(index, process, why, restarts=False)

    def _count(self, index: int, process: _ActorProcess, why: str, restarts: bool = True,
               restarted_on: str = "") -> None:
        stored = self._stored(process)
        lost, finished = max(0, process.started - stored), max(0, process.finished - stored)
        self.totals.lost_actors += 1
        self.totals.games_lost += lost
        self.totals.finished_lost += finished
        then = f"; Ray restarted it on {restarted_on}" if restarted_on else \
            "; Ray restarts it where a CPU is free" if restarts else ""
        self.note(f"self-play: lost actor {index} on {process.host} ({why}): {lost} games lost ({finished} "
                  f"finished but not stored, the rest unfinished; counted to its last answer){then}")
        self.processes[index] = _ActorProcess(lost_at=time.monotonic())

    def _stored(self, process: _ActorProcess) -> int:
        """The games the sink stored from the process (it may have stored more since its last answer)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        if self.fleet.sink is None:
            return process.stored
        try:
            return max(process.stored, int(ray.get(self.fleet.sink.games_stored.remote(process.incarnation),
                                                   timeout=SINK_ASK_SECONDS)))
        except (RayError, GetTimeoutError):
            return process.stored


SINK_ASK_SECONDS = 10.0  # how long the driver waits for the sink's count of a lost actor's stored games


def _why(error: Exception) -> str:
    """Why Ray says an actor died, in a few words."""
    text = str(error)
    if "node" in text and ("died" in text or "dead" in text):
        return "its node died"
    if "killed" in text:
        return "it was killed"
    return "its process died"


class _ResignFollower:
    """Recalibrates the resignation threshold from new shards and pushes a change to the actors."""

    def __init__(self, run: RunDir, config: Config, every_s: float = 10.0) -> None:
        self.calibrator = ResignCalibrator(run, config.search)
        self.every_s = every_s
        self.last = time.monotonic()
        self._refresh()  # before the actors start: they read run/resign.json

    def _refresh(self) -> bool:
        try:
            return self.calibrator.refresh()
        except OSError as error:
            log.warning("cannot write %s: %s", self.calibrator.path, error)
            return False

    def update(self, handles: list[Any], force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.every_s:
            return
        self.last = now
        if self._refresh():
            for handle in handles:
                self.push(handle)

    def push(self, handle: Any) -> None:
        """Sends the threshold in force to one actor (not waited for: it takes it between play() calls)."""
        if self.calibrator.search.resign_mode == "calibrated":
            handle.set_resign_threshold.remote(self.calibrator.threshold)


class _Reporter:
    """The progress line on the terminal and the scalars in run/tb/selfplay."""

    def __init__(self, run: RunDir, progress: bool, every_s: float = 10.0,
                 extra_scalars: Callable[[], dict[str, float]] | None = None,
                 starting: str = "self-play: starting actors...") -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.extra_scalars = extra_scalars
        self.writer = SummaryWriter(str(run.tb / "selfplay"))
        self.every_s = every_s
        self.last = 0.0
        self.display = LiveDisplay(enabled=progress, text=starting, refresh_per_second=2).start()

    def update(self, totals: Totals, alive: int, actors: int, force: bool = False,
               suffix: Callable[[int | None], str] | None = None) -> None:
        if self.display.live:
            width = self.display.width
            lines = [totals.line(alive, actors, width)] + ([suffix(width)] if suffix is not None else [])
            self.display.show("\n".join(lines))  # a line that still overflows (a very narrow terminal) is cut
        now = time.monotonic()
        if force or now - self.last >= self.every_s:
            self.last = now
            scalars = totals.scalars()
            if self.extra_scalars is not None:
                scalars.update(self.extra_scalars())
            for tag, value in scalars.items():
                self.writer.add_scalar(tag, value, totals.games)
            self.writer.flush()

    def note(self, text: str) -> None:
        """Prints a line that stays: above the live line, or plainly without one."""
        if self.display.live:
            self.display.message(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        self.display.stop()
        self.writer.close()


def run_selfplay(run: RunDir, config: Config, *, actors: int, address: str | None = None, gpus: float = 0.0,
                 minutes: float | None = None, games: int | None = None, progress: bool = True,
                 stop: threading.Event | None = None, chunk_seconds: float = 2.0,
                 on_update: Callable[[Totals], None] | None = None,
                 status_suffix: Callable[[int | None], str] | None = None,
                 placement: Placement | None = None) -> Totals:
    """Plays self-play games on Ray until `minutes` pass, `games` finish, `stop` is set or Ctrl-C.

    Finished games are kept: at the end every actor writes the games it holds
    (with transport 'ray': sends them, and waits for the sink's
    acknowledgements). `status_suffix(width)` adds a second line, of at most
    `width` columns, to the live progress (alphazero train shows the
    learner's there). `placement(i)` gives extra Ray options for actor i
    (a scheduling strategy, resources).

    Raises:
        UserError: an unreachable Ray address, a corrupt checkpoint, an actor
            that fails with a user error, bad arguments, or transport 'ray'
            through a Ray client (ray://), whose sink would write on the head.
    """
    import ray

    if config.selfplay.transport == "ray" and address is not None and address.startswith("ray://"):
        raise UserError(f"transport 'ray' writes the shards on the driver's node, and through {address} that is "
                        f"the cluster's head, not this machine: run alphazero selfplay on the head with "
                        f"--address auto (or use --transport disk with storage every node sees)")
    config = for_gpus(config, gpus)  # the device the GPUs imply; with GPUs: selfplay.gpu_games_per_actor
    quota = math.ceil(games / actors) if games and actors > 0 else None
    fleet = SelfPlayFleet(run, config, actors=actors, gpus=gpus, quota=quota, placement=placement)
    step = check_checkpoint(run, config)
    if step is None:
        print(f"self-play: no checkpoint in {run.checkpoints} yet: playing with freshly initialised weights",
              flush=True)
    remove_stale_temporaries(run.selfplay)
    resign = _ResignFollower(run, config)
    fleet.resign_threshold = resign.calibrator.threshold  # what transport 'ray' actors start with
    # A local Ray has the machine's cores, whatever was asked: Ray starts a process for every actor it can place,
    # and 256 of them exhaust a laptop's memory (issue 50).
    started_ray = connect_ray(address, num_cpus=os.cpu_count() or 1, num_gpus=gpus or None)
    try:
        _fit_actors(fleet, games, grows=address is not None and not gpus)
        with fleet:
            return _play(fleet, resign, Totals(weights_step=step if step is not None else -1),
                         _Reporter(run, progress, extra_scalars=resign.calibrator.scalars,
                                   starting=_starting_text(config)),
                         _Until(games, time.monotonic() + minutes * 60 if minutes else None, stop),
                         chunk_seconds=chunk_seconds, on_update=on_update, status_suffix=status_suffix)
    finally:
        if started_ray:
            ray.shutdown()


def _fit_actors(fleet: SelfPlayFleet, games: int | None, grows: bool) -> None:
    """Starts no more actors than the cluster holds (one CPU and ACTOR_MEMORY_BYTES each): says so and lowers
    ``fleet.count`` (and the games each plays) when fewer fit than were asked. Where the cluster ``grows``
    (one reached by --address, without GPUs, whose shares are fixed at the start) the rest start as nodes join
    (_Growth); elsewhere the actors that fit are all there will be.

    Raises:
        UserError: not even one actor fits.
    """
    import ray

    fit, why = actors_that_fit(fleet.count, ray.cluster_resources(), servers=fleet.server_count)
    if fit < 1:
        raise UserError(f"no self-play actor fits: {why}")
    if fit < fleet.count:
        later = "the rest start as nodes join the cluster" if grows else \
            "more need more CPUs or memory: a cluster, or fewer actors"
        print(f"self-play: {why}; starting {fit} ({later})", flush=True)
        fleet.count = fit
        if not grows:
            fleet.asked = fit
        fleet.quota = math.ceil(games / fit) if games else None


def _starting_text(config: Config) -> str:
    """The live line until the actors' first results: on a CPU that compiles, why the start takes seconds."""
    if config.selfplay.device == "cpu" and config.selfplay.cpu_forward == "compile":
        return ("self-play: starting actors; each compiles its network first (seconds, fewer once cached; "
                "selfplay.cpu_forward)...")
    return "self-play: starting actors..."


@dataclass
class _Until:
    """When self-play stops: after `games` games, at `deadline` (time.monotonic) or when `stop` is set."""

    games: int | None
    deadline: float | None
    stop: threading.Event | None

    def reached(self, totals: Totals) -> bool:
        return bool((self.games and totals.games >= self.games)
                    or (self.deadline and time.monotonic() >= self.deadline)
                    or (self.stop is not None and self.stop.is_set()))

    def left_text(self) -> str:
        """What is left before the deadline, for the live line ('ends in 12:05'); '' without one."""
        return f"ends in {clock_text(self.deadline - time.monotonic())}" if self.deadline else ""


def _play(fleet: SelfPlayFleet, resign: _ResignFollower, totals: Totals, reporter: _Reporter, until: _Until, *,
          chunk_seconds: float, on_update: Callable[[Totals], None] | None,
          status_suffix: Callable[[int | None], str] | None) -> Totals:
    """Keeps every actor playing `chunk_seconds` calls until `until`; then flushes their games and reports."""
    import ray

    handles = fleet.actors  # grows when nodes join (_Growth)
    losses = ActorLosses(fleet, totals, reporter.note)
    growth = _Growth(fleet, reporter.note)

    def suffix(width: int | None) -> str:
        left = until.left_text()
        lines = [fit_line([*([left] if left else []), resign.calibrator.status()], width),
                 *([status_suffix(width)] if status_suffix is not None else [])]
        return "\n".join(lines)

    pending: dict[Any, int] = {handle.play.remote(chunk_seconds): i for i, handle in enumerate(handles)}
    idle: set[int] = set()
    precisions: set[str] = set()  # what the actors' networks run in (bf16, float32), each said once
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                index = pending.pop(ref)
                stats = _collect(ref, totals, index, idle, losses)
                if index in idle:
                    continue
                if stats is not None:
                    fleet.played(index, stats)
                    precision = stats.precision.split(" ", 1)[0]  # 'bf16' or 'float32': each actor timed its own
                    if precision and precision not in precisions:
                        precisions.add(precision)
                        reporter.note(f"self-play: the network runs {stats.precision}")
                elif fleet.lost(index):
                    # Transport 'ray': Ray restarted it with fresh weights (the newest went first, before its
                    # next play()) and the threshold it was created with.
                    resign.push(handles[index])
                if not until.reached(totals):
                    pending[handles[index].play.remote(chunk_seconds)] = index
            if not until.reached(totals):
                for index in growth.check():
                    resign.push(handles[index])
                    pending[handles[index].play.remote(chunk_seconds)] = index
            fleet.follow_weights()
            resign.update(handles)
            reporter.update(totals, fleet.count - len(idle), fleet.count, suffix=suffix)
            if on_update is not None:
                on_update(totals)
            if until.reached(totals):
                _drain(pending, totals, idle, losses, timeout=4 * chunk_seconds + 30)
                break
    except KeyboardInterrupt:
        print("\nself-play: stopping; writing the finished games", flush=True)
        # The calls in progress end within a chunk: their games (whose shards may already be stored) are counted.
        _drain(pending, totals, idle, losses, timeout=2 * chunk_seconds + 5)
    finally:
        _flush(handles, totals, losses)
        resign.update([], force=True)
        totals.resign_status = resign.calibrator.status()
        reporter.update(totals, fleet.count - len(idle), fleet.count, force=True, suffix=suffix)
        reporter.close()
    return totals


GROW_CHECK_SECONDS = 5.0  # how often a driver with fewer actors than asked looks for nodes that joined


class _Growth:
    """Starts the actors asked for but not started for want of room, as nodes join the cluster."""

    def __init__(self, fleet: SelfPlayFleet, note: Callable[[str], None]) -> None:
        self.fleet, self.note = fleet, note
        self.checked = time.monotonic()

    def check(self) -> list[int]:
        """Every GROW_CHECK_SECONDS while actors are missing: starts those that now fit; returns their indices."""
        import ray

        if self.fleet.count >= self.fleet.asked or time.monotonic() - self.checked < GROW_CHECK_SECONDS:
            return []
        self.checked = time.monotonic()
        fit, _ = actors_that_fit(self.fleet.asked, ray.cluster_resources(), servers=self.fleet.server_count)
        if fit <= self.fleet.count:
            return []
        first = self.fleet.count
        self.fleet.grow(fit)
        self.note(f"self-play: the cluster grew; started actors {first}-{fit - 1} "
                  f"({fit} of the {self.fleet.asked} asked now run)")
        return list(range(first, fit))


def _collect(ref: Any, totals: Totals, index: int, idle: set[int], losses: ActorLosses) -> PlayStats | None:
    """Adds a finished play() call's statistics and returns them (None: the actor was lost); adds `index`
    to `idle` when that actor has nothing more to do.

    Raises:
        UserError: the actor failed with a user error (a corrupt checkpoint, ...).
    """
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    try:
        stats: PlayStats = ray.get(ref)
    except RayActorError as error:
        # Killed, crashed or gone with its node: Ray restarts it; its stored shards are kept, its other games
        # are lost (and counted). Give it a moment and carry on.
        totals.lost_calls += 1
        losses.failed(index, error)
        time.sleep(0.5)
        return None
    except RayTaskError as error:
        cause = error.cause if isinstance(error.cause, Exception) else error
        raise UserError(f"a self-play actor failed: {cause}") from None
    losses.heard(index, stats)
    totals.add(stats)
    if stats.games == 0 and stats.batches == 0:
        idle.add(index)  # its game quota is played
    return stats


def _drain(pending: dict[Any, int], totals: Totals, idle: set[int], losses: ActorLosses, timeout: float) -> None:
    """Waits for the play() calls in progress (they end within a chunk) and counts them."""
    import ray

    ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
    for ref in ready:
        _collect(ref, totals, pending.pop(ref), idle, losses)


FLUSH_SECONDS = 60.0  # the most a stop waits for the actors to write their finished games, all together


def _flush(handles: list[Any], totals: Totals, losses: ActorLosses) -> None:
    """Asks every actor to write the finished games it still holds; counts the games of those that cannot."""
    import ray
    from ray.exceptions import RayActorError, RayError

    # One deadline for all: an actor still starting (or lost) holds no game, and must not hold up the stop.
    refs = {handle.flush.remote(): index for index, handle in enumerate(handles)}
    ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=FLUSH_SECONDS)
    for ref in ready:
        try:
            totals.shards.extend(ray.get(ref))
        except RayActorError as error:
            losses.gone(refs[ref], _why(error))
        except RayError:
            continue
    for ref in late:
        losses.gone(refs[ref], f"no answer to the stop's flush within {FLUSH_SECONDS:.0f} s")
