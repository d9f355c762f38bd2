"""Runs self-play on Ray: N actors (and, on GPUs, inference servers) filling a run directory.

Ray moves work and weights; the run directory keeps what matters. How shards
get there is ``selfplay.transport``:

- 'disk': each actor writes complete shards into the run directory itself,
  and polls it for new checkpoints and the resignation threshold. Every node
  must see the run directory (one machine, or shared storage).
- 'ray': the driver starts a shard sink (selfplay.sink) pinned to its own
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

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from alphazero.checkpoint import latest_checkpoint, latest_weights, load_checkpoint
from alphazero.config import Config, for_gpus, to_toml
from alphazero.console import compact_number, fit_line
from alphazero.errors import UserError
from alphazero.resign import ResignCalibrator
from alphazero.rundir import RunDir, remove_stale_temporaries
from selfplay import NAMESPACE
from selfplay.inference import InferenceServer
from selfplay.sink import SINK_THREADS, ShardSink, sink_name
from selfplay.worker import PlayStats, SelfPlayWorker

log = logging.getLogger(__name__)


def actor_name_prefix(run: RunDir) -> str:
    """Self-play actors of a run are named with this prefix (for pushing weights to them)."""
    return f"selfplay:{run.root.resolve()}:"


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
    if address:
        try:
            ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise UserError(f"cannot connect to the Ray cluster at {address}: {error}") from None
        return True
    # A node's resources are whole numbers: --gpus 0.5 declares one GPU, of which self-play asks half.
    ray.init(num_cpus=num_cpus, num_gpus=math.ceil(num_gpus) if num_gpus else None, include_dashboard=False,
             namespace=NAMESPACE, logging_level=logging.WARNING)
    return True


def server_gpus(gpus: float, servers: int) -> float:
    """Gets the GPUs each of ``servers`` inference servers asks Ray for: its share of ``gpus``, at most one.

    A whole GPU for a server of ``--gpus 0.5`` would never be granted (Ray
    would wait for it for ever); 0 without GPUs (a server on the CPU).
    """
    return min(1.0, gpus / max(servers, 1)) if gpus > 0 else 0.0


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
            f"{actors_alive}/{actors} actors",
            f"{compact_number(self.evaluations / self.elapsed)} evals/s",
            f"batch {self.evaluations / max(self.batches, 1):.1f}",
        ], width)


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


@dataclass
class _RayFeed:
    """Transport 'ray': what actors get instead of the run directory, and the driver's pushes of new weights.

    Weights go to an actor's evaluator, or with inference servers to the
    actor's server (``targets``). Each target gets each new step once, and
    again after a restart (which brings back fresh weights); one whose actors
    already play that step (pushed by `alphazero learn --address`) is skipped.
    """

    run: RunDir
    config: Config
    sink: Any
    step: int = -1
    weights: Any = None                    # ObjectRef of the state dict of `step`; None: fresh weights
    targets: list[Any] = field(default_factory=list)   # per actor: whom to push weights to
    pushed: dict[int, int] = field(default_factory=dict)  # id(target) -> the step last pushed to it
    played: dict[int, int] = field(default_factory=dict)  # id(target) -> the newest step its actors played
    checked: float = field(default_factory=time.monotonic)

    def load(self) -> bool:
        """Loads the run's newest checkpoint when it is newer than the one held; returns whether it was.

        Raises:
            UserError: the newest checkpoint is corrupt or of another architecture.
        """
        import ray

        found = latest_weights(self.run, self.config.network, newer_than=self.step)
        if found is None:
            return False
        self.step, state, _ = found
        self.weights = ray.put(state)
        return True

    def update(self, force: bool = False) -> None:
        """Every selfplay.weights_poll_seconds (``force``: now): loads a newer checkpoint and pushes it to
        every target.

        Raises:
            UserError: the newest checkpoint is corrupt or of another architecture.
        """
        now = time.monotonic()
        if not force and now - self.checked < self.config.selfplay.weights_poll_seconds:
            return
        self.checked = now
        if self.load():
            for index in range(len(self.targets)):
                self.push(index)

    def push(self, index: int, *, again: bool = False) -> None:
        """Sends the weights held to actor `index`'s target, unless it has them (``again``: even so)."""
        target = self.targets[index]
        if self.weights is None or not again and max(self.pushed.get(id(target), -1),
                                                     self.played.get(id(target), -1)) >= self.step:
            return
        self.pushed[id(target)] = self.step
        target.set_weights.remote(self.step, self.weights)  # taken between play() calls (or passes)

    def note(self, index: int, stats: PlayStats) -> None:
        """Notes the weights' step actor `index` played a call with."""
        key = id(self.targets[index])
        self.played[key] = max(self.played.get(key, -1), stats.weights_step)


def start_sink(run: RunDir) -> Any:
    """Starts the run's shard sink on this process's node (where the run directory is); returns its handle.

    Restarted by Ray whenever it dies; never scheduled on another node.

    Raises:
        UserError: another self-play driver on this cluster already runs a sink for the run.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    try:
        return ray.remote(ShardSink).options(
            name=sink_name(run), namespace=NAMESPACE, num_cpus=0, max_restarts=-1, max_task_retries=0,
            max_concurrency=SINK_THREADS, scheduling_strategy=here,
        ).remote(str(run.root))
    except ValueError as error:  # the name is taken
        raise UserError(f"cannot start the shard sink of {run.root}: {error} (is another `alphazero selfplay` "
                        f"on this run?)") from None


class _Reporter:
    """The progress line on the terminal and the scalars in run/tb/selfplay."""

    def __init__(self, run: RunDir, progress: bool, every_s: float = 10.0,
                 extra_scalars: Callable[[], dict[str, float]] | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.extra_scalars = extra_scalars
        self.writer = SummaryWriter(str(run.tb / "selfplay"))
        self.every_s = every_s
        self.last = 0.0
        self.live: Any = None
        if progress:
            from rich.console import Console
            from rich.live import Live

            self.live = Live("self-play: starting actors...", console=Console(stderr=True), refresh_per_second=2,
                             transient=False)
            self.live.start()

    def update(self, totals: Totals, alive: int, actors: int, force: bool = False,
               suffix: Callable[[int | None], str] | None = None) -> None:
        if self.live is not None:
            from rich.text import Text

            width = self.live.console.width
            lines = [totals.line(alive, actors, width)] + ([suffix(width)] if suffix is not None else [])
            # no_wrap: a line that still overflows (a very narrow terminal) is cut, never wrapped.
            self.live.update(Text("\n".join(lines), no_wrap=True, overflow="ellipsis"))
        now = time.monotonic()
        if force or now - self.last >= self.every_s:
            self.last = now
            scalars = totals.scalars()
            if self.extra_scalars is not None:
                scalars.update(self.extra_scalars())
            for tag, value in scalars.items():
                self.writer.add_scalar(tag, value, totals.games)
            self.writer.flush()

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live.console.line()  # what is printed next starts on a line of its own
        self.writer.close()


def run_selfplay(run: RunDir, config: Config, *, actors: int, address: str | None = None, gpus: float = 0.0,
                 minutes: float | None = None, games: int | None = None, progress: bool = True,
                 stop: threading.Event | None = None, chunk_seconds: float = 2.0,
                 on_update: Callable[[Totals], None] | None = None,
                 status_suffix: Callable[[int | None], str] | None = None,
                 placement: Callable[[int], dict[str, Any]] | None = None) -> Totals:
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

    if actors < 1:
        raise UserError(f"--actors must be at least 1, got {actors}")
    if config.selfplay.transport == "ray" and address is not None and address.startswith("ray://"):
        raise UserError(f"transport 'ray' writes the shards on the driver's node, and through {address} that is "
                        f"the cluster's head, not this machine: run alphazero selfplay on the head with "
                        f"--address auto (or use --transport disk with storage every node sees)")
    config = for_gpus(config, gpus)  # the device the GPUs imply; with GPUs: selfplay.gpu_games_per_actor
    step = check_checkpoint(run, config)
    if step is None:
        print(f"self-play: no checkpoint in {run.checkpoints} yet: playing with freshly initialised weights",
              flush=True)
    remove_stale_temporaries(run.selfplay)
    resign = _ResignFollower(run, config)
    inference = config.selfplay.inference if gpus > 0 else "local"
    servers_wanted = max(1, int(gpus)) if inference == "server" else 0
    started_ray = connect_ray(address, num_cpus=max(actors + servers_wanted, os.cpu_count() or 1),
                              num_gpus=gpus or None)
    quota = math.ceil(games / actors) if games else None
    feed = None
    if config.selfplay.transport == "ray":
        feed = _RayFeed(run, config, start_sink(run))
        feed.load()
    handles, servers = _start_actors(run, config, actors, gpus, inference, servers_wanted, quota, feed=feed,
                                     resign_threshold=resign.calibrator.threshold, placement=placement)
    totals = Totals(weights_step=step if step is not None else -1)
    reporter = _Reporter(run, progress, extra_scalars=resign.calibrator.scalars)

    def suffix(width: int | None) -> str:
        lines = [fit_line([resign.calibrator.status()], width),
                 *([status_suffix(width)] if status_suffix is not None else [])]
        return "\n".join(lines)

    deadline = time.monotonic() + minutes * 60 if minutes else None
    pending: dict[Any, int] = {handle.play.remote(chunk_seconds): i for i, handle in enumerate(handles)}
    idle: set[int] = set()
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                index = pending.pop(ref)
                stats = _collect(ref, totals, index, idle)
                if index in idle:
                    continue
                if feed is not None and stats is not None:
                    feed.note(index, stats)
                elif feed is not None:
                    # Lost: Ray restarts it with fresh weights and the threshold it was created
                    # with; the newest go first, before its next play().
                    feed.update(force=True)
                    feed.push(index, again=True)
                    resign.push(handles[index])
                if not _should_stop(totals, games, deadline, stop):
                    pending[handles[index].play.remote(chunk_seconds)] = index
            if feed is not None:
                feed.update()
            resign.update(handles)
            reporter.update(totals, actors - len(idle), actors, suffix=suffix)
            if on_update is not None:
                on_update(totals)
            if _should_stop(totals, games, deadline, stop):
                _drain(pending, totals, idle, timeout=4 * chunk_seconds + 30)
                break
    except KeyboardInterrupt:
        print("\nself-play: stopping; writing the finished games", flush=True)
    finally:
        _flush(handles, totals)
        resign.update([], force=True)
        totals.resign_status = resign.calibrator.status()
        reporter.update(totals, actors - len(idle), actors, force=True, suffix=suffix)
        reporter.close()
        for handle in [*handles, *servers, *([feed.sink] if feed is not None else [])]:
            ray.kill(handle, no_restart=True)
        if started_ray:
            ray.shutdown()
    return totals


def _start_actors(run: RunDir, config: Config, actors: int, gpus: float, inference: str, servers_wanted: int,
                  quota: int | None, *, feed: _RayFeed | None = None, resign_threshold: float | None = None,
                  placement: Callable[[int], dict[str, Any]] | None = None) -> tuple[list[Any], list[Any]]:
    """Starts the inference servers and the self-play actors; returns their handles.

    With ``feed`` (transport 'ray') neither gets the run directory: actors get
    the sink's name and ``resign_threshold``, and the feed's weights are
    pushed to each actor (or its server) before anything else reaches it.
    Neither the sink's handle nor the weights are constructor arguments: Ray
    could not restart an actor whose arguments had gone from the object store.
    """
    import ray

    config_toml = to_toml(config)
    run_path = str(run.root) if feed is None else None
    served = math.ceil(actors / max(servers_wanted, 1))  # actors per server: its batch is sized for them
    servers = [
        ray.remote(InferenceServer).options(num_cpus=1, num_gpus=server_gpus(gpus, servers_wanted),
                                            max_restarts=-1, max_concurrency=1000,
                                            runtime_env=_gpu_env(gpus > 0, {}))
        .remote(run_path, config_toml, actors=served)
        for _ in range(servers_wanted)
    ]
    per_actor_gpu = gpus / actors if inference == "local" and gpus > 0 else 0
    # One core per actor: thread pools (torch's, Inductor's compile workers) sized for the machine would
    # fight the other actors.
    one_thread = _gpu_env(per_actor_gpu > 0, {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                                       "MKL_NUM_THREADS",
                                                                       "TORCHINDUCTOR_COMPILE_THREADS")})
    worker = ray.remote(SelfPlayWorker)
    handles = []
    for i in range(actors):
        options: dict[str, Any] = {"num_cpus": 1, "max_restarts": -1, "max_task_retries": 0,
                                   "name": f"{actor_name_prefix(run)}{i}", "namespace": NAMESPACE,
                                   "runtime_env": one_thread}
        if per_actor_gpu:
            options["num_gpus"] = per_actor_gpu
        if placement is not None:
            options.update(placement(i))
        server = servers[i % len(servers)] if servers else None
        ray_transport: dict[str, Any] = {} if feed is None else \
            {"sink": sink_name(run), "resign_threshold": resign_threshold}
        handles.append(worker.options(**options).remote(run_path, config_toml, f"actor{i}-{os.getpid()}",
                                                        server=server, max_games=quota, **ray_transport))
        if feed is not None:
            feed.targets.append(server if server is not None else handles[-1])
            feed.push(i)  # the first weights: taken before the first play()
    return handles, servers


def _gpu_env(holds_gpu: bool, env_vars: dict[str, str]) -> dict[str, Any]:
    """Gets a Ray runtime_env with ``env_vars``; an actor that holds no GPU also sees none.

    Ray no longer hides the GPUs from actors that reserve none: without this,
    a CUDA call there would open a context on GPU 0, beside the learner and
    unseen by Ray.
    """
    return {"env_vars": env_vars if holds_gpu else {**env_vars, "CUDA_VISIBLE_DEVICES": ""}}


def _collect(ref: Any, totals: Totals, index: int, idle: set[int]) -> PlayStats | None:
    """Adds a finished play() call's statistics and returns them (None: the actor was lost); adds `index`
    to `idle` when that actor has nothing more to do.

    Raises:
        UserError: the actor failed with a user error (a corrupt checkpoint, ...).
    """
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    try:
        stats: PlayStats = ray.get(ref)
    except RayActorError:
        # Killed or crashed: Ray restarts it; its finished shards are on disk,
        # its games in flight are lost. Give it a moment and carry on.
        totals.lost_calls += 1
        time.sleep(0.5)
        return None
    except RayTaskError as error:
        cause = error.cause if isinstance(error.cause, Exception) else error
        raise UserError(f"a self-play actor failed: {cause}") from None
    totals.add(stats)
    if stats.games == 0 and stats.batches == 0:
        idle.add(index)  # its game quota is played
    return stats


def _should_stop(totals: Totals, games: int | None, deadline: float | None, stop: threading.Event | None) -> bool:
    return bool((games and totals.games >= games) or (deadline and time.monotonic() >= deadline)
                or (stop is not None and stop.is_set()))


def _drain(pending: dict[Any, int], totals: Totals, idle: set[int], timeout: float) -> None:
    """Waits for the play() calls in progress (they end within a chunk) and counts them."""
    import ray

    ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
    for ref in ready:
        _collect(ref, totals, pending.pop(ref), idle)


def _flush(handles: list[Any], totals: Totals) -> None:
    """Asks every actor to write the finished games it still holds."""
    import ray
    from ray.exceptions import RayError

    refs = [handle.flush.remote() for handle in handles]
    for ref in refs:
        try:
            totals.shards.extend(ray.get(ref, timeout=60))
        except (RayError, TimeoutError):
            continue
