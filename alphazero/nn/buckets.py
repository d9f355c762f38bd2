"""Batches padded to a few fixed sizes, the buckets, so that a pass made for one input shape serves them all.

A GPU spends much of a small batch's pass launching kernels one layer at a
time, and the share grows as batches shrink; a CUDA graph's replay or
compiled code cuts it (EXPERIMENTS.md, "GPU: one H100"). A graph or a
compiled kernel set is made for one input shape, so batches are padded up to
a few fixed sizes, the buckets: powers of two and 1.5 times powers of two
(1, 2, 3, 4, 6, 8, 12, ...), which wastes at most a third of a pass, plus
the largest batch the caller will send, which then pads nothing.

Forward modes (``FORWARD_MODES`` in alphazero.config; the Evaluator,
alphazero.nn.forward, picks one):

- ``eager``: the model as it is, no padding (what 'graphs' runs on a CPU).
- ``graphs``: a CUDA graph captured per bucket and replayed
  (alphazero.nn.cuda_graphs); the faster mode for a small network's batches
  (EXPERIMENTS.md, "GPU: one H100").
- ``compile``: ``torch.compile(mode="reduce-overhead")`` on the padded
  batches (alphazero.nn.compiled), so it compiles (and records its own
  graphs) once per bucket; the faster mode for a large network or large
  batches (the same entry). A compilation takes long, so this mode keeps
  fewer buckets: the largest batch and its halves down to a 64th of it
  (``start_buckets``).

A bucket's fast pass (a *runner*) is made by a ``RunnerMaker``: when the
caller knows its largest batch, all of them at start (``BucketedForward.warm``),
so no capture or compilation stalls a pass mid-run; else on a bucket's first
use. When making one fails (a capture the model cannot take, a compiler that
is missing), that bucket runs eager from then on, with one warning that names
the mode, the bucket and the error; the run goes on.

Padding rows hold whatever the bucket's buffer held before (zeros at first);
in eval mode every row of the network is computed on its own (batch norm uses
its running statistics), so they never change the real rows' outputs.

>>> [bucket_for(rows) for rows in (1, 3, 5, 7, 13)], bucket_for(70, max_batch=80)
([1, 3, 6, 8, 16], 80)
>>> start_buckets(10, "graphs"), start_buckets(1024, "compile")
([1, 2, 3, 4, 6, 8, 10], [16, 32, 64, 128, 256, 512, 1024])

Example::

    forward = BucketedForward(model, device, max_batch=512)   # the padding alone, any device
    out = forward(planes_t, scalars_t)     # NetOutput of the real rows only
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import torch

from alphazero.nn.planes import COMPACT_PLANES, NUM_SCALARS, make_device_constants

# The Evaluator's logger: a failed bucket's warning is about its forward pass, under the name it always had.
log = logging.getLogger("alphazero.nn.forward")

COMPILE_SMALLEST_SHARE = 64  # compile mode: buckets halve from the largest batch down to a 64th of it

Forward = Callable[[torch.Tensor, torch.Tensor], tuple]
Runner = Callable[[], tuple]  # runs one bucket's pass on that bucket's input buffers
# Makes a bucket's runner from its (planes, scalars) input buffers; raises when it cannot.
RunnerMaker = Callable[[torch.Tensor, torch.Tensor], Runner]


def bucket_for(rows: int, max_batch: int | None = None) -> int:
    """Gets the smallest bucket that holds ``rows``: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... or ``max_batch``.

    ``max_batch`` (the largest batch the caller sends) is a bucket of its own,
    so a full batch is never padded; rows above it get the usual buckets.

    Raises:
        ValueError: rows < 1.
    """
    if rows < 1:
        raise ValueError(f"a batch has at least one row, got {rows}")
    power = 1
    while power * 2 <= rows:
        power *= 2
    if power == rows:
        bucket = rows
    elif power >= 2 and rows <= power + power // 2:
        bucket = power + power // 2
    else:
        bucket = power * 2
    if max_batch is not None and rows <= max_batch < bucket:
        return max_batch
    return bucket


def start_buckets(max_batch: int, mode: str) -> list[int]:
    """Gets the buckets a fast pass makes at start for batches of up to ``max_batch`` rows, smallest first.

    'compile': ``max_batch`` and its halves (rounded up) down to a 64th of it,
    as each compilation takes long; a batch pads to the smallest that holds
    it, at most twice its size. Otherwise every bucket up to ``max_batch``
    (a capture takes milliseconds).

    Raises:
        ValueError: max_batch < 1.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    if mode == "compile":
        buckets, size = [max_batch], max_batch
        while size > 1 and (size + 1) // 2 * COMPILE_SMALLEST_SHARE >= max_batch:
            size = (size + 1) // 2
            buckets.append(size)
        return sorted(buckets)
    buckets, rows = [max_batch], 1
    while (bucket := bucket_for(rows)) < max_batch:
        buckets.append(bucket)
        rows = bucket + 1
    return sorted(buckets)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


class BucketedForward:
    """Runs a model on batches padded to their bucket; returns the real rows' outputs.

    Each bucket keeps its own input buffers on the model's device and a runner
    made by ``make`` (a CUDA graph's replay, a compiled pass; without ``make``
    the padded batch runs eagerly). A runner's outputs may be buffers that the
    next pass of its bucket overwrites, so a caller reads or copies them
    before the next call (the Evaluator gathers the legal logits right away,
    on the same stream). A bucket whose runner cannot be made runs ``eager``
    on the unpadded batch from then on (``failures`` says why).

    Args:
        eager: the plain forward (the module), called on (planes, scalars).
        device: where the model's weights are.
        mode: names the fast pass in warnings ('graphs', 'compile'), and picks the start buckets.
        make: makes a bucket's runner (capture_graph, compile_per_bucket); None: pad only.
        max_batch: the largest batch the caller sends (a bucket of its own);
            given, the start buckets are known and ``warm`` makes them.

    Call it (and ``warm``) under the caller's inference mode and autocast: a
    capture records the pass as those contexts set it up.
    """

    def __init__(self, eager: Forward, device: torch.device, *, mode: str = "eager",
                 make: RunnerMaker | None = None, max_batch: int | None = None,
                 buckets: list[int] | None = None) -> None:
        self.eager = eager
        self.device = device
        self.mode = mode
        self.make = make
        self.max_batch = max_batch
        if buckets is None:
            buckets = start_buckets(max_batch, mode) if max_batch is not None else []
        self.buckets = sorted(buckets)
        self.inputs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # bucket -> (planes, scalars) buffers
        self.runners: dict[int, Runner | None] = {}  # bucket -> its runner, None: it runs eager
        self.failures: dict[int, str] = {}  # bucket -> why its runner could not be made
        self.made = 0  # runners made (or tried) so far: a pass that made one also captured or compiled
        make_device_constants(device)  # before any capture or trace reads them

    def bucket_of(self, rows: int) -> int:
        """Gets the bucket a batch of ``rows`` pads to: the smallest start bucket that holds it, else bucket_for.

        Raises:
            ValueError: rows < 1.
        """
        for bucket in self.buckets:
            if bucket >= rows:
                return bucket
        return bucket_for(rows, self.max_batch)

    def warm(self) -> None:
        """Makes the start buckets' runners now (captures or compiles them all), so none stalls a pass later."""
        for bucket in self.buckets:
            if bucket not in self.runners:
                self._make(bucket)

    def __call__(self, planes: torch.Tensor, scalars: torch.Tensor) -> tuple:
        """Evaluates int64 [N, 112] planes and float32 [N, 7] scalars on the device; outputs have N rows."""
        rows = planes.shape[0]
        bucket = self.bucket_of(rows)
        runner = self.runners[bucket] if bucket in self.runners else self._make(bucket)
        if runner is None:
            return self.eager(planes, scalars)
        padded_planes, padded_scalars = self.inputs[bucket]
        padded_planes[:rows].copy_(planes, non_blocking=True)
        padded_scalars[:rows].copy_(scalars, non_blocking=True)
        out = runner()
        # The NetOutput (a NamedTuple) of the real rows.
        return type(out)(*[None if t is None else t[:rows] for t in out])  # type: ignore[arg-type]

    def _make(self, bucket: int) -> Runner | None:
        """Makes (once) the bucket's buffers and runner; a failure leaves it eager, with one warning."""
        self.made += 1
        planes, scalars = self._inputs_for(bucket)
        runner: Runner | None
        if self.make is None:
            runner = functools.partial(self.eager, planes, scalars)
        else:
            try:
                runner = self.make(planes, scalars)
            except Exception as error:  # any failure to capture or compile: this bucket runs eager
                self.failures[bucket] = _first_line(error)
                log.warning("forward %r, bucket %d: %s; that bucket runs eager from now on", self.mode, bucket,
                            self.failures[bucket])
                runner = None
        self.runners[bucket] = runner
        return runner

    def _inputs_for(self, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
        buffers = self.inputs.get(bucket)
        if buffers is None:
            buffers = (torch.zeros(bucket, COMPACT_PLANES, dtype=torch.int64, device=self.device),
                       torch.zeros(bucket, NUM_SCALARS, dtype=torch.float32, device=self.device))
            self.inputs[bucket] = buffers
        return buffers



__all__ = ["BucketedForward", "Forward", "Runner", "RunnerMaker", "bucket_for", "start_buckets"]
