"""A run's self-play on Ray: its actors, their inference servers, the shard sink and the feed of weights.

One object starts and stops them all, for `alphazero selfplay` and `alphazero
train` (selfplay.driver) and for `alphazero bench selfplay`::

    with SelfPlayFleet(run, config, actors=4) as fleet:
        stats = ray.get([actor.play.remote(2.0) for actor in fleet.actors])

With transport 'disk' the actors read and write the run directory
themselves. With transport 'ray' the fleet also starts the run's shard sink
(selfplay.sink) on this node, the one with the run directory, and a
WeightFeed: the actors never see the run directory; each gets its
threshold when it starts and the run's newest weights before its first
play(), and the feed pushes newer checkpoints as the run writes them
(``follow_weights``) and again to an actor that was lost and restarted
(``lost``).

Neither the sink's handle nor the weights are constructor arguments of an
actor: Ray could not restart an actor whose arguments had gone from the
object store.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from alphazero.config import Config, to_toml
from alphazero.errors import UserError
from alphazero.store.played_weights import poll_latest_weights
from alphazero.store.rundir import RunDir
from selfplay import NAMESPACE
from selfplay.inference import InferenceServer
from selfplay.sink import SINK_THREADS, ShardSink, sink_name
from selfplay.worker import PlayStats, SelfPlayWorker

Placement = Callable[[int], dict[str, Any]]
"""Extra Ray options for actor i (a scheduling strategy, resources)."""


ACTOR_MEMORY_BYTES = 768 * 2**20
"""The memory an actor reserves in Ray's accounting, so that Ray places no more actors on a node than its memory
holds: a tiny-preset actor's resident memory on the CPU, with room for a larger network's buffers (EXPERIMENTS.md,
"One definition of each setting, modules by concern")."""


def actors_that_fit(asked: int, resources: Mapping[str, float], *, servers: int = 0) -> tuple[int, str]:
    """Gets how many of ``asked`` actors a cluster holds, and (when fewer) the sentence that says why.

    ``resources`` are the cluster's (ray.cluster_resources()); each actor
    needs one CPU and ACTOR_MEMORY_BYTES of memory, beside the CPU of each of
    ``servers`` inference servers.

    >>> fit, why = actors_that_fit(256, {"CPU": 2.0, "memory": 16 * 2**30})
    >>> fit, why.split(": ")[-1]
    (2, '2 fit (the CPUs are the limit)')
    >>> actors_that_fit(2, {"CPU": 2.0, "memory": 16 * 2**30})
    (2, '')
    """
    cpus = int(resources.get("CPU", 0)) - servers
    by_memory = int(resources.get("memory", 0) // ACTOR_MEMORY_BYTES)
    fit = max(0, min(asked, cpus, by_memory))
    if fit == asked:
        return fit, ""
    limit = "the CPUs are" if cpus <= by_memory else "its memory is"
    held = f", {servers} of them held by inference servers" if servers else ""
    return fit, (f"{asked} actors asked, but the cluster has {int(resources.get('CPU', 0))} CPUs{held} and "
                 f"{resources.get('memory', 0) / 2**30:.1f} GiB of memory for Ray, and each actor needs 1 CPU and "
                 f"{ACTOR_MEMORY_BYTES / 2**30:.2f} GiB: {fit} fit ({limit} the limit)")


def actor_name_prefix(run: RunDir) -> str:
    """Gets the prefix of the names of a run's self-play actors (for pushing weights to them)."""
    return f"selfplay:{run.root.resolve()}:"


def server_gpus(gpus: float, servers: int) -> float:
    """Gets the GPUs each of ``servers`` inference servers asks Ray for: its share of ``gpus``, at most one.

    A whole GPU for a server of ``--gpus 0.5`` would never be granted (Ray
    would wait for it for ever); 0 without GPUs (a server on the CPU).
    """
    return min(1.0, gpus / max(servers, 1)) if gpus > 0 else 0.0


def gpu_env(holds_gpu: bool, env_vars: dict[str, str]) -> dict[str, Any]:
    """Gets a Ray runtime_env with ``env_vars``; an actor that holds no GPU also sees none.

    Ray no longer hides the GPUs from actors that reserve none: without this,
    a CUDA call there would open a context on GPU 0, beside the learner and
    unseen by Ray.
    """
    return {"env_vars": env_vars if holds_gpu else {**env_vars, "CUDA_VISIBLE_DEVICES": ""}}


@dataclass
class WeightFeed:
    """Transport 'ray': the shard sink the actors send to, and the driver's pushes of new weights.

    Weights go to an actor's evaluator, or with inference servers to the
    actor's server (``targets``). Each target gets the weights LATEST names
    once they change (newer ones, or older ones after ``learn --from-checkpoint``:
    weights are named by what they are, alphazero.store.played_weights), and
    again after a restart (which brings back fresh weights); one whose actors
    already play them (pushed by `alphazero learn --address`) is skipped.
    """

    run: RunDir
    config: Config
    sink: Any
    step: int = -1
    identity: str | None = None            # what the weights held are (played_weights.weights_identity)
    weights: Any = None                    # ObjectRef of the state dict of `step`; None: fresh weights
    file: str | None = None                # the checkpoint file last read (played_weights.file_key)
    targets: list[Any] = field(default_factory=list)   # per actor: whom to push weights to
    pushed: dict[int, str] = field(default_factory=dict)  # id(target) -> the identity last pushed to it
    played: dict[int, str] = field(default_factory=dict)  # id(target) -> the identity its actors last played
    checked: float = field(default_factory=time.monotonic)

    def load(self) -> bool:
        """Loads the weights LATEST names when they differ from those held; returns whether it did.

        Raises:
            UserError: the newest checkpoint is corrupt or of another architecture.
        """
        import ray

        found = poll_latest_weights(self.run, self.config.network, seen_file=self.file)
        if found is None:
            return False
        self.file = found.file_key
        if found.identity == self.identity:
            return False
        self.step, self.identity = found.step, found.identity
        self.weights = ray.put(found.state)
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
        if self.weights is None or self.identity is None or \
                not again and self.identity in (self.pushed.get(id(target)), self.played.get(id(target))):
            return
        self.pushed[id(target)] = self.identity
        target.set_weights.remote(self.step, self.weights, self.identity)  # taken between play() calls (or passes)

    def note(self, index: int, stats: PlayStats) -> None:
        """Notes the weights actor `index` played a call with (unknown for an actor of a server)."""
        if stats.weights_identity is not None:
            self.played[id(self.targets[index])] = stats.weights_identity


def _start_sink(run: RunDir) -> Any:
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


class SelfPlayFleet:
    """The self-play actors of one run on Ray, with their inference servers and (transport 'ray') sink and feed.

    ``inference`` is 'local' (each actor runs the network) or 'server'
    (batching servers, one per GPU, one on the CPU); default: the config's
    selfplay.inference with GPUs, else local. ``quota`` is the games each
    actor plays before it goes idle (None: no end); ``resign_threshold`` the
    threshold transport 'ray' actors start with; ``placement(i)`` extra Ray
    options for actor i. Ray must be connected (selfplay.ray_connect.connect_ray)
    for at least ``cpus`` CPUs.

    start() (or ``with``) starts them; stop() kills them all without restarts.
    """

    def __init__(self, run: RunDir, config: Config, *, actors: int, gpus: float = 0.0, inference: str | None = None,
                 quota: int | None = None, resign_threshold: float | None = None,
                 placement: Placement | None = None) -> None:
        if actors < 1:
            raise UserError(f"--actors must be at least 1, got {actors}")
        self.run, self.config, self.gpus, self.quota = run, config, gpus, quota
        self.count = actors   # the actors started (or to start); fewer than asked where the cluster is too small
        self.asked = actors
        self.inference = inference or (config.selfplay.inference if gpus > 0 else "local")
        self.server_count = max(1, int(gpus)) if self.inference == "server" else 0
        self.resign_threshold = resign_threshold
        self.placement = placement
        self.actors: list[Any] = []
        self.servers: list[Any] = []
        self.feed: WeightFeed | None = None
        self._actor_args: tuple[str | None, str] = (None, "")  # run_path and config TOML, set by start()

    @property
    def cpus(self) -> int:
        """The CPUs the fleet asks Ray for: one per actor and per server."""
        return self.count + self.server_count

    @property
    def sink(self) -> Any:
        """The shard sink's handle (transport 'ray'), else None."""
        return self.feed.sink if self.feed is not None else None

    def start(self) -> SelfPlayFleet:
        """Starts the sink and the feed (transport 'ray'), the inference servers and the actors; returns self.

        Raises:
            UserError: another driver's sink on this run, or a corrupt newest checkpoint.
        """
        import ray

        if self.config.selfplay.transport == "ray":
            self.feed = WeightFeed(self.run, self.config, _start_sink(self.run))
            self.feed.load()
        config_toml = to_toml(self.config)
        run_path = str(self.run.root) if self.feed is None else None
        served = math.ceil(self.count / max(self.server_count, 1))  # actors per server: its batch is sized for them
        self.servers = [
            ray.remote(InferenceServer).options(num_cpus=1, num_gpus=server_gpus(self.gpus, self.server_count),
                                                max_restarts=-1, max_concurrency=1000,
                                                runtime_env=gpu_env(self.gpus > 0, {}))
            .remote(run_path, config_toml, actors=served)
            for _ in range(self.server_count)
        ]
        self._actor_args = (run_path, config_toml)
        for index in range(self.count):
            self._start_actor(index, run_path, config_toml)
        return self

    def grow(self, count: int) -> None:
        """Starts actors up to ``count`` in all (when nodes joined); the new ones share the existing servers."""
        while self.count < count:
            self._start_actor(self.count, *self._actor_args)
            self.count += 1

    def _start_actor(self, index: int, run_path: str | None, config_toml: str) -> None:
        import ray

        per_actor_gpu = self.gpus / self.count if self.inference == "local" and self.gpus > 0 else 0
        # One core per actor: thread pools (torch's, Inductor's compile workers) sized for the machine would
        # fight the other actors.
        one_thread = gpu_env(per_actor_gpu > 0, {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                                          "MKL_NUM_THREADS",
                                                                          "TORCHINDUCTOR_COMPILE_THREADS")})
        options: dict[str, Any] = {"num_cpus": 1, "memory": ACTOR_MEMORY_BYTES, "max_restarts": -1,
                                   "max_task_retries": 0, "name": f"{actor_name_prefix(self.run)}{index}",
                                   "namespace": NAMESPACE, "runtime_env": one_thread}
        if per_actor_gpu:
            options["num_gpus"] = per_actor_gpu
        if self.placement is not None:
            options.update(self.placement(index))
        server = self.servers[index % len(self.servers)] if self.servers else None
        ray_transport: dict[str, Any] = {} if self.feed is None else \
            {"sink": sink_name(self.run), "resign_threshold": self.resign_threshold}
        self.actors.append(ray.remote(SelfPlayWorker).options(**options).remote(
            run_path, config_toml, f"actor{index}-{os.getpid()}", server=server, max_games=self.quota,
            **ray_transport))
        if self.feed is not None:
            self.feed.targets.append(server if server is not None else self.actors[-1])
            self.feed.push(index)  # the first weights: taken before the first play()

    # -- weights (transport 'ray'; no-ops with 'disk', whose actors poll the run directory) --

    def played(self, index: int, stats: PlayStats) -> None:
        """Notes what actor ``index`` played a call with (its weights' step)."""
        if self.feed is not None:
            self.feed.note(index, stats)

    def lost(self, index: int) -> bool:
        """Gives actor ``index``, lost and restarted by Ray with fresh weights, the newest weights again,
        before its next play(); returns whether it did (transport 'ray').

        Raises:
            UserError: the run's newest checkpoint is corrupt or of another architecture.
        """
        if self.feed is None:
            return False
        self.feed.update(force=True)
        self.feed.push(index, again=True)
        return True

    def follow_weights(self) -> None:
        """Pushes the run's newer checkpoints to the actors (every selfplay.weights_poll_seconds).

        Raises:
            UserError: the run's newest checkpoint is corrupt or of another architecture.
        """
        if self.feed is not None:
            self.feed.update()

    def stop(self) -> None:
        """Kills every actor, server and the sink, without restarts (finished games are flushed before)."""
        import ray

        for handle in [*self.actors, *self.servers, *([self.sink] if self.feed is not None else [])]:
            ray.kill(handle, no_restart=True)

    def __enter__(self) -> SelfPlayFleet:
        try:
            return self.start()
        except BaseException:
            self.stop()  # what started before the failure
            raise

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()
