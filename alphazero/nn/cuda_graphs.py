"""CUDA graphs: a bucket's pass captured once and replayed, the ``graphs`` forward mode (alphazero.nn.buckets).

A replay launches the whole recorded pass at once instead of kernel by
kernel; it reads and writes the same buffers every time, which is why the
batches are padded to buckets, each with its own input buffers. Capture and
replay run on the buffers' GPU (alphazero.nn.cuda_device), whichever is current.

Example::

    make = functools.partial(capture_graph, model)     # a RunnerMaker
    forward = BucketedForward(model, device, mode="graphs", make=make, max_batch=512)
"""

from __future__ import annotations

import torch

from alphazero.nn.buckets import Forward, Runner
from alphazero.nn.cuda_device import device_context

GRAPH_WARMUP_PASSES = 3  # eager passes before a capture: they pick convolution algorithms and fill caches


def capture_graph(forward: Forward, planes: torch.Tensor, scalars: torch.Tensor) -> Runner:
    """Captures ``forward(planes, scalars)`` in a CUDA graph; returns what replays it.

    The replay reads the buffers ``planes`` and ``scalars`` and returns the
    captured outputs, overwritten by the next replay. The capture is
    thread-local: CUDA calls of other threads (a server's event loop, a
    bench's sampler) neither spoil it nor fail because of it.

    Raises:
        ValueError: the buffers are not on a CUDA device.
        RuntimeError: whatever the capture raises (an operation a graph cannot hold).
    """
    device = planes.device
    if device.type != "cuda":
        raise ValueError(f"CUDA graphs need a CUDA device, got {device}")
    with device_context(device):
        # PyTorch's recipe: warm up on a side stream, then capture; the capture
        # reads and writes only these buffers and the graph's own memory pool.
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP_PASSES):
                forward(planes, scalars)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # A capture stream of this device: torch.cuda.graph's own is made once per process, on whichever device
        # was current at the first capture.
        with torch.cuda.graph(graph, stream=torch.cuda.Stream(device), capture_error_mode="thread_local"):
            out = forward(planes, scalars)

    def replay() -> tuple:
        with device_context(device):  # a replay launches on the current device's stream
            graph.replay()
        return out

    return replay


__all__ = ["capture_graph"]
