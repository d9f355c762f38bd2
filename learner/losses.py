"""The learner's losses and figures, as learner.trainer's docstring defines them (it re-exports these names).

Split out of learner.trainer (the step, the optimiser's use, what runs when):
the policy and value terms of each position, the value target (the game's
result mixed with the search's root value and the short-term value), the
validation sums, the auxiliary heads' losses, the anchor's pull, the
reply-policy head's cross-entropy and the moves-left head's Huber loss.

Example::

    stats = compute_losses(out, policy, legal, z, value_loss_weight=1.0)   # StepStats; stats.total has its graph
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F

from alphazero.nn.heads import MOVES_LEFT_UNIT, NetOutput
from alphazero.store.shards import DRAW_BAND
from learner.batch_device import ReplyTargets

__all__ = [
    "DRAW", "LOSS", "StepStats", "VALIDATION_FIGURES", "WIN", "anchor_loss", "auxiliary_losses", "compute_losses",
    "masked_log_softmax", "moves_left_loss", "policy_kl", "reply_policy_loss", "result_classes",
    "soft_policy_loss", "soft_policy_targets",
    "validation_sums", "value_classes", "value_target",
]

WIN, DRAW, LOSS = 0, 1, 2  # the classes of the wdl head's logits, in its order
MOVES_LEFT_DELTA = 10.0
"""Plies of error beyond which the moves-left loss grows linearly, not quadratically: lc0's Huber delta."""


@dataclass(frozen=True)
class StepStats:
    """Figures of one batch as 0-dim float32 tensors on the training device (read them with float())."""

    total: torch.Tensor  # policy + value_loss_weight * value (+ weighted auxiliary losses; no weight decay)
    policy: torch.Tensor  # cross-entropy of the targets and the legal-move softmax
    value: torch.Tensor  # squared error (scalar head) or win/draw/loss cross-entropy (wdl head)
    value_mse: torch.Tensor  # (z - v)^2 for either head, so runs with either compare
    entropy: torch.Tensor  # entropy of the network's policy over the legal moves
    value_accuracy: torch.Tensor  # share of predicted result classes equal to z's
    grad_norm: torch.Tensor  # global L2 norm of the gradient, before clipping
    soft_policy: torch.Tensor  # auxiliary soft-policy cross-entropy (0 when not trained)
    q: torch.Tensor  # auxiliary q head's squared error against the root value (0 when not trained)
    anchor: torch.Tensor  # KL from the start's policy plus the squared value difference (0 without an anchor)
    action_value: torch.Tensor  # the action-value head's loss over the moves with a target (0 without either)
    reply_policy: torch.Tensor  # the reply-policy head's cross-entropy over the rows with a target (0: not trained)
    moves_left: torch.Tensor  # the moves-left head's Huber loss over the rows with a target (0: not trained)

    def as_floats(self) -> dict[str, float]:
        """Gets every figure as a Python float (one device sync per figure)."""
        return {f.name: float(getattr(self, f.name)) for f in fields(self)}


def result_classes(z: torch.Tensor) -> torch.Tensor:
    """Maps results 1, 0, -1 to the classes WIN, DRAW, LOSS (int64)."""
    return (1 - torch.sign(z)).long()


def value_classes(value: torch.Tensor, wdl_logits: torch.Tensor | None) -> torch.Tensor:
    """Gets the predicted result class: the wdl head's most likely one, or the result nearest to a scalar v."""
    if wdl_logits is not None:
        return wdl_logits.argmax(dim=1)
    draws = torch.full_like(value, DRAW, dtype=torch.long)
    return torch.where(value > DRAW_BAND, WIN, torch.where(value < -DRAW_BAND, LOSS, draws))


def masked_log_softmax(logits: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """Gets log_softmax over the legal moves: -inf at illegal ones (every row needs a legal move)."""
    return logits.float().masked_fill(~legal, float("-inf")).log_softmax(dim=1)


def _legal_sum(values: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    # where, not a product: values hold -inf * 0 = NaN at illegal moves.
    return torch.where(legal, values, torch.zeros_like(values)).sum(dim=1)


def policy_kl(logits: torch.Tensor, policy: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """Gets the mean KL(pi || p) of targets pi and the legal-move softmax p of ``logits``."""
    log_p = masked_log_softmax(logits, legal)
    log_pi = torch.log(policy.clamp_min(1e-30))
    return _legal_sum(policy * (log_pi - log_p), legal & (policy > 0)).mean()


def _mixed_in(q: torch.Tensor | None, q_weight: float, short_term: torch.Tensor | None,
              short_term_weight: float) -> list[tuple[float, torch.Tensor]]:
    """Gets the (weight, value) pairs mixed into the game's result: those with a weight and a value."""
    return [(weight, value) for weight, value in ((q_weight, q), (short_term_weight, short_term))
            if value is not None and weight != 0.0]


def value_target(z: torch.Tensor, q: torch.Tensor | None, q_weight: float, short_term: torch.Tensor | None = None,
                 short_term_weight: float = 0.0) -> torch.Tensor:
    """Gets the value target (1 - w - s) z + w q + s v_h (v_h the short-term value, learner.game_targets); z alone
    when both weights are 0 or their values unknown."""
    parts = _mixed_in(q, q_weight, short_term, short_term_weight)
    if not parts:
        return z
    target = (1.0 - sum(weight for weight, _ in parts)) * z
    for weight, value in parts:
        target = target + weight * value
    return target


def _wdl_target(z: torch.Tensor, q: torch.Tensor | None, q_weight: float, short_term: torch.Tensor | None = None,
                short_term_weight: float = 0.0) -> torch.Tensor:
    """Gets the wdl head's target: z's class, or the soft target of the module docstring (float [B, 3])."""
    classes = result_classes(z)
    parts = _mixed_in(q, q_weight, short_term, short_term_weight)
    if not parts:
        return classes
    target = (1.0 - sum(weight for weight, _ in parts)) * F.one_hot(classes, 3).float()
    for weight, value in parts:
        value = value.clamp(-1.0, 1.0)
        soft = torch.stack([value.clamp_min(0.0), 1.0 - value.abs(), (-value).clamp_min(0.0)], dim=1)
        target = target + weight * soft
    return target


@dataclass(frozen=True)
class _PerSample:
    """The loss terms of each position of a batch (float32 [B] each)."""

    policy: torch.Tensor  # cross-entropy of the targets and the legal-move softmax
    value: torch.Tensor  # squared error or wdl cross-entropy against the value target
    value_mse: torch.Tensor  # (t - v)^2
    entropy: torch.Tensor
    correct: torch.Tensor  # 1 where the predicted result class is z's
    log_p: torch.Tensor  # [B, 4672] the legal-move log-softmax
    valued: torch.Tensor  # 1 where the position has a value target (the value terms are 0 elsewhere)


def _per_sample(out: NetOutput, policy: torch.Tensor, legal: torch.Tensor, z: torch.Tensor,
                q: torch.Tensor | None, q_weight: float, short_term: torch.Tensor | None = None,
                short_term_weight: float = 0.0) -> _PerSample:
    log_p = masked_log_softmax(out.policy_logits, legal)
    value = out.value.float()
    valued = torch.isfinite(z)
    z = torch.where(valued, z, torch.zeros_like(z))  # NaN: no value target; its terms are zeroed below
    q = torch.where(valued, q, torch.zeros_like(q)) if q is not None else None
    if short_term is not None:
        short_term = torch.where(valued, short_term, torch.zeros_like(short_term))
    target = value_target(z, q, q_weight, short_term, short_term_weight)
    value_mse = (target - value).square()
    if out.wdl_logits is not None:
        value_loss = F.cross_entropy(out.wdl_logits.float(), _wdl_target(z, q, q_weight, short_term, short_term_weight),
                                     reduction="none")
    else:
        value_loss = value_mse
    correct = (value_classes(value, out.wdl_logits) == result_classes(z)).float()
    weight = valued.float()
    return _PerSample(-_legal_sum(policy * log_p, legal), value_loss * weight, value_mse * weight,
                      -_legal_sum(log_p.exp() * log_p, legal), correct * weight, log_p, weight)


def compute_losses(out: NetOutput, policy: torch.Tensor, legal: torch.Tensor, z: torch.Tensor,
                   *, value_loss_weight: float, q: torch.Tensor | None = None, q_weight: float = 0.0,
                   short_term: torch.Tensor | None = None, short_term_weight: float = 0.0) -> StepStats:
    """Computes the loss and the logged figures of a batch (grad_norm left at 0).

    Args:
        out: the network's output for the batch.
        policy: float32 [B, 4672] target visit shares (zero off the legal moves).
        legal: bool [B, 4672], True at legal moves; every row has one.
        z: float32 [B] game results for the side to move.
        value_loss_weight: the value loss's weight beside the policy loss.
        q: float32 [B] the search's root values (None: unknown, z alone is the target).
        q_weight: the share of q in the value target (see learner.trainer's docstring).
        short_term: float32 [B] the short-term value targets (learner.game_targets; None: unknown).
        short_term_weight: their share in the value target.
    """
    terms = _per_sample(out, policy, legal, z, q, q_weight, short_term, short_term_weight)
    valued = terms.valued.sum().clamp_min(1.0)  # the value terms' means are over the positions with a target
    policy_loss, value_loss = terms.policy.mean(), terms.value.sum() / valued
    total = policy_loss + value_loss_weight * value_loss
    zero = torch.zeros((), device=total.device)
    return StepStats(total, policy_loss.detach(), value_loss.detach(), (terms.value_mse.sum() / valued).detach(),
                     terms.entropy.mean().detach(), terms.correct.sum() / valued, zero, zero, zero, zero, zero, zero,
                     zero)


VALIDATION_FIGURES = ("policy_loss", "policy_top1", "value_loss", "value_mse", "value_accuracy")


def validation_sums(out: NetOutput, policy: torch.Tensor, legal: torch.Tensor, z: torch.Tensor,
                    q: torch.Tensor | None = None, *, q_weight: float = 0.0, short_term: torch.Tensor | None = None,
                    short_term_weight: float = 0.0) -> torch.Tensor:
    """Sums VALIDATION_FIGURES over a batch, then the positions with a value target (float64 [6]; divide
    the policy's sums by the batch size, the value's by the last, for means).

    policy_top1 counts the positions whose most likely legal move under the
    network has the largest visit share (any of them, when several tie).
    """
    with torch.no_grad():
        terms = _per_sample(out, policy, legal, z, q, q_weight, short_term, short_term_weight)
        top = terms.log_p.argmax(dim=1, keepdim=True)  # -inf at illegal moves: never chosen
        agree = (policy.gather(1, top).squeeze(1) >= policy.max(dim=1).values).float()
        return torch.stack([terms.policy.sum(), agree.sum(), terms.value.sum(), terms.value_mse.sum(),
                            terms.correct.sum(), terms.valued.sum()]).double()


def soft_policy_targets(policy: torch.Tensor, legal: torch.Tensor, temperature: float) -> torch.Tensor:
    """Gets the soft policy targets pi^(1/T), renormalised over the legal moves (zero elsewhere)."""
    soft = torch.where(legal, policy.float().clamp_min(0.0).pow(1.0 / temperature), torch.zeros_like(policy))
    return soft / soft.sum(dim=1, keepdim=True).clamp_min(1e-30)  # a row without targets stays zero


def soft_policy_loss(logits: torch.Tensor, policy: torch.Tensor, legal: torch.Tensor,
                     temperature: float) -> torch.Tensor:
    """Gets the soft policy head's cross-entropy against soft_policy_targets, the batch's mean (KataGo's
    auxiliary soft policy target: the flattened target makes the body learn which moves the search found
    nearly as good, not only the best)."""
    log_p = masked_log_softmax(logits, legal)
    return -_legal_sum(soft_policy_targets(policy, legal, temperature) * log_p, legal).mean()


def auxiliary_losses(aux: Any, policy: torch.Tensor, legal: torch.Tensor, root_values: torch.Tensor | None,
                     *, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Computes the auxiliary heads' losses: (soft-policy cross-entropy, q squared error).

    Args:
        aux: the heads' outputs (alphazero.nn.chessformer.AuxOutput).
        policy, legal: as for compute_losses.
        root_values: float32 [B] the search's root values, NaN where a position has none (its q term is
            left out); None gives a q loss of 0.
        temperature: T of the soft targets pi^(1/T).
    """
    soft = soft_policy_loss(aux.soft_policy_logits, policy, legal, temperature)
    if root_values is None:
        return soft, torch.zeros((), device=soft.device)
    valued = torch.isfinite(root_values)
    error = torch.where(valued, aux.q.float() - root_values, torch.zeros_like(root_values)).square()
    return soft, error.sum() / valued.sum().clamp_min(1)


def anchor_loss(out: NetOutput, start: NetOutput, legal: torch.Tensor) -> torch.Tensor:
    """Gets the mean of KL(p_start || p) over the legal moves plus (v - v_start)^2: how far the net's
    outputs moved from the start network's on the batch (its gradient pulls them back)."""
    log_p = masked_log_softmax(out.policy_logits, legal)
    log_start = masked_log_softmax(start.policy_logits, legal)
    kl = _legal_sum(log_start.exp() * (log_start - log_p), legal)
    return (kl + (out.value.float() - start.value.float()).square()).mean()


def reply_policy_loss(logits: torch.Tensor, reply: ReplyTargets) -> torch.Tensor:
    """Gets the mean cross-entropy of the reply-policy head's softmax over the next position's legal moves
    against that position's visit shares, over the rows with a reply target (0-dim float32; 0 without any).

    A row without a target takes a softmax over every move (so that it stays
    finite) and counts 0: its term is masked out of the sum and the mean.
    """
    legal = reply.legal | ~reply.has[:, None]
    log_p = masked_log_softmax(logits, legal)
    per_row = -_legal_sum(reply.policy * log_p, legal)  # the policy is zero in a row without a target
    has = reply.has.float()
    return (per_row * has).sum() / has.sum().clamp_min(1.0)


def moves_left_loss(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Gets the mean Huber loss of the moves-left head's plies against the plies left, both over MOVES_LEFT_UNIT
    (20) with delta MOVES_LEFT_DELTA / 20 (10 plies), over the rows with a target (0-dim float32; 0 without any).

    lc0's loss, scaled as lc0 scales it: an error e plies costs (e / 20)^2 / 2
    up to 10 plies (0.125 there) and grows linearly beyond, 0.875 at 40
    plies, the size of the value loss: a game's length is only partly
    predictable from a position (whether a side resigns, or a long endgame is
    shuffled), so the large errors of long games must not pull as the squared
    error would, nor dwarf the policy and value terms. A row without a target
    (NaN: its game has no recorded end, learner.game_targets) counts 0.

    Args:
        predicted: float32 [B] the head's plies (>= 0).
        target: float32 [B] the plies left, NaN where there is none.
    """
    predicted = predicted.float()
    has = torch.isfinite(target)
    # Without a target the row's own prediction stands in: no error, no gradient, and no NaN in either.
    target = torch.where(has, target, predicted.detach())
    per_row = F.huber_loss(predicted / MOVES_LEFT_UNIT, target / MOVES_LEFT_UNIT, reduction="none",
                           delta=MOVES_LEFT_DELTA / MOVES_LEFT_UNIT)
    return per_row.sum() / has.sum().clamp_min(1)
