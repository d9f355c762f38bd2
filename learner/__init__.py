"""The learner: replay window over self-play shards, training loop, checkpoints, TensorBoard.

Modules, by concern:

- ``learner.replay``: ReplayWindow (the newest positions of run/selfplay, the
  reuse cap) and Batch.
- ``learner.trainer``: the loss, the optimiser and Trainer.step.
- ``learner.loop``: Learner and run_learner (resume, wait, train, log,
  checkpoint, publish).
- ``learner.cli``: `alphazero learn`.

The names below are re-exported lazily, so that importing ``learner.cli`` to
build the command line does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Batch": "learner.replay",
    "ReplayWindow": "learner.replay",
    "Trainer": "learner.trainer",
    "compute_losses": "learner.trainer",
    "Learner": "learner.loop",
    "run_learner": "learner.loop",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'learner' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
