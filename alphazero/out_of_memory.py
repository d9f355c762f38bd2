"""Out of memory, said as a user can act on it: what ran out, and which settings of the command to lower.

What a failed allocation raises: torch.OutOfMemoryError on CUDA ("CUDA out
of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of ..."),
and on a CPU MemoryError (Python, numpy, the search's trees) or
torch.OutOfMemoryError ("DefaultCPUAllocator: not enough memory ..."); Ray's
memory monitor, when it kills a worker, ray.exceptions.OutOfMemoryError. A
remote task's error reaches the driver as a RayTaskError that is also an
instance of its cause's class. They are recognised here by class name, so that
the command line can say it without importing torch or Ray (`alphazero
perft` loads neither).

>>> print(out_of_memory_message(MemoryError(), "learn"))
out of memory: the machine's memory ran out; lower learner.batch_size or learner.window_positions (--set ...)
"""

from __future__ import annotations

import re
import sys

OUT_OF_MEMORY_STATUS = 1
"""The exit status of a command that ran out of memory: an uncaught error's, which it was before it was said."""

_OOM_CLASS = "OutOfMemoryError"  # torch.OutOfMemoryError (= torch.cuda.OutOfMemoryError), ray.exceptions'
_GPU_WORDS = ("CUDA out of memory", "HIP out of memory", "CUBLAS_STATUS_ALLOC_FAILED")
_GPU_INDEX = re.compile(r"\bGPU (\d+)\b")
_ALLOCATION = re.compile(r"[Tt]ried to allocate ([\d.,]+ ?(?:[KMGT]i?B|bytes))")

_CONFIG = "(--set KEY=VALUE)"
_SETTINGS: dict[str, tuple[str, str]] = {
    # command: (what to lower when a GPU ran out, when the machine's memory did)
    "train": ("learner.batch_size or selfplay.gpu_games_per_actor (0 means selfplay.games_per_actor) " + _CONFIG,
              "learner.batch_size, learner.window_positions, selfplay.games_per_actor or selfplay.actors "
              + _CONFIG),
    "learn": ("learner.batch_size " + _CONFIG, "learner.batch_size or learner.window_positions " + _CONFIG),
    "pretrain": ("learner.batch_size " + _CONFIG, "learner.batch_size " + _CONFIG),
    "selfplay": ("selfplay.gpu_games_per_actor (0 means selfplay.games_per_actor) or selfplay.server_batch_size "
                 + _CONFIG, "selfplay.games_per_actor or selfplay.actors " + _CONFIG),
    "uci": ("the engine's LeavesPerBatch option (the positions of one network pass)",
            "the engine's Hash option (0: half the machine's memory) or Nodes"),
    "match": ("--concurrency (games at once)", "--simulations (a player's search:N) or --concurrency"),
    "eval": ("--concurrency (games at once)", "--simulations or --concurrency"),
    "puzzles": ("--concurrency (items at once)", "--nodes or --concurrency"),
    "epd": ("--concurrency (items at once)", "--nodes or --concurrency"),
}
_ANY = ("the command's batch sizes", "the command's sizes, or free memory that other processes hold")


def is_out_of_memory(error: BaseException) -> bool:
    """Checks whether ``error`` is a failed allocation (MemoryError, torch's or Ray's OutOfMemoryError).

    >>> is_out_of_memory(MemoryError()), is_out_of_memory(RuntimeError("out of luck"))
    (True, False)
    """
    return isinstance(error, MemoryError) or any(cls.__name__ == _OOM_CLASS for cls in type(error).__mro__)


def out_of_memory_in(error: BaseException) -> BaseException | None:
    """Gets the failed allocation that ``error`` is, or was raised from or while handling (a one-line error that
    wraps it, as a remote actor's failure may be), or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if is_out_of_memory(current):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def on_gpu(error: BaseException) -> bool:
    """Checks whether the allocation that failed was a GPU's (torch says 'CUDA out of memory')."""
    text = str(error)
    return any(words in text for words in _GPU_WORDS)


def what_ran_out(error: BaseException) -> str:
    """Names what ran out: 'GPU 0 (NVIDIA H200)' (the GPU the error names, as the process that raised it numbers
    them), 'a GPU', or "the machine's memory".

    >>> what_ran_out(MemoryError("the search ran out of memory"))
    "the machine's memory"
    """
    if not on_gpu(error):
        return "the machine's memory"
    found = _GPU_INDEX.search(str(error))
    if found is None:
        return "a GPU"
    name = _gpu_name(int(found.group(1))) if not _remote(error) else None
    return f"GPU {found.group(1)}" + (f" ({name})" if name else "")


def _remote(error: BaseException) -> bool:
    """Whether ``error`` came from a Ray worker, whose GPU numbers are its own (each sees its GPU as 0)."""
    return any(cls.__name__ == "RayTaskError" for cls in type(error).__mro__)


def _gpu_name(index: int) -> str | None:
    """The name of this process's GPU ``index``, where torch has CUDA running already (nothing is started)."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized() or index >= torch.cuda.device_count():
            return None
        return str(torch.cuda.get_device_name(index))
    except Exception:  # a broken driver after the failure: the index alone says enough
        return None


def settings_to_lower(command: str, *, gpu: bool) -> str:
    """Says which settings of ``command`` to lower when a GPU (``gpu``) or the machine's memory ran out.

    >>> settings_to_lower("uci", gpu=False)
    "the engine's Hash option (0: half the machine's memory) or Nodes"
    """
    on_the_gpu, on_the_machine = _SETTINGS.get(command, _ANY)
    return on_the_gpu if gpu else on_the_machine


def out_of_memory_message(error: BaseException, command: str) -> str:
    """Gets the one-line message of a failed allocation in ``command`` (a subcommand's name): what ran out, the
    allocation that failed where the error says it, and what to lower."""
    tried = _ALLOCATION.search(str(error))
    allocation = f" (allocating {tried.group(1)})" if tried is not None else ""
    return (f"out of memory: {what_ran_out(error)} ran out{allocation}; lower "
            f"{settings_to_lower(command, gpu=on_gpu(error))}")


__all__ = ["OUT_OF_MEMORY_STATUS", "is_out_of_memory", "on_gpu", "out_of_memory_in", "out_of_memory_message",
           "settings_to_lower", "what_ran_out"]
