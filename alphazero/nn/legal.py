"""Gathers each position's legal moves' logits out of its 4672: what the search reads, on the device or the host.

The same safe indices pick the legal moves' action values
(alphazero.nn.action_values.ActionValueHead.legal_values).

The search hands its legal moves as policy indices, ``legal_indices`` [B, W]
with ``legal_counts`` [B] (row b's first legal_counts[b] entries count).
The Evaluator (alphazero.nn.forward) gathers on the device before the copy
to the host (``gather_legal``), or on the host where the logits already lie
there (``gather_legal_numpy``, the CPU).

Example::

    legal, bad = gather_legal(out.policy_logits, indices_t, counts_t)     # [B, W], a bool flag
"""

from __future__ import annotations

import numpy as np
import torch

from alphazero.chess.moves import NUM_MOVES


def safe_legal_indices(legal_indices: torch.Tensor, legal_counts: torch.Tensor,
                       moves: int = NUM_MOVES) -> tuple[torch.Tensor, torch.Tensor]:
    """Gets the legal indices to gather with (int64 [B, W]) and the flag of a bad one (bool []).

    Columns at and beyond legal_counts[b] are padding: whatever they hold,
    they read index 0, so the search (which reads only the first
    legal_counts[b] columns) never sees them. An index outside [0, moves)
    among the real columns reads index 0 too and raises the flag, instead of
    faulting on the GPU; no synchronisation on any device.
    """
    width = legal_indices.shape[1]
    real = torch.arange(width, device=legal_indices.device) < legal_counts[:, None].to(torch.int64)
    valid = (legal_indices >= 0) & (legal_indices < moves)
    return torch.where(real & valid, legal_indices, 0).to(torch.int64), (real & ~valid).any()


def gather_legal(policy_logits: torch.Tensor, legal_indices: torch.Tensor,
                 legal_counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gathers each row's legal moves' logits: out[b, i] = policy_logits[b, legal_indices[b, i]] (padding
    and bad indices as safe_legal_indices says).

    Returns:
        (float32 [B, W] legal logits, bool [] flag of a bad index).
    """
    safe, bad = safe_legal_indices(legal_indices, legal_counts, policy_logits.shape[1])
    return policy_logits.gather(1, safe), bad


def safe_legal_indices_numpy(legal_indices: np.ndarray, legal_counts: np.ndarray, width: int,
                             moves: int = NUM_MOVES) -> np.ndarray | None:
    """safe_legal_indices on the host, for the first ``width`` columns: int [B, width], or None for a bad index."""
    real = np.arange(width) < legal_counts[:, None]
    safe = np.where(real, legal_indices[:, :width], 0)
    if safe.size and (safe.min() < 0 or safe.max() >= moves):
        return None
    return safe


def gather_legal_numpy(policy_logits: np.ndarray, legal_indices: np.ndarray, legal_counts: np.ndarray,
                       out: np.ndarray) -> bool:
    """gather_legal on the host: fills ``out`` [B, W]; returns the flag of a bad index (out is then unspecified)."""
    safe = safe_legal_indices_numpy(legal_indices, legal_counts, out.shape[1], policy_logits.shape[1])
    if safe is None:
        return True
    out[...] = np.take_along_axis(policy_logits, safe, axis=1)
    return False


__all__ = ["gather_legal", "gather_legal_numpy", "safe_legal_indices", "safe_legal_indices_numpy"]
