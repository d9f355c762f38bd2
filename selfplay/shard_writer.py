"""A self-play actor's shards written off its search thread, by one background writer thread.

The search thread hands each finished game to a ShardWriter and goes back to
searching. One thread (a single-worker ThreadPoolExecutor: one queue, so the
games keep their order and each shard the name GameWriter gives it) runs the
actor's GameWriter and its output: the shard's PGN, validation and
compression (selfplay.records.build_shard_file) and its store (a temporary
name, fsync, rename: selfplay.records.store_shard_file) or its send to the
sink (selfplay.sink.SinkSender). The search thread does a constant amount of
work per game (EXPERIMENTS.md, "Shards written off the search
thread").

- Backpressure: at most ``max_games`` handed games wait for the writer; the
  next ``add`` waits for room, so a slow disk or a full sink window holds
  the search, as the write on the search thread did, and never grows memory.
- Nothing lost on a stop: ``flush`` waits for every game handed before it,
  writes those still buffered, waits for the output (the sink's
  acknowledgements) and returns the shards stored since the last call. A
  process that exits without a flush still runs the queued writes first
  (concurrent.futures joins its threads after their queue); games not yet
  written are lost only if the process dies, as before.
- Closing: ``close`` waits for the games handed in, ends the writer thread
  and refuses new games; its owner calls it once done (after the stop's
  ``flush``, which also writes the GameWriter's buffered games).
- Errors: the writer's first exception is raised on the search thread's
  next call of ``stored`` or ``flush`` (the end of the actor's play() call,
  with no batch in the network, or its stop): the same exception
  object, so the user reads what the write on the search thread said. The
  games of a failed write stay buffered in the GameWriter and go out with a
  later write (at the latest, the stop's flush).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from selfplay.records import GameWriter

log = logging.getLogger(__name__)


class Output(Protocol):
    """Where the GameWriter's shards go (selfplay.sink.DiskOutput or SinkSender): what the writer asks of it."""

    def settle(self, wait: bool = False) -> list[str]:
        """Gets the paths stored since the last call (``wait``: once every shard sent is stored)."""
        ...


class ShardWriter:
    """Runs ``games`` (whose shards go to ``output``) on one background thread; see the module's docstring.

    Every method but the writer's own tasks is for the one thread that hands
    in the games (the actor's search thread).
    """

    def __init__(self, games: GameWriter, output: Output, *, max_games: int) -> None:
        if max_games < 1:
            raise ValueError(f"a shard writer must hold at least one game, got {max_games}")
        self.games = games
        self.output = output
        self.max_games = max_games
        self.held_seconds = 0.0  # the search thread's waits: for room in the queue, and in stored(wait)/flush
        self.holding = threading.Event()  # set while add() waits for room (another thread may wait on it)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"shard-writer-{games.writer}")
        self._room = threading.BoundedSemaphore(max_games)
        self._lock = threading.Lock()  # guards _stored and _error, which both threads touch
        self._stored: list[str] = []
        self._error: BaseException | None = None
        # GameWriter.tick's deadline for the buffered games, set by the writer after each task (None: none due).
        self._due: float | None = None
        self._tick_queued = False
        self._settle_queued = False

    # -- the search thread -----------------------------------------------------

    def add(self, record: dict[str, Any]) -> None:
        """Hands a finished game to the writer, first waiting while ``max_games`` games wait for it.

        Raises nothing the writer raised (``stored`` does): the search goes on with no game left behind.
        """
        if not self._room.acquire(blocking=False):
            tick = time.perf_counter()
            self.holding.set()
            try:
                self._room.acquire()
            finally:
                self.holding.clear()
            self.held_seconds += time.perf_counter() - tick
        self._pool.submit(self._run, self._write_game, record)

    def tick(self) -> None:
        """Asks the writer to send the buffered games early once the oldest has waited selfplay.shard_seconds
        (GameWriter.tick); cheap when nothing is due. Raises nothing the writer raised (``stored`` does)."""
        due = self._due
        if due is not None and not self._tick_queued and self.games.clock() >= due:
            self._tick_queued = True
            self._pool.submit(self._run, self._write_due)

    def stored(self, *, wait: bool = False) -> list[str]:
        """Gets the shards stored since the last call; ``wait``: once every game handed in is written (the
        GameWriter's partial shard stays buffered, and the sink's acknowledgements are not waited for).

        Raises:
            BaseException: what the writer raised since the last call.
        """
        if wait:
            self._wait(self._pool.submit(self._run, self._settle))
        elif not self._settle_queued:  # acknowledgements that came while the writer had nothing to do
            self._settle_queued = True
            self._pool.submit(self._run, self._settle)
        self._raise()
        return self._take()

    def flush(self) -> list[str]:
        """Writes every game handed in and the GameWriter's buffered ones, waits until the output holds them
        all (the sink's acknowledgements); returns the shards stored since the last call.

        Raises:
            BaseException: what the writer raised since the last call (the shards stored are returned by the
                next call).
        """
        self._wait(self._pool.submit(self._run, self._flush_all))
        self._raise()
        return self._take()

    def close(self) -> list[str]:
        """Waits for every game handed in to be written (the GameWriter's partial shard stays buffered: ``flush``
        first to write it), then ends the writer thread; returns the shards stored since the last call. Later
        calls return nothing more; ``add`` and the others raise RuntimeError once closed (the executor's).

        Raises:
            BaseException: what the writer raised since the last call.
        """
        tick = time.perf_counter()
        self._pool.shutdown(wait=True)  # the queued tasks run first
        self.held_seconds += time.perf_counter() - tick
        self._raise()
        return self._take()

    def _wait(self, future: Future[None]) -> None:
        tick = time.perf_counter()
        future.result()  # _run keeps the task's exception for _raise: this returns once the task has run
        self.held_seconds += time.perf_counter() - tick

    def _raise(self) -> None:
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def _take(self) -> list[str]:
        with self._lock:
            stored, self._stored = self._stored, []
        return stored

    # -- the writer thread -----------------------------------------------------

    def _run(self, task: Callable[..., None], *args: Any) -> None:
        """Runs a task, then takes what the output has stored; keeps the first exception for the search thread."""
        try:
            task(*args)
            stored = self.output.settle()
            with self._lock:
                self._stored.extend(stored)
        except BaseException as error:  # noqa: BLE001 - handed to the search thread, which raises it
            self._keep(error)
        finally:
            games = self.games
            self._due = games.oldest + games.shard_seconds if games.pending and games.shard_seconds > 0 else None

    def _keep(self, error: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = error
                return
        # One is already waiting to be raised (most often the same cause again): said here, not dropped unsaid.
        log.warning("%s: another error while writing shards: %s: %s", self.games.writer, type(error).__name__, error)

    def _write_game(self, record: dict[str, Any]) -> None:
        try:
            self.games.add(record)
        finally:
            self._room.release()

    def _write_due(self) -> None:
        self._tick_queued = False
        self.games.tick()

    def _settle(self) -> None:
        self._settle_queued = False

    def _flush_all(self) -> None:
        self.games.flush()
        stored = self.output.settle(wait=True)
        with self._lock:
            self._stored.extend(stored)
