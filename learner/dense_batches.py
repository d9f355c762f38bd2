"""The learner's batch path before issue 69, kept as the baseline that `alphazero bench learner` times.

Until then the replay window built each batch's dense float32 [B, 4672] visit
shares, bool legal mask and (for Stockfish's labels) float32 [B, 4672] win
probabilities on the host, the trainer copied them to the device from
pageable memory, and the action-value targets were picked out of the dense
array with np.nonzero; the batch was sampled on the training thread. The
learner now keeps the moves sparse and scatters the targets on the device,
on batches made by a prefetch thread (learner.batch_device, learner.feed);
``dense_inputs`` does what the old path did from a sparse batch, so that both
can be timed side by side in one process (EXPERIMENTS.md, "The
learner's targets sparse on the device, a prefetch thread").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from alphazero.chess.moves import NUM_MOVES
from alphazero.nn.action_values import action_value_targets
from alphazero.nn.planes import compact_to_torch
from learner.batch import Batch
from learner.batch_device import ActionValueTargets, DeviceBatch, ReplyTargets

__all__ = ["dense_inputs"]


def dense_inputs(batch: Batch, device: torch.device) -> DeviceBatch:
    """Builds the batch's dense targets on the host and copies them to ``device`` from pageable memory, as the
    learner did before issue 69."""
    size = len(batch)
    rows, moves = batch.rows, batch.moves.astype(np.int64)
    policy, legal = _dense_policy(size, rows, moves, batch.shares)
    values = None
    if batch.wins is not None:
        values = np.full((size, NUM_MOVES), np.nan, np.float32)
        values[rows, moves] = batch.wins

    def moved(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(device)

    planes, scalars = compact_to_torch(batch.planes, batch.scalars, device)
    targets = None if values is None else ActionValueTargets(*map(moved, action_value_targets(values)))
    q = None if batch.q is None else moved(np.asarray(batch.q, np.float32))
    return DeviceBatch(planes, scalars, moved(policy), moved(legal), moved(np.asarray(batch.z, np.float32)), q,
                       targets, _dense_reply(batch, moved),
                       *(None if column is None else moved(np.asarray(column, np.float32))
                         for column in (batch.short_term, batch.moves_left)))


def _dense_policy(size: int, rows: np.ndarray, moves: np.ndarray,
                  shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gets the dense visit shares float32 [size, 4672] and legal mask bool [size, 4672] of sparse moves."""
    policy = np.zeros((size, NUM_MOVES), np.float32)
    legal = np.zeros((size, NUM_MOVES), np.bool_)
    policy[rows, moves] = shares
    legal[rows, moves] = True
    return policy, legal


def _dense_reply(batch: Batch, moved: Callable[[np.ndarray], torch.Tensor]) -> ReplyTargets | None:
    """The reply targets (which came after issue 69) built dense on the host the same old way, so that a preset
    that trains them times both paths with them."""
    if batch.reply_offsets is None or batch.reply_moves is None or batch.reply_shares is None:
        return None
    policy, legal = _dense_policy(len(batch), batch.reply_rows, batch.reply_moves.astype(np.int64), batch.reply_shares)
    return ReplyTargets(moved(policy), moved(legal), moved(np.diff(batch.reply_offsets) > 0))
