"""The learner's batches, made on a prefetch thread while the current step trains.

``BatchFeed.prefetching(step)`` starts a thread (learner.prefetch) that, for
each step from ``step`` on, reads the new shards (ReplayWindow.refresh),
samples the window (with the mix folder's rows, learner.mix_share), and
stages the batch for the device (learner.batch_device: pinned memory on
CUDA), up to DEPTH batches ahead of the step that trains on them; ``next``
takes them in order (EXPERIMENTS.md, "The learner's targets sparse
on the device, a prefetch thread").

- **One thread at a time in the windows**: ``lock`` is held by the thread
  while it reads shards or samples, and by the training thread while it
  validates or saves the window's state; counters the progress line reads
  are plain numbers, read without it.
- **The same batches as without a thread**: the samplers are drawn in the
  same order as the steps, so a seed gives the same batches; the draws of
  batches made but not trained on are not the run's: a checkpoint saves the
  samplers as they were before the oldest of them (``window_state``), and
  leaving ``prefetching`` puts the samplers back there, so that the next
  ``train`` (or a resumed run) draws those batches again.
- **Waiting**: while the window is short of positions (or at its reuse cap)
  the thread looks again every ``learner.poll_seconds`` and publishes why
  (``waiting``); ``next`` calls ``on_wait(reason, text)`` every WAKE_S
  while it waits, and returns None once ``stop`` is set.
- **Errors** raised on the thread are raised by ``next``. Leaving
  ``prefetching`` (a stop, an error) closes the thread and waits for the
  batch it is making (not for positions it waits for), whose reading of new
  shards stops between two shards once closed (``_draw``); a second Ctrl-C
  waits for nothing (a daemon thread, learner.prefetch).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from alphazero.config import LearnerConfig
from learner.batch import Batch, concatenate_batches
from learner.batch_device import StagedBatch, stage
from learner.prefetch import Prefetcher
from learner.replay import ReplayWindow, SamplerState

__all__ = ["DEPTH", "WAKE_S", "BatchFeed"]

DEPTH = 2  # batches made ahead of the step: one is staged while the step trains on another
WAKE_S = 0.25  # how often ``next`` looks at the stop event and the waiting line while no batch is ready

OnWait = Callable[[str, str], None]  # (waiting reason, text)


@dataclass(frozen=True)
class _Drawn:
    """The samplers before one batch's draws."""

    window: SamplerState
    mix: SamplerState | None


@dataclass(frozen=True)
class _Fed:
    batch: StagedBatch
    waited_s: float  # seconds the thread waited for positions before it could draw this batch


class BatchFeed:
    """The batches of a replay window (and a mix folder's window), made ahead on a thread.

    Args:
        window: the replay window the batches are drawn from (the reuse cap counts its rows alone).
        mix: the mix folder's window, or None.
        settings: batch_size, mix_rows(step), poll_seconds.
        pin: stage the batches in pinned memory (learner.batch_device.pins).
        describe_wait: says why the window cannot give ``size`` rows now (the learner's waiting line).
    """

    def __init__(self, window: ReplayWindow, mix: ReplayWindow | None, settings: LearnerConfig, *, pin: bool,
                 describe_wait: Callable[[int], str]) -> None:
        self.window = window
        self.mix = mix
        self.settings = settings
        self.pin = pin
        self.describe_wait = describe_wait
        self.lock = threading.Lock()  # the windows (see the module docstring)
        self._pending_lock = threading.Lock()
        # The samplers before each batch drawn and not yet taken by ``next``, oldest first (the newest may be
        # one being drawn now).
        self._pending: deque[_Drawn] = deque()
        self.waiting: tuple[str, str] | None = None  # (reason, text) while the thread waits for positions
        self._prefetcher: Prefetcher[_Fed] | None = None
        self._step = 0  # the step of the next batch the thread makes

    # --- the thread's side ---------------------------------------------------------------------------

    def _sizes(self, step: int) -> tuple[int, int]:
        mixed = self.settings.mix_rows(step) if self.mix is not None else 0
        return self.settings.batch_size - mixed, mixed

    def _draw(self, step: int, *, force: bool, closed: threading.Event) -> Batch | None:
        """Reads new shards and draws step ``step``'s batch; None (drawing nothing) while the window waits.
        Reading stops between two shards once ``closed`` is set: a stop never waits for a backlog."""
        size, mixed = self._sizes(step)
        with self.lock:
            self.window.refresh(force=force, cancelled=closed.is_set)
            drawn = _Drawn(self.window.sampler_state(), self.mix.sampler_state() if self.mix is not None else None)
            with self._pending_lock:  # before the draw: a checkpoint taken meanwhile saves the state before it
                self._pending.append(drawn)
            batch = self.window.sample(size)
            if batch is None:
                with self._pending_lock:
                    self._pending.pop()
                reason = self.window.waiting_reason(size)
                self.waiting = (reason or "", self.describe_wait(size))
                return None
            if mixed:
                assert self.mix is not None
                extra = self.mix.sample(mixed)
                assert extra is not None  # no reuse cap, and never empty (checked when opened)
                batch = concatenate_batches(batch, extra)
        return batch

    def _make(self, closed: threading.Event) -> _Fed | None:
        """Makes the next step's batch, waiting for positions while the window has too few; None once closed."""
        step, started = self._step, None
        batch = self._draw(step, force=False, closed=closed)
        while batch is None:
            if started is None:
                started = time.perf_counter()
            batch = self._draw(step, force=True, closed=closed)
            if batch is None and closed.wait(self.settings.poll_seconds):
                return None
        self.waiting = None
        self._step += 1
        waited = time.perf_counter() - started if started is not None else 0.0
        return _Fed(stage(batch, pin=self.pin), waited)

    # --- the training thread's side -------------------------------------------------------------------

    @contextlib.contextmanager
    def prefetching(self, step: int) -> Iterator[BatchFeed]:
        """Makes the batches of steps ``step``, ``step + 1``, ... on a thread until the block ends, then puts
        the samplers back before the batches it made that were not taken."""
        if self._prefetcher is not None:
            raise RuntimeError("the batches are already being prefetched")
        self._step = step
        self._prefetcher = Prefetcher(self._make, depth=DEPTH, name="learner-batches")
        quitting = False
        try:
            yield self
        except KeyboardInterrupt:  # a second Ctrl-C: the process quits now, without saving
            quitting = True
            raise
        finally:
            prefetcher, self._prefetcher = self._prefetcher, None
            prefetcher.close(wait=not quitting)
            if not quitting:
                self._rewind()

    def _rewind(self) -> None:
        """Puts the samplers back before the oldest batch drawn and not taken (the thread has ended)."""
        with self.lock, self._pending_lock:
            if self._pending:
                oldest = self._pending[0]
                self.window.rewind(oldest.window)
                if self.mix is not None and oldest.mix is not None:
                    self.mix.rewind(oldest.mix)
            self._pending.clear()
            self.waiting = None

    def next(self, stop: threading.Event, on_wait: OnWait) -> tuple[StagedBatch | None, float]:
        """Takes the next batch and the seconds this call waited for positions (not for the thread's work);
        calls ``on_wait`` every WAKE_S while the thread waits for them; (None, seconds) once ``stop`` is set.

        Raises:
            RuntimeError: outside ``prefetching``.
            BaseException: what the thread raised.
        """
        if self._prefetcher is None:
            raise RuntimeError("BatchFeed.next runs inside prefetching()")
        started = time.perf_counter()
        while not stop.is_set():
            fed = self._prefetcher.get(timeout=WAKE_S)
            if fed is not None:
                with self._pending_lock:
                    self._pending.popleft()
                return fed.batch, min(time.perf_counter() - started, fed.waited_s)
            waiting = self.waiting
            if waiting is not None:
                on_wait(*waiting)
        return None, time.perf_counter() - started

    def _trained(self) -> SamplerState:
        """Gets the window's sampler as the batches taken so far left it: before the oldest batch drawn and not
        taken, else as it is (read under the lock the thread takes before a draw, so never between the two)."""
        with self._pending_lock:
            return self._pending[0].window if self._pending else self.window.sampler_state()

    def window_state(self) -> dict[str, Any]:
        """Gets the window's state for a checkpoint, its sampler as the steps trained so far left it."""
        with self.lock:
            return self.window.state(self._trained())

    @property
    def samples_drawn(self) -> int:
        """Counts the window's samples the steps trained so far drew (not those of batches made ahead)."""
        return self._trained().drawn

    @property
    def average_reuse(self) -> float:
        """Gets the samples the trained steps drew per position that ever entered the window."""
        added = self.window.positions_added
        return self.samples_drawn / added if added else 0.0
