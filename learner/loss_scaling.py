"""float16 training's loss scaling (torch.amp.GradScaler), on CUDA devices without native bf16.

On a GPU of compute capability 7.x (the V100, the T4: float16 tensor cores,
no native bf16) ``auto`` trains in float16 autocast
(alphazero.nn.precision.cuda_choice), as torch's AMP recipe and the lc0 and
KataGo trainers do there. float16's smallest normal number is about 6e-5, so
small gradients would flush to zero: the loss is multiplied by a scale
before backward, and the gradients are divided by it (``unscale_``) before
they are measured, clipped or applied. The scale halves after a step whose
gradients overflowed (inf or NaN: GradScaler does not take that step) and
doubles after 2,000 good ones. bf16 has float32's range and needs none of it.

- **A skipped step is run again** on the same batch at the halved scale
  (learner.trainer.Trainer.step), so the learner's step counter, its
  learning-rate schedule and the batch's reuse count only steps that updated
  the weights. A batch-norm layer's running statistics see the batch once
  per try. A loss that is itself not finite is not retried (no scale fixes
  it): nothing is updated and the learner's finite check stops the run.
  After MAX_SKIPS overflows in a row the learner stops with a UserError.
- **The scale is saved with the optimiser**: ``attach`` hooks the scaler's
  state into the optimiser's state_dict (under SCALER_KEY) and back out of
  it on load_state_dict, so every checkpoint that keeps the optimiser keeps
  the scale and every resume restores it. A checkpoint without it (older, or
  trained in bf16 or float32) starts from GradScaler's default scale, which
  finds its level again in a few skipped steps; a float16 run resumed in
  another precision drops it.

Example::

    scaler = new_scaler(trainer.precision_choice, device)   # None unless float16
    attach(optimizer, lambda: scaler)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from alphazero.nn.precision import PrecisionChoice

SCALER_KEY = "grad_scaler"  # the optimiser state_dict's entry holding the scaler's state
MAX_SKIPS = 24  # overflowed tries of one step before the learner gives up: the default scale 2^16 halved to 2^-8


class Scaler(Protocol):
    """What the trainer asks of torch.amp.GradScaler (tests give a stand-in)."""

    def scale(self, outputs: torch.Tensor) -> torch.Tensor: ...

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None: ...

    def step(self, optimizer: torch.optim.Optimizer) -> Any: ...

    def update(self) -> None: ...

    def get_scale(self) -> float: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def new_scaler(choice: PrecisionChoice, device: torch.device) -> Scaler | None:
    """Gets a loss scaler for training in ``choice`` on ``device``: a GradScaler for float16, else None."""
    if choice.name != "float16":
        return None
    return torch.amp.GradScaler(device.type)


def attach(optimizer: torch.optim.Optimizer, scaler_of: Callable[[], Scaler | None]) -> None:
    """Makes ``optimizer``'s state_dict carry the state of the scaler ``scaler_of()`` gives at the time, and its
    load_state_dict restore it (see the module docstring); the entry is dropped where there is no scaler."""

    def save(_optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
        scaler = scaler_of()
        if scaler is not None:
            state[SCALER_KEY] = scaler.state_dict()
        return state

    def load(_optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
        saved = state.pop(SCALER_KEY, None)  # (load_state_dict hands the hook its own shallow copy)
        scaler = scaler_of()
        if scaler is not None and saved:
            scaler.load_state_dict(saved)
        return state

    optimizer.register_state_dict_post_hook(save)
    optimizer.register_load_state_dict_pre_hook(load)


def overflow_message(step: int, scale: float) -> str:
    """Says that float16 gradients kept overflowing at training step ``step``, and what to do."""
    return (f"float16 training: the gradients of step {step:,} overflowed {MAX_SKIPS + 1} times in a row (loss "
            f"scale now {scale:g}); train in float32 (--set learner.cuda_precision=float32) or in bf16 on a GPU "
            f"of compute capability 8.0 or more")


__all__ = ["MAX_SKIPS", "SCALER_KEY", "Scaler", "attach", "new_scaler", "overflow_message"]
