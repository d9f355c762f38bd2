"""How the Evaluator runs the network's forward pass: eager, or padded to batch-size buckets.

A GPU spends much of a small batch's pass launching kernels one layer at a
time: on an H100 (the README's GPU figures) 6x64 ran 554k evals/s at batch
1024 eagerly and 1.06M replayed from a CUDA graph, and the gap grows as
batches shrink. A graph or a compiled kernel set is made for one input shape,
so batches are padded up to a few fixed sizes, the buckets: powers of two and
1.5 times powers of two (1, 2, 3, 4, 6, 8, 12, ...), which wastes at most a
third of a pass, plus the largest batch the caller will send, which then pads
nothing.

Modes (``FORWARD_MODES``):

- ``eager``: the model as it is, no padding (the CPU always runs this way).
- ``graphs``: a CUDA graph captured per bucket on first use and replayed;
  measured fastest there at batch 1024 and below.
- ``compile``: ``torch.compile(mode="reduce-overhead")`` on the padded
  batches, so it compiles (and records its own graphs) once per bucket;
  compiled code measured fastest there for 20x256 at batch 1024 and above.

Padding rows hold whatever the bucket's buffer held before (zeros at first);
in eval mode every row of the network is computed on its own (batch norm uses
its running statistics), so they never change the real rows' outputs.

Example::

    forward = BucketedForward(model, device, max_batch=512)   # the padding alone, any device
    out = forward(planes_t, scalars_t)     # NetOutput of the real rows only
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from alphazero.config import FORWARD_MODES
from alphazero.planes import COMPACT_PLANES, NUM_SCALARS

GRAPH_WARMUP_PASSES = 3  # eager passes before a capture: they pick convolution algorithms and fill caches

Forward = Callable[[torch.Tensor, torch.Tensor], tuple]


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


def compile_per_bucket(model: torch.nn.Module) -> Forward:
    """Gets torch.compile(mode='reduce-overhead') of ``model`` for fixed shapes, one compilation per bucket.

    Dynamo stops compiling new shapes of a function after 8 by default, and
    a caller may meet a dozen buckets; the limit is raised for these calls only.
    """
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)

    def forward(planes: torch.Tensor, scalars: torch.Tensor) -> tuple:
        with torch._dynamo.config.patch(recompile_limit=64):
            return compiled(planes, scalars)

    return forward


class BucketedForward:
    """Runs a model on batches padded to their bucket; returns the real rows' outputs.

    Each bucket keeps its own input buffers on the model's device. With
    ``graphs=True`` (CUDA only) a CUDA graph of the forward is captured per
    bucket on first use and replayed after; the returned tensors are then
    views of the graph's output buffers, overwritten by the next pass of that
    bucket, so a caller reads or copies them before the next call (the
    Evaluator gathers the legal logits right away, on the same stream).

    Args:
        forward: the module (or compiled module) called on (planes, scalars).
        device: where the model's weights are.
        max_batch: the largest batch the caller sends (a bucket of its own).
        graphs: capture CUDA graphs (needs a CUDA device).

    Call it under the caller's inference mode and autocast: a capture records
    the pass as those contexts set it up.

    Raises:
        ValueError: graphs asked for off CUDA.
    """

    def __init__(self, forward: Forward, device: torch.device, *, max_batch: int | None = None,
                 graphs: bool = False) -> None:
        if graphs and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {device}")
        self.forward = forward
        self.device = device
        self.max_batch = max_batch
        self.graphs = graphs
        self.inputs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # bucket -> (planes, scalars) buffers
        self.captured: dict[int, tuple[torch.cuda.CUDAGraph, tuple]] = {}  # bucket -> (graph, its outputs)

    def __call__(self, planes: torch.Tensor, scalars: torch.Tensor) -> tuple:
        """Evaluates int64 [N, 112] planes and float32 [N, 7] scalars on the device; outputs have N rows."""
        rows = planes.shape[0]
        bucket = bucket_for(rows, self.max_batch)
        padded_planes, padded_scalars = self._inputs_for(bucket)
        padded_planes[:rows].copy_(planes, non_blocking=True)
        padded_scalars[:rows].copy_(scalars, non_blocking=True)
        if self.graphs:
            out = self._replay(bucket)
        else:
            out = self.forward(padded_planes, padded_scalars)
        return type(out)(*(None if t is None else t[:rows] for t in out))

    def _inputs_for(self, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
        buffers = self.inputs.get(bucket)
        if buffers is None:
            buffers = (torch.zeros(bucket, COMPACT_PLANES, dtype=torch.int64, device=self.device),
                       torch.zeros(bucket, NUM_SCALARS, dtype=torch.float32, device=self.device))
            self.inputs[bucket] = buffers
        return buffers

    def _replay(self, bucket: int) -> tuple:
        entry = self.captured.get(bucket)
        if entry is None:
            entry = self._capture(bucket)
            self.captured[bucket] = entry
        graph, out = entry
        graph.replay()
        return out

    def _capture(self, bucket: int) -> tuple[torch.cuda.CUDAGraph, tuple]:
        # PyTorch's recipe: warm up on a side stream, then capture; the capture
        # reads and writes only this bucket's input buffers and its own pool.
        planes, scalars = self.inputs[bucket]
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP_PASSES):
                self.forward(planes, scalars)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.forward(planes, scalars)
        return graph, out


__all__ = ["FORWARD_MODES", "BucketedForward", "bucket_for", "compile_per_bucket"]
