"""Compares a fast forward pass with plain float32 eager on the same batch, as lc0's `check` backend does.

The fast pass (bf16 autocast, a CUDA graph, compiled code) was written
without a GPU at hand, so it proves itself where it runs: the Evaluator runs
some of its batches a second time through the model in float32, eagerly,
and compares what the search reads: each position's value, and the softmax
over its legal moves (the priors; raw logits may shift by a constant
without changing them). A value or probability ``fast`` agrees with the
eager ``ref`` when

    |fast - ref| <= atol + rtol * |ref|

(lc0's rule; NaN never agrees). Which batches are checked and what happens
on a mismatch is the Evaluator's (alphazero.nn.forward); the settings come from
the ``selfplay.parity_*`` config keys, and ``alphazero doctor`` uses the
same comparison.

Example::

    errors = compare_legal(fast_logits, fast_values, ref_logits, ref_values, counts, ParitySettings())
    if not errors.ok:
        print(errors.describe())
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alphazero.config import PARITY_MODES, SelfPlayConfig


@dataclass(frozen=True)
class ParitySettings:
    """When the Evaluator checks its fast pass, and how close it must be (the selfplay.parity_* keys)."""

    mode: str = "auto"  # 'auto': first pass per bucket, first after a weight update, `share` of the rest
    share: float = 0.01
    atol: float = 0.1
    rtol: float = 0.1

    @classmethod
    def from_config(cls, selfplay: SelfPlayConfig) -> ParitySettings:
        """Gets the settings of a self-play config's parity_check, parity_share, parity_atol and parity_rtol."""
        return cls(selfplay.parity_check, selfplay.parity_share, selfplay.parity_atol, selfplay.parity_rtol)


@dataclass(frozen=True)
class ParityErrors:
    """The largest differences between a fast pass and float32 eager on one batch."""

    value: float  # largest |fast - eager| of a value (NaN: a NaN on either side)
    policy: float  # largest |fast - eager| of a legal move's probability
    ok: bool  # every value and probability within atol + rtol * |eager|
    action_value: float | None = None  # largest |fast - eager| of a legal move's action value (None: not compared)

    def describe(self) -> str:
        """Gets 'largest value error 0.012, largest legal-move probability error 0.004'."""
        action = "" if self.action_value is None else f", largest action-value error {self.action_value:.3g}"
        return (f"largest value error {self.value:.3g}, largest legal-move probability error {self.policy:.3g}"
                f"{action}")


def legal_softmax(legal_logits: np.ndarray, legal_counts: np.ndarray) -> np.ndarray:
    """Gets each row's softmax over its first legal_counts[b] logits (float64 [B, W]; 0 beyond the count).

    A row with no legal move is all zeros.
    """
    width = legal_logits.shape[1]
    real = np.arange(width) < legal_counts[:, None]
    logits = np.where(real, legal_logits.astype(np.float64), -np.inf)
    # Subtracting the row's largest logit keeps exp() finite; a row of no moves has -inf there, so use 0.
    top = np.max(logits, axis=1, keepdims=True, initial=-np.inf)
    weights = np.where(real, np.exp(logits - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = weights.sum(axis=1, keepdims=True)
    return np.divide(weights, total, out=np.zeros_like(weights), where=total != 0)


def _worst(fast: np.ndarray, ref: np.ndarray, settings: ParitySettings) -> tuple[float, bool]:
    """Gets the largest |fast - ref| (NaN when any is NaN) and whether all lie within tolerance."""
    error = np.abs(fast.astype(np.float64) - ref.astype(np.float64))
    if error.size == 0:
        return 0.0, True
    within = error <= settings.atol + settings.rtol * np.abs(ref)  # False wherever a NaN is
    return float(np.nan if np.isnan(error).any() else error.max()), bool(within.all())


def compare_legal(fast_logits: np.ndarray, fast_values: np.ndarray, ref_logits: np.ndarray, ref_values: np.ndarray,
                  legal_counts: np.ndarray, settings: ParitySettings, *, fast_action_values: np.ndarray | None = None,
                  ref_action_values: np.ndarray | None = None) -> ParityErrors:
    """Compares one batch's fast legal logits [B, W] and values [B] with float32 eager's, and the legal
    moves' action values [B, W] when both are given.

    Only each row's first legal_counts[b] logits count; they are compared as
    probabilities (the softmax over the row's legal moves); the action values
    (probabilities already) of those columns as they are.
    """
    counts = legal_counts[:len(fast_values)]
    value, values_ok = _worst(fast_values, ref_values, settings)
    policy, policy_ok = _worst(legal_softmax(fast_logits, counts), legal_softmax(ref_logits, counts), settings)
    if fast_action_values is None or ref_action_values is None:
        return ParityErrors(value, policy, values_ok and policy_ok)
    real = np.arange(fast_action_values.shape[1]) < counts[:, None]
    action, action_ok = _worst(fast_action_values[real], ref_action_values[real], settings)
    return ParityErrors(value, policy, values_ok and policy_ok and action_ok, action)


__all__ = ["PARITY_MODES", "ParityErrors", "ParitySettings", "compare_legal", "legal_softmax"]
