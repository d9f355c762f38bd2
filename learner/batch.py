"""The training batch: B positions as numpy arrays, the dense policy built from a shard's sparse one.

The replay window (learner.replay) gathers them; the trainer (learner.trainer)
moves them to the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alphazero.chess.moves import NUM_MOVES

__all__ = ["Batch", "concatenate_batches"]


@dataclass(frozen=True)
class Batch:
    """One training batch of B positions, as numpy arrays."""

    planes: np.ndarray  # uint64 [B, 112] compact bitboards
    scalars: np.ndarray  # float32 [B, 7] raw scalars
    policy: np.ndarray  # float32 [B, 4672] visit shares (zero off the visited moves)
    legal: np.ndarray  # bool [B, 4672] True at the position's legal moves
    z: np.ndarray  # float32 [B] the value target for the side to move: a result 1, 0, -1 or a value; NaN: none
    q: np.ndarray | None = None  # float32 [B] the search's root value for the side to move (None: unknown)
    # float32 [B, 4672] the mover's win probability after each move (Stockfish labels' policy_wins), NaN where
    # there is none; None when no position of the batch has one (self-play's), as if all were NaN.
    action_values: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.z)


def _nan_values(rows: int) -> np.ndarray:
    return np.full((rows, NUM_MOVES), np.nan, np.float32)


def concatenate_batches(first: Batch, second: Batch) -> Batch:
    """Joins two batches, rows of ``first`` first (root values kept when both have them; action values when
    either has them, NaN for the other's rows)."""
    def joined(name: str) -> np.ndarray:
        return np.concatenate([getattr(first, name), getattr(second, name)])

    q = None if first.q is None or second.q is None else np.concatenate([first.q, second.q])
    action_values = None
    if first.action_values is not None or second.action_values is not None:
        action_values = np.concatenate([
            batch.action_values if batch.action_values is not None else _nan_values(len(batch))
            for batch in (first, second)])
    return Batch(joined("planes"), joined("scalars"), joined("policy"), joined("legal"), joined("z"), q,
                 action_values)
