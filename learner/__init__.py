"""The learner: replay window over self-play shards, training loop, checkpoints, TensorBoard; pretraining.

Modules, by concern:

- ``learner.replay``: ReplayWindow (the newest positions of run/selfplay, the
  reuse cap); its storage in ``learner.replay_store``, the Batch it samples in
  ``learner.batch``.
- ``learner.batch_device``: a batch staged on the host (pinned on CUDA) and
  its dense targets scattered on the device; ``learner.dense_batches`` the
  dense host path it replaced (the baseline `bench learner` times).
- ``learner.trainer``: the loss, the optimiser and Trainer.step.
- ``learner.loop``: Learner and run_learner (resume, wait, train, log,
  checkpoint, publish); its batches made on a thread by ``learner.feed``
  (over ``learner.prefetch``); beside it ``learner.probes`` (fixed positions whose
  outputs are logged), ``learner.reporting`` (running figures, TensorBoard
  names, the progress line), ``learner.interrupts`` (Ctrl-C and SIGTERM).
- Supervised pretraining: ``learner.pgn_data`` (games to shards),
  ``learner.labels`` (Stockfish labels: chunks, workers, resuming; its parts
  in ``label_settings``, ``label_targets``, ``labeller``, ``label_games``,
  ``position_files``), ``learner.pretrain`` (training on them),
  ``learner.recipe`` and ``learner.recipe_run`` (a network's whole recipe as
  one file and one command).
- ``learner.cli``: `alphazero learn` and `alphazero pretrain`.

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
