"""Which GPU a CUDA call runs on, and what that GPU computes natively.

torch runs an operation on its tensors' device, but a CUDA graph's capture
stream and its replay, an event's record and ``torch.cuda.synchronize()``
without a device use the *current* device's stream, and nothing in this
project sets the current device: left alone, all of them land on GPU 0 while
a model on cuda:1 computes there (a pass's outputs read before its copy to
the host finished, a graph captured on the wrong stream). So every pass runs
inside ``device_context(its model's device)``.

>>> import contextlib, torch
>>> isinstance(device_context(torch.device("cpu")), contextlib.nullcontext), device_context(torch.device("cuda:1")).idx
(True, 1)
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

NATIVE_BF16 = (8, 0)  # compute capability from which a GPU computes bf16 natively (Ampere on; T4, V100 lack it)
FLOAT16_TENSOR_CORES = (7, 0)  # and from which it has float16 tensor cores (Volta on)


def device_context(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """Gets what makes ``device`` the current CUDA device for a block: ``torch.cuda.device`` of its index on
    CUDA, a context that does nothing elsewhere."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def cuda_capability(device: torch.device) -> tuple[int, int]:
    """Gets the compute capability of a CUDA ``device`` (its index; without one the current device's).

    On ROCm every GPU torch runs computes bf16, which reads as NATIVE_BF16 here.
    """
    if torch.version.hip:
        return NATIVE_BF16
    major, minor = torch.cuda.get_device_capability(device)
    return int(major), int(minor)


def indexed(device: torch.device, model: torch.nn.Module) -> torch.device:
    """Gets ``device`` with its index where it has none: that of the model's weights, which went to the
    current device (so that a later change of the current device cannot move where a pass runs)."""
    if device.type != "cuda" or device.index is not None:
        return device
    weight = next(iter(model.parameters()), None)
    return weight.device if weight is not None else device


__all__ = ["FLOAT16_TENSOR_CORES", "NATIVE_BF16", "cuda_capability", "device_context", "indexed"]
