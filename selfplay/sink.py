"""Where an actor's finished shards go: its own disk, or a shard sink on the run's node through Ray.

Transport 'disk' (DiskOutput): the actor writes each shard into the run
directory itself, which every node must then see.

Transport 'ray': the actor needs no run directory. A SinkSender sends each
ShardFile (the same bytes the actor would have written, under the name the
actor chose) to the run's ShardSink, a Ray actor pinned to the node that holds
the run directory, which stores it there atomically and only then answers
with its path: that answer is the acknowledgement. The sender keeps every
shard until it is acknowledged, and at most ``selfplay.sink_window`` of them:
at the limit ``put`` blocks, so a slow or restarting sink holds the actor up
and never costs a finished game. A call that fails because the sink died (or
was unreachable, or could not write), or that goes unanswered for
``ANSWER_S``, is sent again, to the restarted sink, under the same name: the
file is replaced by the same bytes, never doubled.
A call that fails otherwise (a bug: a bad name) is raised, and its shard is
held, never dropped: the stop's flush sends it once more (and raises again if
it fails again), and until it is stored its games count as held.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from alphazero.store.rundir import RunDir
from selfplay import NAMESPACE
from selfplay.records import ShardFile, store_shard_file

log = logging.getLogger(__name__)

# Threads of a sink: writes wait mostly on fsync, and several of them overlap.
SINK_THREADS = 4
# Waits between sends of a shard whose write failed: doubling from the first to the last.
RETRY_FIRST_S = 0.5
RETRY_LAST_S = 8.0
ANSWER_S = 60.0
"""The longest a write waits for its answer before its shard is sent again (same name: stored once). A write sent
as a worker's link came back from 30 s down went unanswered for the 5 minutes its node lived on, neither stored nor
failed, and held its actor's play() (EXPERIMENTS.md, "The suite green on a fresh clone, the tests that saturate
the cores alone"); a store takes milliseconds, seconds on a loaded machine."""


def sink_name(run: RunDir) -> str:
    """Gets the Ray actor name of a run's shard sink."""
    return f"shardsink:{run.root.resolve()}"


class DiskOutput:
    """Transport 'disk': writes each shard into the run directory in the calling process."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self.stored: list[str] = []
        self.games_stored = 0

    def put(self, shard: ShardFile) -> None:
        """Writes the shard now.

        Raises:
            OSError: the run directory is unwritable or the disk is full.
        """
        self.stored.append(str(store_shard_file(self.run, shard)))
        self.games_stored += shard.games

    def settle(self, wait: bool = False) -> list[str]:
        """Gets the paths stored since the last call (all are stored at once here)."""
        stored, self.stored = self.stored, []
        return stored

    @property
    def wait_seconds(self) -> float:
        return 0.0

    @property
    def games_held(self) -> int:
        """Games handed in and not stored: none here (put() stores at once or raises)."""
        return 0


class ShardSink:
    """Stores the shards actors send through Ray into the run directory of this node (a threaded Ray actor).

    ``write`` returns only after the shard (and its PGN) are renamed into
    place and the folder is synced: its answer is the acknowledgement.
    """

    def __init__(self, run_path: str) -> None:
        self.run = RunDir(run_path)
        self.lock = threading.Lock()
        self.shards = 0
        self.games = 0
        self.bytes = 0
        self.busy_seconds = 0.0  # summed over the threads: time inside store_shard_file
        self.games_by_sender: dict[str, dict[str, int]] = {}  # sender -> shard name -> its games

    def write(self, shard: ShardFile, sender: str = "") -> str:
        """Stores ``shard`` atomically; returns its path.

        Raises:
            ValueError: the name is not a plain shard file name.
            OSError: the run directory is unwritable or the disk is full (the sender tries again).
        """
        tick = time.perf_counter()
        path = store_shard_file(self.run, shard)
        with self.lock:
            self.busy_seconds += time.perf_counter() - tick
            self.shards += 1
            self.games += shard.games
            self.bytes += len(shard.data) + len((shard.pgn or "").encode())
            self.games_by_sender.setdefault(sender, {})[shard.name] = shard.games  # a shard sent again counts once
        return str(path)

    def games_stored(self, sender: str) -> int:
        """Gets the games of the shards stored from ``sender`` (one actor process) since this sink started.

        The driver asks when it loses an actor: what the actor finished and this sink holds is not lost.
        """
        with self.lock:
            return sum(self.games_by_sender.get(sender, {}).values())

    def stats(self) -> dict[str, float]:
        """Gets what this sink (since its last start) stored, its busy seconds and its process's CPU seconds."""
        with self.lock:
            return {"shards": self.shards, "games": self.games, "bytes": self.bytes,
                    "busy_seconds": self.busy_seconds, "cpu_seconds": time.process_time()}


class SinkSender:
    """Transport 'ray': sends an actor's shards to the sink and holds each one until it is acknowledged.

    At most ``window`` shards are out unacknowledged; ``put`` waits for room.
    The sink is looked up by its name (in NAMESPACE) when first needed.
    ``sender`` names this actor process to the sink, which counts what it
    stored from each (ShardSink.games_stored).
    """

    def __init__(self, sink: str, window: int, sender: str = "", answer_s: float = ANSWER_S) -> None:
        if window < 1:
            raise ValueError(f"the sink window must be at least 1, got {window}")
        self.sink_name = sink
        self._sink: Any = None
        self.window = window
        self.answer_s = answer_s
        self.in_flight: dict[Any, ShardFile] = {}  # the write call's ObjectRef -> its shard
        self.sent_at: dict[Any, float] = {}  # the write call's ObjectRef -> when it was sent (time.monotonic)
        self.rejected: list[ShardFile] = []  # shards whose write raised what no resend cures: sent again at the stop
        self.stored: list[str] = []
        self.wait_seconds = 0.0  # time put() and settle(wait=True) spent waiting for the sink
        self.holding = False  # put() holds a shard, waiting for room in the window (a threaded actor's caller sees it)
        self.resent = 0
        self.sender = sender
        self.games_stored = 0  # in acknowledged shards
        self._retry_s = RETRY_FIRST_S

    def put(self, shard: ShardFile) -> None:
        """Sends the shard, first waiting (as long as it takes) until fewer than ``window`` are unacknowledged."""
        tick = time.perf_counter()
        self.holding = len(self.in_flight) >= self.window
        try:
            while len(self.in_flight) >= self.window:
                self._settle_ready(timeout=None)
        finally:
            self.holding = False
        self.wait_seconds += time.perf_counter() - tick
        self._send(shard)

    def settle(self, wait: bool = False) -> list[str]:
        """Takes the acknowledgements that came (``wait``: until every shard is acknowledged); returns
        the paths stored since the last call."""
        tick = time.perf_counter()
        while wait and self.rejected:  # the stop's flush: the rejected shards' last chance (a failure keeps them)
            self._send(self.rejected[0])
            del self.rejected[0]  # in flight now
        self._settle_ready(timeout=0)
        while wait and self.in_flight:
            self._settle_ready(timeout=None)
        if wait:
            self.wait_seconds += time.perf_counter() - tick
        stored, self.stored = self.stored, []
        return stored

    @property
    def unacknowledged(self) -> int:
        return len(self.in_flight) + len(self.rejected)

    @property
    def games_held(self) -> int:
        """Games in shards sent (or rejected) and not yet acknowledged: what a stop now would lose."""
        return sum(shard.games for shard in [*self.in_flight.values(), *self.rejected])

    def _send(self, shard: ShardFile) -> None:
        import ray

        while self._sink is None:
            try:
                self._sink = ray.get_actor(self.sink_name, namespace=NAMESPACE)
            except ValueError:  # not (or no longer) there: the driver that runs it is starting or gone
                log.warning("no shard sink %r yet; looking again in %.1f s", self.sink_name, self._retry_s)
                self._back_off()
        ref = self._sink.write.remote(shard, self.sender)
        self.in_flight[ref], self.sent_at[ref] = shard, time.monotonic()

    def _back_off(self) -> None:
        time.sleep(self._retry_s)
        self._retry_s = min(self._retry_s * 2, RETRY_LAST_S)

    def _settle_ready(self, timeout: float | None) -> None:
        """Handles the answers that are in (waiting up to ``timeout`` for one): acknowledged, or sent again.

        Raises:
            BaseException: a write that failed for another reason than the sink's disk or its absence (a bug):
                its shard is held in ``rejected``, never dropped.
        """
        import ray

        if not self.in_flight:
            return
        wait = timeout if timeout is not None else \
            max(0.0, min(self.sent_at.values()) + self.answer_s - time.monotonic())
        ready, _ = ray.wait(list(self.in_flight), num_returns=1 if timeout is None else len(self.in_flight),
                            timeout=wait)
        if timeout is None and not ready:
            self._send_unanswered_again()
        for ref in ready:
            shard = self.in_flight.pop(ref)
            del self.sent_at[ref]
            try:
                self._answered(ref, shard)
            except BaseException:
                self.rejected.append(shard)  # not stored, not sent again: kept for the stop's flush
                raise

    def _send_unanswered_again(self) -> None:
        """Sends again, through a fresh look-up of the sink, each shard whose write has gone unanswered for
        ``answer_s``; the late answer of the first send, if one ever comes, is not waited for."""
        now = time.monotonic()
        for ref in [ref for ref, sent in self.sent_at.items() if now - sent >= self.answer_s]:
            shard = self.in_flight.pop(ref)
            del self.sent_at[ref]
            log.warning("shard %s: no answer from the sink in %.0f s; sending it again", shard.name, self.answer_s)
            self._sink = None
            self.resent += 1
            self._send(shard)

    def _answered(self, ref: Any, shard: ShardFile) -> None:
        """Takes one write's answer: an acknowledgement, or a failure a resend cures (sent again, after a wait).

        Raises:
            RayTaskError: the sink raised another error than an OSError (a bad name: a bug, no state to wait out).
        """
        import ray
        from ray.exceptions import RayError, RayTaskError

        try:
            self.stored.append(ray.get(ref))
            self.games_stored += shard.games
            self._retry_s = RETRY_FIRST_S
            return
        except RayTaskError as error:
            if not isinstance(error.cause, OSError):
                raise
            reason = f"the sink cannot write it ({error.cause})"
        except RayError as error:  # the sink died, is restarting or cannot be reached
            reason = f"the sink is unavailable ({type(error).__name__})"
        log.warning("shard %s: %s; sending it again in %.1f s", shard.name, reason, self._retry_s)
        self._back_off()
        self.resent += 1
        self._send(shard)
