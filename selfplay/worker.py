"""One self-play worker: G games at once, one network batch per search step.

A plain class, so it can be tested and benchmarked without Ray; the fleet
wraps it as a Ray actor (selfplay.fleet). Each `play()` call runs the
search loop for a while and returns statistics, so the driver can push
weights, stop the run or notice a lost actor between calls.

With transport 'disk' a worker reads and writes the run directory: it writes
its shards there, polls the newest checkpoint and run/resign.json. With
transport 'ray' it has no run directory at all: its shards go to the shard
sink (selfplay.sink), its resignation threshold comes with its construction,
and weights (the first ones before its first play()) and new thresholds are
pushed by the driver (set_weights, set_resign_threshold).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from alphazero.config import Config, SelfPlayConfig
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import build_network, pick_device
from alphazero.nn.parity import ParitySettings
from alphazero.presets import from_toml
from alphazero.search import SELFPLAY, search_params
from alphazero.search_action_values import asks_action_values
from alphazero.store.played_weights import poll_latest_weights
from alphazero.store.resign import game_resign_fields, threshold_for_actors, threshold_in_file
from alphazero.store.rundir import RunDir
from mcts_ext.search import MultiGameSearch
from selfplay.records import GameWriter
from selfplay.shard_writer import ShardWriter
from selfplay.sink import DiskOutput, SinkSender

log = logging.getLogger(__name__)

EvaluateFn = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
Result = Callable[[], tuple[np.ndarray, ...]]  # waits for a batch's (legal logits, values[, legal action values])


@dataclass
class PlayStats:
    """What one play() call did; the driver sums these."""

    worker: str = ""
    wall_seconds: float = 0.0
    network_seconds: float = 0.0      # waiting for the evaluator (forward pass, transfers, Ray for a server)
    batches: int = 0
    evaluations: int = 0              # positions sent to the network
    moves: int = 0                    # positions played (plies), finished games or not
    games: int = 0
    samples: int = 0                  # training samples recorded
    shards: list[str] = field(default_factory=list)
    game_plies: list[int] = field(default_factory=list)
    results: dict[str, int] = field(default_factory=lambda: {"white": 0, "draw": 0, "black": 0})
    terminations: dict[str, int] = field(default_factory=dict)
    resigned: int = 0
    played_through: int = 0           # games with resignation disabled
    would_have_resigned: int = 0      # ... in which a side went below the threshold
    false_resignations: int = 0       # ... and that side did not lose
    weights_step: int = -1            # -1: freshly initialised weights
    weights_identity: str | None = None  # what they are (alphazero.store.played_weights); None: fresh or a server's
    sink_wait_seconds: float = 0.0    # transport 'ray': the shard writer's thread waiting for the sink's answers
    gpu_seconds: float = 0.0          # GPU time of the local passes (CUDA events; 0 on the CPU or with a server)
    precision: str = ""               # what the local network runs in, and why ('' with a server)
    first_game_time: float | None = None  # time.time() when the worker's first game ended (since restart_games)
    # Since this actor process started (a restarted actor starts again at 0): what the driver counts as lost when
    # the process is lost.
    incarnation: str = ""             # this actor process, as opposed to the one Ray restarts after a crash
    host: str = ""                    # where it runs: 'hostname (node IP)'
    games_started: int = 0
    games_stored: int = 0             # in shards the run directory (or the sink) holds


class ShardsNotStored(OSError):
    """A worker's shards could not be stored (the disk is full, the run directory unwritable): the disk's error,
    the folder and how many finished games the worker holds unstored (lost if it stops now).

    Picklable with its fields, so the driver reads them from a Ray actor's error.
    """

    def __init__(self, code: int | None, reason: str, folder: str, games: int) -> None:
        super().__init__(code, reason)
        self.folder, self.games = folder, games

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.errno, self.strerror, self.folder, self.games)

    def __str__(self) -> str:
        code = f"[Errno {self.errno}] " if self.errno is not None else ""
        return f"cannot store {self.games} finished games in {self.folder}: {code}{self.strerror}"


def selfplay_evaluator(model: torch.nn.Module, selfplay: SelfPlayConfig, device: torch.device,
                       max_batch: int) -> Evaluator:
    """Gets the Evaluator of self-play's network (an actor's own, or an inference server's) on ``device``: the
    forward mode and precision setting of that kind of device (selfplay.cuda_forward and cuda_precision on a
    GPU, cpu_forward and cpu_precision on a CPU: a CPU's setting never decides on a GPU)."""
    forward = selfplay.cuda_forward if device.type == "cuda" else selfplay.cpu_forward
    return Evaluator(model, device, forward=forward, precision=selfplay.precision_for(device.type),
                     max_batch=max_batch, parity=ParitySettings.from_config(selfplay))


def _one_thread() -> None:
    # One actor per core: torch's own thread pool would fight the other actors
    # (the driver also starts actors with OMP/OpenBLAS/MKL at one thread).
    torch.set_num_threads(1)


@dataclass
class _Lane:
    """A share of an actor's games with its own search and batch arrays; one batch of it may be in the network."""

    index: int
    search: MultiGameSearch
    batch: tuple[np.ndarray, ...]      # search.new_batch()'s arrays, pinned for a local GPU
    steps: list[list[tuple[int, int]]]  # per slot: (ply, weights' step) at its game's start and each change since
    waiting: Result | None = None      # the batch in the network: call it for its outputs (Result)

    def change_step(self, step: int) -> None:
        """Notes that the positions each game searches from its current ply on are searched with ``step``."""
        for slot, ply in enumerate(self.search.game_plies().tolist()):
            changes = self.steps[slot]
            if changes[-1][0] == ply:  # no move since the last change: that one never searched a position
                changes[-1] = (ply, step)
            else:
                changes.append((ply, step))

    def sample_steps(self, slot: int, sample_plies: np.ndarray) -> np.ndarray:
        """Gets the weights' step that searched each sample of the slot's game, from the samples' plies."""
        plies, steps = zip(*self.steps[slot])
        return np.asarray(steps, np.int32)[np.searchsorted(plies, sample_plies, side="right") - 1]


def lane_games(games: int, overlap: bool) -> list[int]:
    """Splits an actor's games into its lanes: one, or two halves (the first takes the odd game)."""
    if not overlap or games < 2:
        return [games]
    return [games - games // 2, games // 2]


def uses_overlap(setting: str, device: torch.device | None) -> bool:
    """Whether selfplay.overlap ('auto', 'on', 'off') gives two lanes on ``device`` (None: an inference server)."""
    if setting == "auto":
        return device is None or device.type == "cuda"
    return setting == "on"


class SelfPlayWorker:
    """Plays games with its own network copy (or an inference server) and writes them to the run.

    Its games are split into lanes (selfplay.overlap): with two, one lane's
    batch is in the network while the other lane is searched, so the search
    hides behind the network. On a GPU the pass only gets queued (CUDA
    streams); on the CPU the network runs in a thread; with an inference
    server both lanes' requests are in flight. The network sees only the
    legal moves' logits (Evaluator.evaluate_legal, MultiGameSearch.backup_legal),
    and the legal moves' action values where the search reads them and the
    network has the head (alphazero.search_action_values; ``action_values``).
    """

    def __init__(self, run_path: str | None, config_toml: str, name: str, *, seed: int | None = None,
                 device: str | None = None, server: Any = None, max_games: int | None = None,
                 sink: str | None = None, resign_threshold: float | None = None) -> None:
        """Builds the worker's network and searches.

        Transport 'disk': ``run_path`` names the run; its newest checkpoint and
        resign.json are read now and polled later. Transport 'ray': ``sink``
        names the run's ShardSink actor, which takes the shards, ``run_path``
        is None, ``resign_threshold`` is the one to start with, and the
        network keeps fresh weights until set_weights.

        Raises:
            ValueError: neither a run directory nor a sink.
            UserError: the run's newest checkpoint is corrupt or of another architecture.
        """
        _one_thread()
        if run_path is None and sink is None:
            raise ValueError("a self-play worker needs a run directory (transport 'disk') or a sink ('ray')")
        self.run = RunDir(run_path) if run_path is not None else None
        self.config: Config = from_toml(config_toml)
        self.name = name
        self.server = server
        self.step = -1
        self.weights_identity: str | None = None  # None: freshly initialised weights
        self.weights_file: str | None = None      # the checkpoint file last read (played_weights.file_key)
        self.weights_checked = 0.0
        self.first_game_time: float | None = None  # time.time() at the first finished game (bench selfplay's latency)
        self.incarnation = uuid.uuid4().hex[:12]
        self.host = _host_text()
        selfplay = self.config.selfplay
        torch_device = pick_device(device or selfplay.device) if server is None else None
        games = lane_games(selfplay.games_per_actor, uses_overlap(selfplay.overlap, torch_device))
        self.evaluator: Evaluator | None = None
        if torch_device is not None:
            self.evaluator = selfplay_evaluator(build_network(self.config.network), selfplay, torch_device,
                                                games[0] * self.config.search.leaves_per_game)
            self._poll_weights(force=True)
            if self.step < 0 and self.run is not None:
                log.warning("%s: no checkpoint in %s yet: playing with freshly initialised weights",
                            name, self.run.checkpoints)
            self.evaluator.warm_up()  # every bucket's graph or compilation now, none in the middle of a game
        # On the CPU a second lane only overlaps if the network runs beside the search, in a thread.
        self.pool = ThreadPoolExecutor(max_workers=1) if len(games) > 1 and torch_device is not None \
            and torch_device.type == "cpu" else None
        # Self-play wants variety more than reproducibility: a restarted actor must
        # not replay the games it already wrote.
        seed = seed if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        self.resign_checked = time.monotonic()
        threshold = threshold_for_actors(self.run, self.config.search) if self.run is not None else resign_threshold
        params = search_params(self.config.search, SELFPLAY, resign_threshold=threshold)
        self.lanes: list[_Lane] = []
        for index, count in enumerate(games):
            search = MultiGameSearch(count, params, seed=seed + index)
            batch = search.new_batch()
            if self.evaluator is not None:
                batch = self.evaluator.pin(batch)
            self.lanes.append(_Lane(index, search, batch, [[(0, self.step)] for _ in range(count)]))
        # The search's value of each visited move goes into the shards where the run's network has an
        # action-value head, which the learner trains on them (docs/methods.md, "Self-play teaches the head").
        self.keeps_move_values = self.config.network.action_value_head != "none"
        # Asked of the network only where the search reads them; a network without the head is said once here.
        self.action_values = asks_action_values(
            self.search, self.search.reads_action_values and self._has_action_values(),
            "the inference server's network" if server is not None else "the run's network",
            lambda line: log.warning("%s: %s", name, line))
        # Games this worker may still start (None: no limit); all slots start at once.
        total = sum(games)
        self.games_to_start = None if max_games is None else max_games - total
        slots = [(lane, slot) for lane in self.lanes for slot in range(lane.search.games)]
        self.games_started = min(total, max_games) if max_games is not None else total
        for lane, slot in slots[self.games_started:]:
            lane.search.clear(slot)
        self.output: DiskOutput | SinkSender
        if sink is None:
            assert self.run is not None  # checked above: a run directory or a sink
            self.output = DiskOutput(self.run)
        else:
            self.output = SinkSender(sink, selfplay.sink_window, sender=self.incarnation)
        self.writer = GameWriter(self.output.put, name, shard_games=selfplay.shard_games, save_pgn=selfplay.save_pgn,
                                 shard_seconds=selfplay.shard_seconds)
        # The writer and the output run on a thread of their own: no shard is built or stored between a batch
        # and its backup. Room for a shard's worth of games (two at least) before a slow disk holds the search.
        self.shard_writer = ShardWriter(self.writer, self.output, max_games=max(2, selfplay.shard_games))

    @property
    def search(self) -> MultiGameSearch:
        """The first lane's search (the only one without overlap)."""
        return self.lanes[0].search

    def _has_action_values(self) -> bool:
        """Whether the network this worker evaluates with (its own, or its server's: asked once) has the head."""
        if self.server is not None:
            import ray

            return bool(ray.get(self.server.has_action_values.remote()))
        return self.evaluator is not None and self.evaluator.has_action_values

    # -- weights -------------------------------------------------------------

    def set_weights(self, step: int, state_dict: dict[str, torch.Tensor], identity: str | None = None) -> int:
        """Takes weights pushed through Ray (between play() calls, with no batch in the network) unless they are
        the ones in use: any other weights, of a lower step too (a rewound learner's). A push that does not name
        its weights (``identity`` None, an older sender) is named by its step."""
        if self.evaluator is not None:
            self._take_weights(step, identity if identity is not None else f"step {step}", state_dict)
        return self.step

    def _take_weights(self, step: int, identity: str, state_dict: dict[str, torch.Tensor]) -> None:
        """Every weight change goes through here, whichever transport brought it: Evaluator.set_weights, which
        also refolds the batch norms and arms the parity check for the next passes (alphazero.nn.forward)."""
        if self.evaluator is None or identity == self.weights_identity:
            return
        self.evaluator.set_weights(state_dict)
        self.weights_identity = identity
        self._use_step(step)
        log.info("%s: now playing with the weights of step %d (%s)", self.name, step, identity)

    def _use_step(self, step: int) -> None:
        """Notes that the network now holds the weights of ``step``: each game's next positions are searched
        with them (between moves, also in the middle of a game; the shards record each sample's step)."""
        if step == self.step:
            return
        self.step = step
        for lane in getattr(self, "lanes", ()):  # none yet while the constructor loads the first weights
            lane.change_step(step)

    def _poll_weights(self, force: bool = False) -> None:
        """Loads the weights LATEST names when they differ from those in use (transport 'disk'): newer ones,
        or older ones after a rewind (``learn --from-checkpoint``)."""
        if self.evaluator is None or self.run is None:
            return
        now = time.monotonic()
        if not force and now - self.weights_checked < self.config.selfplay.weights_poll_seconds:
            return
        self.weights_checked = now
        found = poll_latest_weights(self.run, self.config.network, seen_file=self.weights_file)
        if found is not None:
            self._take_weights(found.step, found.identity, found.state)
            self.weights_file = found.file_key

    # -- the resignation threshold -------------------------------------------------

    def set_resign_threshold(self, threshold: float | None) -> None:
        """Takes the calibrated threshold pushed through Ray; games started from now on use it."""
        if self.config.search.resign_mode == "calibrated" and threshold != self.search.resign_threshold:
            for lane in self.lanes:
                lane.search.set_resign_threshold(threshold)
            log.info("%s: new games resign below %s", self.name, threshold)

    def _poll_resign(self) -> None:
        """Reads run/resign.json as often as the weights are polled (the driver also pushes it; 'disk' only)."""
        now = time.monotonic()
        if self.run is None or self.config.search.resign_mode != "calibrated" or \
                now - self.resign_checked < self.config.selfplay.weights_poll_seconds:
            return
        self.resign_checked = now
        found, threshold = threshold_in_file(self.run)
        if found:  # a missing or unreadable file keeps the threshold in use (pushed, or read before)
            self.set_resign_threshold(threshold)

    def _submit(self, lane: _Lane, rows: int) -> Result:
        """Sends the first `rows` leaves of the lane's batch to the network; returns what waits for the result."""
        planes, scalars, indices, counts = lane.batch[0][:rows], lane.batch[1][:rows], lane.batch[2], lane.batch[3]
        if self.server is not None:
            import ray

            width = int(counts[:rows].max())
            ref = self.server.evaluate_legal.remote(planes, scalars, np.ascontiguousarray(indices[:rows, :width]),
                                                    counts[:rows], action_values=self.action_values)

            def from_server() -> tuple[np.ndarray, ...]:
                logits, values, step, *action_values = ray.get(ref)  # action values where asked
                self._use_step(step)
                return logits, values, *action_values

            return from_server
        assert self.evaluator is not None
        if self.pool is not None:
            if self.action_values:
                return self.pool.submit(self.evaluator.evaluate_legal, planes, scalars, indices, counts,
                                        lane=lane.index, action_values=True).result
            # Not asked: the call as before, which an evaluator without the keyword takes too.
            return self.pool.submit(self.evaluator.evaluate_legal, planes, scalars, indices, counts,
                                    lane=lane.index).result
        return self.evaluator.submit_legal(planes, scalars, indices, counts, lane=lane.index,
                                           action_values=self.action_values).wait

    # -- playing -------------------------------------------------------------

    def play(self, seconds: float) -> PlayStats:
        """Runs the search loop for about `seconds`; finished games go to the shard writer's thread, which
        writes them as shards fill up (selfplay.shard_writer).

        Returns with no batch in the network, so weights may change between calls.
        A writer that has a shard's worth of games waiting (a slow disk; with
        transport 'ray', a full sink window) holds the loop (and the call);
        stats.shards lists the shards stored (acknowledged) since the last
        call. Once every game is played (idle()) the call returns only after
        the writer has written every game it was handed.

        Raises:
            ShardsNotStored: a shard's write failed (the disk is full, the run directory unwritable): raised at
                the end of the call (no batch in the network); its games stay buffered for a later write.
        """
        stats = PlayStats(worker=self.name)
        moves_before = self._total_moves()
        gpu_before = self.evaluator.gpu_seconds if self.evaluator is not None else 0.0
        sink_wait_before = self.output.wait_seconds
        start = time.perf_counter()
        if len(self.lanes) == 1:
            lane = self.lanes[0]
            while time.perf_counter() - start < seconds and lane.search.searching():
                self._poll_weights()
                self._poll_resign()
                self._step(lane, stats, submit=True)
                self._receive(lane, stats)
        else:
            self._poll_weights()  # here only: no batch is in the network
            self._poll_resign()
            while time.perf_counter() - start < seconds and any(lane.search.searching() for lane in self.lanes):
                for lane in self.lanes:
                    self._receive(lane, stats)
                    self._step(lane, stats, submit=time.perf_counter() - start < seconds)
        for lane in self.lanes:
            self._receive(lane, stats)
            self._collect(stats, lane)  # games that ended inside the last gather()
        stats.shards.extend(self._storing(lambda: self.shard_writer.stored(wait=self.idle())))
        stats.wall_seconds = time.perf_counter() - start
        stats.sink_wait_seconds = self.output.wait_seconds - sink_wait_before
        stats.moves = self._total_moves() - moves_before
        stats.weights_step = self.step
        stats.weights_identity = self.weights_identity
        stats.first_game_time = self.first_game_time
        self._count_games(stats)
        if self.evaluator is not None:
            stats.gpu_seconds = self.evaluator.gpu_seconds - gpu_before
            stats.precision = self.evaluator.precision_text()
        return stats

    def _count_games(self, stats: PlayStats) -> None:
        """Notes in ``stats`` who this actor process is and the games it started and saw stored."""
        stats.incarnation, stats.host = self.incarnation, self.host
        stats.games_started, stats.games_stored = self.games_started, self.output.games_stored

    def _step(self, lane: _Lane, stats: PlayStats, *, submit: bool) -> None:
        """Collects the lane's finished games and, when `submit`, sends its next leaves to the network."""
        self._collect(stats, lane)
        if submit and lane.search.searching():
            rows = lane.search.gather(*lane.batch)
            if not rows:
                self._collect(stats, lane)  # games that ended inside gather(): their slots start new ones
            else:
                tick = time.perf_counter()
                lane.waiting = self._submit(lane, rows)  # on the CPU without overlap: the whole pass
                stats.network_seconds += time.perf_counter() - tick
                stats.batches += 1
                stats.evaluations += rows

    def _receive(self, lane: _Lane, stats: PlayStats) -> None:
        """Waits for the lane's batch in the network, if any, and backs it up."""
        if lane.waiting is None:
            return
        tick = time.perf_counter()
        logits, values, *action_values = lane.waiting()  # action values where the worker asks (self.action_values)
        stats.network_seconds += time.perf_counter() - tick
        lane.waiting = None
        lane.search.backup_legal(np.ascontiguousarray(logits, np.float32), np.ascontiguousarray(values, np.float32),
                                 np.ascontiguousarray(action_values[0], np.float32) if action_values else None)
        self._collect(stats, lane)

    def _total_moves(self) -> int:
        return sum(lane.search.total_moves for lane in self.lanes)

    def _collect(self, stats: PlayStats, lane: _Lane) -> None:
        for slot, record in lane.search.take_finished():
            if self.first_game_time is None:
                self.first_game_time = time.time()
            record["weights_step"] = self.step
            record["weights_step_first"] = lane.steps[slot][0][1]
            record["weights_steps"] = lane.sample_steps(slot, record["plies_of_samples"])
            record["actor"] = self.name
            record["game_id"] = uuid.uuid4().hex  # stable: the learner's validation split hashes it
            if not self.keeps_move_values:
                del record["policy_wins"]  # only a network with an action-value head learns from them
            record.update(game_resign_fields(record, self.config.search.resign_consecutive))
            self._count(stats, record)
            self.shard_writer.add(record)  # waits here while a shard's worth of games waits for the writer
            if self.games_to_start is None or self.games_to_start > 0:
                lane.search.start_game(slot)
                lane.steps[slot] = [(0, self.step)]
                self.games_started += 1
                if self.games_to_start is not None:
                    self.games_to_start -= 1
        self.shard_writer.tick()  # a shard whose oldest game has waited selfplay.shard_seconds goes out now

    @staticmethod
    def _count(stats: PlayStats, record: dict[str, Any]) -> None:
        stats.games += 1
        stats.samples += len(record["results"])
        stats.game_plies.append(record["plies"])
        stats.results[record["winner"] or "draw"] += 1
        stats.terminations[record["termination"]] = stats.terminations.get(record["termination"], 0) + 1
        stats.resigned += record["termination"] == "resignation"
        if not record["resign_enabled"]:
            stats.played_through += 1
            if record["would_resign_side"] is not None:
                stats.would_have_resigned += 1
                stats.false_resignations += record["winner"] != _other(record["would_resign_side"])

    def network_rate(self, seconds: float, rows: int | None = None) -> float:
        """Evaluations/s of the network alone, through this worker's path, on `rows` of its leaves.

        The baseline of `alphazero bench selfplay`: same process (or the same
        inference server), same thread settings, same kind of positions (the
        last batch of the first lane, repeated to `rows`; default: a full
        lane), the same legal-logit path (with the action values where self-play
        asks for them), no search in between.
        """
        lane = self.lanes[0]
        rows = max(1, rows or lane.search.max_batch)
        arrays = tuple(np.resize(array, (rows, *array.shape[1:])) for array in lane.batch[:4])
        np.maximum(arrays[3], 1, out=arrays[3])  # rows never gathered list no move; read one logit there
        if self.server is not None:
            import ray

            return ray.get(self.server.network_rate.remote(*arrays, seconds, action_values=self.action_values))
        assert self.evaluator is not None
        pinned = self.evaluator.pin(arrays)  # as self-play's batches are
        for target, array in zip(pinned, arrays):
            target[...] = array
        return measure_rate(self.evaluator, pinned[0], pinned[1], pinned[2], pinned[3], seconds,
                            action_values=self.action_values)

    def restart_games(self, games: int | None = None) -> None:
        """Drops every game in flight and starts ``games`` new ones (None: one per slot), shared among the lanes
        as at construction; the other slots stay idle. Call between play() calls (no batch in the network).
        For `alphazero bench selfplay`, which measures several numbers of games in flight with one set of actors.

        Raises:
            ValueError: more games than the worker has slots.
        """
        counts = [lane.search.games for lane in self.lanes] if games is None else \
            lane_games(games, len(self.lanes) > 1)
        if games is not None and (games < 1 or any(c > lane.search.games for c, lane in zip(counts, self.lanes))):
            slots = sum(lane.search.games for lane in self.lanes)
            raise ValueError(f"{games} games do not fit this worker's {slots} slots")
        for lane, count in zip(self.lanes, counts):
            for slot in range(lane.search.games):
                lane.search.clear(slot)
                if slot < count:
                    lane.search.start_game(slot)
                    lane.steps[slot] = [(0, self.step)]
                    self.games_started += 1
        self.first_game_time = None

    def flush(self, *, last: bool = False) -> list[str]:
        """Waits for the shard writer to write every finished game, those still buffered too (at a stop), and,
        with transport 'ray', until the sink has acknowledged every shard; returns the paths stored since the
        last play() call. ``last`` (the stop's flush) then ends the writer's thread: no game comes after it.

        Raises:
            ShardsNotStored: a shard's write failed (the disk is full, the run directory unwritable): the error
                counts the finished games this worker still holds, which a stop now loses.
        """
        stored = self._storing(self.shard_writer.flush)
        if last:
            stored += self._storing(self.shard_writer.close)
        return stored

    def _storing(self, call: Callable[[], list[str]]) -> list[str]:
        """Runs one of the shard writer's calls; a disk's error comes out as ShardsNotStored, which says what
        it costs (the driver cannot count the games still in this process)."""
        try:
            return call()
        except OSError as error:
            folder = str(self.run.selfplay) if self.run is not None else "the run directory of the shard sink's node"
            held = len(self.writer.pending) + self.output.games_held
            raise ShardsNotStored(error.errno, error.strerror or str(error), folder, held) from error

    def idle(self) -> bool:
        """Whether every game has finished and no new one will start (max_games reached)."""
        return not any(lane.search.searching() for lane in self.lanes)


def measure_rate(evaluator: Evaluator, planes: np.ndarray, scalars: np.ndarray, indices: np.ndarray,
                 counts: np.ndarray, seconds: float, *, action_values: bool = False) -> float:
    """Evaluations/s of evaluator.evaluate_legal (with ``action_values`` as self-play asks) on one batch,
    repeated for about `seconds` after a warm-up pass."""
    evaluator.evaluate_legal(planes, scalars, indices, counts, action_values=action_values)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        evaluator.evaluate_legal(planes, scalars, indices, counts, action_values=action_values)
        done += len(planes)
    return done / (time.perf_counter() - start)


def _host_text() -> str:
    """Where this process runs, as the driver names a lost actor's host: 'hostname (node IP)'."""
    try:
        import ray

        address = ray.util.get_node_ip_address() if ray.is_initialized() else ""
    except Exception:  # noqa: BLE001 - a name for messages only; never worth failing an actor over
        address = ""
    return f"{socket.gethostname()} ({address})" if address else socket.gethostname()


def _other(colour: str) -> str:
    return "black" if colour == "white" else "white"
