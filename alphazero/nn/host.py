"""The host side of the Evaluator's legal pass: its inputs checked and moved, its buffers, its pending result.

The search's batch arrives as numpy (alphazero.nn.forward.Evaluator.submit_legal);
what it reads goes back into preallocated host memory, pinned on CUDA so
that the copies are asynchronous, one set of buffers per lane: the legal
moves' logits [B, W], the values [B], a flag of a bad legal index and, when
asked, the legal moves' action values [B, W] (alphazero.nn.action_values).
A PendingOutput waits for the pass (one synchronisation on CUDA) and hands
numpy views of those buffers back.

Example::

    host = HostOutput(pin=False)
    logits, values, flag, action_values = host.tensors(rows, width, action_values=False)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

import numpy as np
import torch

from alphazero.chess.moves import NUM_MOVES
from alphazero.nn.planes import check_compact_numpy

__all__ = ["HostOutput", "LegalActionResult", "LegalResult", "PendingOutput", "check_legal", "ignore_stage",
           "legal_shape", "stage_events", "to_device"]

LegalResult = tuple[np.ndarray, np.ndarray]  # legal logits float32 [B, W], values float32 [B]
LegalActionResult = tuple[np.ndarray, np.ndarray, np.ndarray]  # and the legal moves' action values [B, W]
_Result = TypeVar("_Result", bound=tuple[np.ndarray, ...])


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """Moves a numpy array to ``device``; asynchronously when it lies in pinned memory (see compact_to_torch)."""
    if not array.flags.c_contiguous or not array.flags.writeable:
        array = np.array(array, order="C")  # torch.from_numpy needs writeable, contiguous memory
    tensor = torch.from_numpy(array)
    return tensor.to(device, non_blocking=device.type == "cuda" and tensor.is_pinned())


def check_legal(legal_indices: np.ndarray, legal_counts: np.ndarray, rows: int) -> None:
    """Checks the search's legal_indices int32 [>=rows, W] and legal_counts int32 [>=rows].

    Raises:
        ValueError: wrong types, dtypes or shapes, or counts beyond the indices' width.
    """
    if not isinstance(legal_indices, np.ndarray) or not isinstance(legal_counts, np.ndarray):
        raise ValueError("legal_indices and legal_counts must be numpy arrays")
    if legal_indices.dtype != np.int32 or legal_counts.dtype != np.int32:
        raise ValueError(f"legal_indices and legal_counts must be int32, got {legal_indices.dtype} "
                         f"and {legal_counts.dtype}")
    if legal_indices.ndim != 2 or legal_indices.shape[0] < rows or legal_counts.ndim != 1 \
            or legal_counts.shape[0] < rows:
        raise ValueError(f"legal_indices must be [>={rows}, W] and legal_counts [>={rows}], got "
                         f"{legal_indices.shape} and {legal_counts.shape}")
    counts = legal_counts[:rows]
    if rows and (counts.min() < 0 or counts.max() > legal_indices.shape[1]):
        raise ValueError(f"legal_counts must lie in [0, {legal_indices.shape[1]}] (the width of legal_indices), "
                         f"got {counts.min()}..{counts.max()}")


def legal_shape(planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                legal_counts: np.ndarray) -> tuple[int, int]:
    """Checks a legal pass's inputs; returns its rows and result width (the largest count, at least 1).

    Raises:
        ValueError: as check_compact_numpy and check_legal.
    """
    check_compact_numpy(planes, scalars)
    rows = planes.shape[0]
    check_legal(legal_indices, legal_counts, rows)
    return rows, max(int(legal_counts[:rows].max()), 1) if rows else 1


def ignore_stage(name: str) -> None:
    """A stage_done that does nothing (the CPU's passes)."""


def stage_events(events: tuple[Any, Any] | None) -> Callable[[str], None]:
    """Gets a stage_done that records a lane's CUDA events: the first once the inputs are queued (so the set-up
    on the host is not timed), the second after the copy to the host."""
    if events is None:
        return ignore_stage
    start, end = events

    def stage_done(name: str) -> None:
        if name == "input":
            start.record()
        elif name == "output":
            end.record()

    return stage_done


class HostOutput:
    """Preallocated host memory (pinned on CUDA) for one lane's legal logits, values, error flag and action
    values."""

    def __init__(self, pin: bool) -> None:
        self.pin = pin
        self.logits = torch.empty(0, dtype=torch.float32)
        self.values = torch.empty(0, dtype=torch.float32)
        self.action_values = torch.empty(0, dtype=torch.float32)
        self.flag = torch.zeros(1, dtype=torch.bool, pin_memory=pin)

    def _grown(self, buffer: torch.Tensor, size: int) -> torch.Tensor:
        """The buffer, or a new one of at least ``size`` (doubling) when it is smaller."""
        if buffer.numel() >= size:
            return buffer
        return torch.empty(max(size, 2 * buffer.numel()), dtype=torch.float32, pin_memory=self.pin)

    def tensors(self, rows: int, width: int, *, action_values: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Views (logits, values, flag, action values or None) for a batch of rows x width, growing the
        buffers when they are too small."""
        self.logits = self._grown(self.logits, rows * width)
        self.values = self._grown(self.values, rows)
        action: torch.Tensor | None = None
        if action_values:
            self.action_values = self._grown(self.action_values, rows * width)
            action = self.action_values[:rows * width].view(rows, width)
        return self.logits[:rows * width].view(rows, width), self.values[:rows], self.flag, action

    def numpy(self, rows: int, width: int, *, action_values: bool = False
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The same views as numpy arrays (the buffers are not grown: tensors() made them)."""
        logits = self.logits[:rows * width].view(rows, width).numpy()
        action = self.action_values[:rows * width].view(rows, width).numpy() if action_values else None
        return logits, self.values[:rows].numpy(), self.flag.numpy(), action


class PendingOutput(Generic[_Result]):
    """One batch's legal-move results on their way to the host (Evaluator.submit_legal).

    wait() returns (legal_logits float32 [B, W], values float32 [B]), plus the
    legal moves' action values float32 [B, W] when the pass was asked for
    them, as numpy views of the buffers of the batch's lane: they stay valid
    until the next batch of that lane is submitted. ``on_gpu_seconds`` gets
    the pass's GPU time when ``timed`` (the events bracket its work alone).
    """

    def __init__(self, host: HostOutput, rows: int, width: int, events: tuple[Any, Any] | None, *,
                 action_values: bool = False, timed: bool = False,
                 on_gpu_seconds: Callable[[float], None] | None = None) -> None:
        self._host = host
        self._rows = rows
        self._width = width
        self._events = events
        self._action_values = action_values
        self._timed = timed and on_gpu_seconds is not None
        self._on_gpu_seconds = on_gpu_seconds
        self._result: _Result | None = None

    def wait(self) -> _Result:
        """Waits for the batch (the pass's one synchronisation on CUDA, a blocking one) and returns its results.

        Raises:
            ValueError: a legal index outside [0, 4672) among a row's first legal_counts[b].
        """
        if self._result is None:
            if self._events is not None:
                start, end = self._events
                end.synchronize()
                if self._timed and self._on_gpu_seconds is not None:
                    self._on_gpu_seconds(start.elapsed_time(end) / 1000)
            logits, values, flag, action = self._host.numpy(self._rows, self._width,
                                                            action_values=self._action_values)
            if flag[0]:
                raise ValueError(f"legal move indices must lie in [0, {NUM_MOVES}), got one outside")
            self._result = cast(_Result, (logits, values) if action is None else (logits, values, action))
        return self._result
