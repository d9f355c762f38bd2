"""torch.compile per bucket, the ``compile`` forward mode (alphazero.nn.buckets), on a GPU or a CPU.

Each bucket's fixed shape is compiled once, when the bucket is made: on a
GPU with ``mode="reduce-overhead"`` (Inductor's kernels replayed from CUDA
graphs), on a CPU as C++ kernels without graphs. Compilation and calls run
with the buffers' GPU current (alphazero.nn.cuda_device), as a capture does.

Example::

    make = compile_per_bucket(model, cuda_graphs=device.type == "cuda")     # a RunnerMaker
    forward = BucketedForward(model, device, mode="compile", make=make, max_batch=512)
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator

import torch

from alphazero.nn.buckets import Runner, RunnerMaker
from alphazero.nn.cuda_device import device_context

COMPILE_PASSES = 3  # calls when a bucket is compiled: reduce-overhead warms up, then records its graph
RECOMPILE_LIMIT = 64  # shapes Dynamo may compile per function (its default, 8, is below the bucket count)


@contextlib.contextmanager
def _compile_settings() -> Iterator[None]:
    """Raises Dynamo's recompile limit (a dozen buckets), compiles with this process's torch threads, quietly.

    An actor runs torch on one thread (one actor per core); Inductor's own
    default is a compile worker per core, in every actor at once.
    """
    import torch._inductor.config as inductor_config

    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT), \
            inductor_config.patch(compile_threads=max(1, torch.get_num_threads())), warnings.catch_warnings():
        # Inductor suggests TF32 for the float32 matrix products: those are the heads' last layers, kept in
        # float32 on purpose (priors and values not rounded), and every actor would print the advice
        # (EXPERIMENTS.md, "The GPU path on a GPU").
        warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")
        yield


def compile_per_bucket(model: torch.nn.Module, *, backend: str | Callable[..., object] = "inductor",
                       cuda_graphs: bool = True) -> RunnerMaker:
    """Gets a RunnerMaker that compiles ``model`` for each bucket's fixed shape, when the bucket is made.

    Inductor compiles with ``mode="reduce-overhead"`` (its kernels replayed
    from CUDA graphs) unless ``cuda_graphs`` is False (the CPU: C++ kernels,
    no graphs); another ``backend`` (tests) compiles without a mode.
    The maker calls the compiled model COMPILE_PASSES times, so a failure of
    the compilation or of its graph recording raises there, not mid-run.
    The caller makes the input expansion's constants first
    (planes.make_device_constants): made inside the first trace, they cost a
    second compilation.
    """
    mode = "reduce-overhead" if backend == "inductor" and cuda_graphs else None
    compiled = torch.compile(model, dynamic=False, backend=backend, mode=mode)

    def make(planes: torch.Tensor, scalars: torch.Tensor) -> Runner:
        device = planes.device
        with _compile_settings(), device_context(device):
            for _ in range(COMPILE_PASSES):
                compiled(planes, scalars)

        def run() -> tuple:
            with _compile_settings(), device_context(device):
                return compiled(planes, scalars)

        return run

    return make


__all__ = ["compile_per_bucket"]
