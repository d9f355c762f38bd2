"""The AlphaZero loss and one optimisation step of the network.

Loss of one position, with p the network's policy and v its value::

    l = value_loss_weight * (z - v)^2  -  sum over legal moves a of pi(a) * log p(a)

averaged over the batch, plus c * ||theta||^2 (c = learner.weight_decay):

- **Policy**: p is a softmax over the position's LEGAL moves only: the other
  logits are set to -inf before log_softmax (the sample's policy indices list
  every legal move). The loss is the cross-entropy against the search's visit
  shares pi (so it includes pi's own entropy; ``policy_kl`` gives the KL).
  Products with the -inf of illegal moves are masked out with ``where``,
  never multiplied (0 * -inf is NaN).
- **Value**: a 'scalar' head uses the squared error (t - v)^2 (0..4); a
  'wdl' head uses the cross-entropy of its win/draw/loss logits against the
  class of z (z = 1 win, 0 draw, -1 loss). The target t is the game result z,
  or with ``value_target_q_weight`` w > 0 (Leela's q-ratio) t = (1 - w) z + w q,
  q the search's root value of the position; a 'wdl' head then takes the soft
  target (1 - w) onehot(z) + w (max(q, 0), 1 - |q|, max(-q, 0)), whose mean
  value is t. A position whose z is NaN has no value target (a shard marked
  alphazero.store.shards.VALUE_NONE, such as labels made with
  ``pretrain.label_value = false``): it trains the policy alone, and the
  value figures are means over the positions that have one.
- **Weight decay**: the optimiser's L2 weight decay, set to 2c, the gradient
  of c * ||theta||^2, so the objective is AlphaZero's exactly (every parameter,
  batch-norm scales and biases included, as in the paper). The term is left out
  of ``total``; ``weight_decay_term`` computes it for logging.
- **Value accuracy**: the share of positions whose predicted result class
  matches z's (the game result, whatever the target). A 'scalar' head
  predicts the result nearest to v (win for v > 1/3, loss for v < -1/3, else
  draw); a 'wdl' head predicts its most likely class.
- **Validation** (``validation_sums``, ``Trainer.validate``): the same
  figures on held-out positions in eval mode, plus the policy's top-1
  agreement: the share of positions whose most likely legal move under the
  network is one of the search's most visited.

Optimiser, precision and what learns (``learner.trainable``: all, the policy head or the
action-value head alone): learner.trainer_setup, whose names this module
re-exports; ``learner.learning_rate(step)`` (warm-up included) is set before
each step. A step whose loss reaches no trainable parameter (the action-value
head alone, on a batch without Stockfish's per-move values) updates nothing.
The model trains in channels_last (on a CPU in float32 too, where it trains faster:
EXPERIMENTS.md, "Issue 49: a stronger built-in network, the data"). The
precision is the device's setting (``learner.precision_for``:
cuda_precision on a GPU, cpu_precision on a CPU; ``training_precision``):
on CUDA 'auto' autocasts the forward pass to bf16 from compute capability
8.0, to float16 from 7.0 with loss scaling (learner.loss_scaling: a step
whose gradients overflowed is tried again at a lower scale), float32 below;
the losses are computed in float32. The gradient norm (unscaled) is
measured every step and clipped only when ``clip_grad_norm`` is given.

**Anchor** (``start_anchor_weight`` w > 0, for a run that starts from trained
weights): w x (KL(p_start || p) over the legal moves + (v - v_start)^2), the
start network's outputs on the same batch (a frozen copy, normalising as
the model does; the learner loads it from the run's step-0 checkpoint): a trust region around
the start, so self-play's targets move the net only as far as they pull
harder than its knowledge (``loss/anchor``).

**Action values** (``network.action_value_head``; alphazero.nn.action_values
has the losses): the mean over the moves with a win probability (Batch.wins:
Stockfish's, or self-play's search values where its network has the head; NaN
elsewhere), weighted by
``action_value_loss_weight`` (``loss/action_value``, 0 without targets),
plus ``action_value_rank_weight`` x a listwise loss on each position's
ranking of those moves (in the total alone). They are picked on the host
(learner.batch_device): NaN never reaches the device, no other move is scored.
Validation adds ``action_value_loss`` and ``action_value_mae`` (|predicted -
Stockfish's| win probability, comparable across the two forms).

Auxiliary targets, added to the loss with their weights (a Chessformer's
second policy and value heads, see alphazero.nn.chessformer; with both weights
0 those heads are neither run nor trained):

- **Soft policy** (``soft_policy_loss_weight``): cross-entropy of the soft
  head's legal-move softmax against pi^(1/T) renormalised over the legal
  moves (T = ``soft_policy_temperature``, 4 as in KataGo and the Chessformer
  paper): the flattened target makes the body learn which moves the search
  found nearly as good, not only the best.
- **q** (``q_loss_weight``): squared error of the q head against the
  search's root value of the position (shards store it per sample): a less
  noisy value signal than the game's result, which the value head keeps.

Example::

    trainer = Trainer(build_network(config.network), config.learner, torch.device("cpu"))
    stats = trainer.step(batch, step=0)      # StepStats of 0-dim tensors; float(stats.total)
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from alphazero.config import LearnerConfig
from alphazero.errors import UserError
from alphazero.nn.action_values import (
    action_features,
    action_value_head,
    action_value_loss,
    action_value_rank_loss,
    action_value_sums,
    features_only,
)
from alphazero.nn.network import NetOutput, model_config
from alphazero.store.shards import DRAW_BAND
from learner.batch import Batch
from learner.batch_device import DeviceBatch, StagedBatch, on_device, pins, stage
from learner.loss_scaling import MAX_SKIPS, attach, new_scaler, overflow_message
from learner.trainer_setup import (
    build_optimizer,
    check_trainable,
    eval_mode,
    set_trainable,
    time_training_step,
    training_mode,
    training_precision,
    weight_decay_term,
)

__all__ = [
    "AnyBatch", "StepStats", "Trainer", "VALIDATION_FIGURES", "anchor_loss", "auxiliary_losses", "build_optimizer",
    "compute_losses", "eval_mode", "masked_log_softmax", "policy_kl", "result_classes", "soft_policy_targets",
    "time_training_step", "training_mode", "training_precision", "validation_sums", "value_classes",
    "value_target", "weight_decay_term",
]

log = logging.getLogger(__name__)

AnyBatch = Batch | StagedBatch | DeviceBatch  # a batch of numpy arrays, staged on the host, or on the device

WIN, DRAW, LOSS = 0, 1, 2  # the classes of the wdl head's logits, in its order


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


def value_target(z: torch.Tensor, q: torch.Tensor | None, q_weight: float) -> torch.Tensor:
    """Gets the value target (1 - w) z + w q; z alone when w is 0 or q is unknown."""
    if q is None or q_weight == 0.0:
        return z
    return (1.0 - q_weight) * z + q_weight * q


def _wdl_target(z: torch.Tensor, q: torch.Tensor | None, q_weight: float) -> torch.Tensor:
    """Gets the wdl head's target: z's class, or the soft target of the module docstring (float [B, 3])."""
    classes = result_classes(z)
    if q is None or q_weight == 0.0:
        return classes
    q = q.clamp(-1.0, 1.0)
    soft = torch.stack([q.clamp_min(0.0), 1.0 - q.abs(), (-q).clamp_min(0.0)], dim=1)
    return (1.0 - q_weight) * F.one_hot(classes, 3).float() + q_weight * soft


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
                q: torch.Tensor | None, q_weight: float) -> _PerSample:
    log_p = masked_log_softmax(out.policy_logits, legal)
    value = out.value.float()
    valued = torch.isfinite(z)
    z = torch.where(valued, z, torch.zeros_like(z))  # NaN: no value target; its terms are zeroed below
    q = torch.where(valued, q, torch.zeros_like(q)) if q is not None else None
    target = value_target(z, q, q_weight)
    value_mse = (target - value).square()
    if out.wdl_logits is not None:
        value_loss = F.cross_entropy(out.wdl_logits.float(), _wdl_target(z, q, q_weight), reduction="none")
    else:
        value_loss = value_mse
    correct = (value_classes(value, out.wdl_logits) == result_classes(z)).float()
    weight = valued.float()
    return _PerSample(-_legal_sum(policy * log_p, legal), value_loss * weight, value_mse * weight,
                      -_legal_sum(log_p.exp() * log_p, legal), correct * weight, log_p, weight)


def compute_losses(out: NetOutput, policy: torch.Tensor, legal: torch.Tensor, z: torch.Tensor,
                   *, value_loss_weight: float, q: torch.Tensor | None = None, q_weight: float = 0.0) -> StepStats:
    """Computes the loss and the logged figures of a batch (grad_norm left at 0).

    Args:
        out: the network's output for the batch.
        policy: float32 [B, 4672] target visit shares (zero off the legal moves).
        legal: bool [B, 4672], True at legal moves; every row has one.
        z: float32 [B] game results for the side to move.
        value_loss_weight: the value loss's weight beside the policy loss.
        q: float32 [B] the search's root values (None: unknown, z alone is the target).
        q_weight: the share of q in the value target (see the module docstring).
    """
    terms = _per_sample(out, policy, legal, z, q, q_weight)
    valued = terms.valued.sum().clamp_min(1.0)  # the value terms' means are over the positions with a target
    policy_loss, value_loss = terms.policy.mean(), terms.value.sum() / valued
    total = policy_loss + value_loss_weight * value_loss
    zero = torch.zeros((), device=total.device)
    return StepStats(total, policy_loss.detach(), value_loss.detach(), (terms.value_mse.sum() / valued).detach(),
                     terms.entropy.mean().detach(), terms.correct.sum() / valued, zero, zero, zero, zero, zero)


VALIDATION_FIGURES = ("policy_loss", "policy_top1", "value_loss", "value_mse", "value_accuracy")


def validation_sums(out: NetOutput, policy: torch.Tensor, legal: torch.Tensor, z: torch.Tensor,
                    q: torch.Tensor | None = None, *, q_weight: float = 0.0) -> torch.Tensor:
    """Sums VALIDATION_FIGURES over a batch, then the positions with a value target (float64 [6]; divide
    the policy's sums by the batch size, the value's by the last, for means).

    policy_top1 counts the positions whose most likely legal move under the
    network has the largest visit share (any of them, when several tie).
    """
    with torch.no_grad():
        terms = _per_sample(out, policy, legal, z, q, q_weight)
        top = terms.log_p.argmax(dim=1, keepdim=True)  # -inf at illegal moves: never chosen
        agree = (policy.gather(1, top).squeeze(1) >= policy.max(dim=1).values).float()
        return torch.stack([terms.policy.sum(), agree.sum(), terms.value.sum(), terms.value_mse.sum(),
                            terms.correct.sum(), terms.valued.sum()]).double()


def soft_policy_targets(policy: torch.Tensor, legal: torch.Tensor, temperature: float) -> torch.Tensor:
    """Gets the soft policy targets pi^(1/T), renormalised over the legal moves (zero elsewhere)."""
    soft = torch.where(legal, policy.float().clamp_min(0.0).pow(1.0 / temperature), torch.zeros_like(policy))
    return soft / soft.sum(dim=1, keepdim=True).clamp_min(1e-30)  # a row without targets stays zero


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
    log_p = masked_log_softmax(aux.soft_policy_logits, legal)
    soft = -_legal_sum(soft_policy_targets(policy, legal, temperature) * log_p, legal).mean()
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


class Trainer:
    """A network, its optimiser and one training step.

    The model is moved to ``device`` in channels_last and kept in training
    mode; ``compile`` wraps it in torch.compile for the steps. bf16 and
    float16 are autocast: the weights and the optimiser's state stay float32,
    the losses are computed in float32 and the heads' last layers run in
    float32 (alphazero.nn.network.float32_head). float16 scales the loss
    (``scaler``, learner.loss_scaling, its state saved with the optimiser's);
    ``skipped_steps`` counts the tries whose gradients overflowed.

    Args:
        model: the network to train (its weights are updated in place).
        config: learning rates, optimiser, weight decay, value loss weight.
        device: where to train.
        clip_grad_norm: clip the gradient's global norm to this; None measures only.
        precision: 'auto', 'bf16', 'float16' or 'float32' (training_precision; None: the device's setting,
            config.precision_for(device.type)); ``precision_choice.reason`` says what was taken and why.
        compile: torch.compile the forward pass.
    """

    def __init__(self, model: nn.Module, config: LearnerConfig, device: torch.device, *,
                 clip_grad_norm: float | None = None, precision: str | None = None, compile: bool = False) -> None:
        self.device = device
        self.config = config
        check_trainable(model, config.trainable)  # before the precision's timed step trains it
        self.model = model.to(device)
        self.precision_choice = training_precision(self.model, config, device, precision)
        self.autocast = self.precision_choice.autocast
        # channels_last on every device: on a CPU in float32 as well, where it trains faster than the default
        # layout (EXPERIMENTS.md, "Issue 49: a stronger built-in network, the data", its "channels_last for
        # training on the CPU").
        self.model = self.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # (stubs)
        training_mode(self.model, freeze_batch_norm=config.freeze_batch_norm)
        set_trainable(self.model, config.trainable)
        self.optimizer = build_optimizer(self.model, config)
        self.scaler = new_scaler(self.precision_choice, device)
        if self.scaler is not None:  # (the learner's line says it)
            self.precision_choice = replace(self.precision_choice, reason=f"{self.precision_choice.reason} with "
                                                                          f"loss scaling")
        attach(self.optimizer, lambda: self.scaler)  # the loss scale rides in the optimiser's checkpointed state
        self.skipped_steps = 0  # tries whose float16 gradients overflowed (each was run again)
        self.clip_grad_norm = clip_grad_norm
        # The action-value head's moves are scored by the loss, for the moves with a target alone.
        self._pass = features_only(self.model)
        self.action_value_head = action_value_head(self.model)
        self._forward: nn.Module = torch.compile(self._pass) if compile else self._pass  # type: ignore[assignment]
        self.auxiliary = config.soft_policy_loss_weight > 0 or config.q_loss_weight > 0
        if self.auxiliary and not hasattr(self.model, "forward_with_aux"):
            kind = model_config(self.model).kind
            raise UserError("learner.soft_policy_loss_weight and learner.q_loss_weight train auxiliary heads, which "
                            f"only network.kind = 'chessformer' has (this network is {kind!r}); set both to 0")
        forward_with_aux = getattr(self.model, "forward_with_aux", None)
        self._forward_aux: Any = torch.compile(forward_with_aux) if compile and self.auxiliary else forward_with_aux
        self.anchor: nn.Module | None = None  # the start network (set_anchor), when learner.start_anchor_weight > 0

    def set_anchor(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Keeps a frozen copy of the model with these weights as the start the anchor loss
        (learner.start_anchor_weight) pulls towards. It normalises as the model does (batch statistics, or
        the running ones when frozen), so that at the start the loss is exactly 0."""

        anchor = copy.deepcopy(self.model)
        anchor.load_state_dict(state_dict)
        training_mode(anchor, freeze_batch_norm=self.config.freeze_batch_norm)
        self.anchor = anchor.requires_grad_(False)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        dtype = self.precision_choice.dtype
        if self.autocast and dtype is not None:
            return torch.autocast(device_type=self.device.type, dtype=dtype)
        return contextlib.nullcontext()

    def to_device(self, batch: AnyBatch) -> DeviceBatch:
        """Moves a batch to the device (a DeviceBatch: planes int64, scalars, policy, legal, z, ...), its dense
        targets scattered there (learner.batch_device); staged batches come from pinned memory on CUDA."""
        if isinstance(batch, Batch):
            batch = stage(batch, pin=pins(self.device))
        return on_device(batch, self.device)

    def _q(self, tensors: DeviceBatch) -> torch.Tensor | None:
        """Gets the batch's root values when the value target uses them."""
        return None if self.config.value_target_q_weight == 0.0 else tensors.q

    def _losses(self, out: NetOutput, tensors: DeviceBatch) -> StepStats:
        return compute_losses(out, tensors.policy, tensors.legal, tensors.z,
                              value_loss_weight=self.config.value_loss_weight, q=self._q(tensors),
                              q_weight=self.config.value_target_q_weight)

    def set_learning_rate(self, step: int) -> float:
        """Sets the learning rate of training step ``step`` (0-based) in the optimiser; returns it."""
        rate = self.config.learning_rate(step)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        return rate

    def step(self, batch: AnyBatch, step: int) -> StepStats:
        """Runs training step ``step`` (0-based) on ``batch``: forward, loss, backward, update.

        Returns the batch's figures without waiting for the device (the
        tensors are read when the caller converts them); a non-finite loss is
        not checked here, since that would cost a sync every step. With loss
        scaling (float16) a try whose gradients overflowed updates nothing
        and is run again at the lowered scale (learner.loss_scaling), so the
        step returns once the weights were updated.

        Raises:
            UserError: float16 gradients overflowed MAX_SKIPS + 1 times in a row.
        """
        self.set_learning_rate(step)
        tensors = self.to_device(batch)
        for _ in range(MAX_SKIPS + 1):
            stats = self._loss(tensors)
            updated, grad_norm = self._update(stats.total)
            # (isfinite, a sync, only after a skipped try: no scale helps a loss that is not finite itself)
            if updated or not bool(torch.isfinite(stats.total.detach())):
                return replace(stats, total=stats.total.detach(), grad_norm=grad_norm.detach().float())
            self.skipped_steps += 1
            log.info("float16 gradients overflowed at step %d: trying it again at loss scale %g",
                     step, self._scale())
        raise UserError(overflow_message(step, self._scale()))

    def _scale(self) -> float:
        return self.scaler.get_scale() if self.scaler is not None else 1.0

    def _loss(self, tensors: DeviceBatch) -> StepStats:
        """Runs the forward pass in training mode and gets the batch's losses (total with its graph)."""
        with self._autocast():
            if self.auxiliary:
                out, aux = self._forward_aux(tensors.planes, tensors.scalars)
            else:
                out = self._forward(tensors.planes, tensors.scalars)
        stats = self._losses(out, tensors)
        if self.auxiliary:
            stats = self._add_auxiliary_losses(stats, aux, tensors)
        stats = self._add_action_value_loss(stats, out, tensors)
        if self.anchor is not None and self.config.start_anchor_weight > 0:
            stats = self._add_anchor_loss(stats, out, tensors)
        return stats

    def _update(self, total: torch.Tensor) -> tuple[bool, torch.Tensor]:
        """Runs backward from ``total`` and the optimiser's step; returns whether the weights were updated (False:
        the loss scaler found inf or NaN gradients and skipped it) and the gradient's global norm, unscaled."""
        self.optimizer.zero_grad(set_to_none=True)
        # Without a trainable parameter in the loss there is no gradient: no backward, no update, nothing to scale.
        scaler = self.scaler if total.requires_grad else None
        if scaler is not None:
            scaler.scale(total).backward()
            scaler.unscale_(self.optimizer)  # the norm, its clipping and the update see the true gradient
        elif total.requires_grad:
            total.backward()
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if self.clip_grad_norm is None:
            grad_norm = torch.nn.utils.get_total_norm(grads)
        else:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        if scaler is None:
            self.optimizer.step()
            return True, grad_norm
        scale = scaler.get_scale()
        scaler.step(self.optimizer)  # skipped when unscale_ found inf or NaN
        scaler.update()  # halves the scale after a skip (and only then lowers it)
        return scaler.get_scale() >= scale, grad_norm

    def _add_auxiliary_losses(self, stats: StepStats, aux: Any, tensors: DeviceBatch) -> StepStats:
        """Adds the weighted auxiliary losses to ``stats.total`` and records them.

        Raises:
            ValueError: the q loss has a weight but the batch holds no root values.
        """
        config = self.config
        root_values = None
        if config.q_loss_weight > 0:
            if tensors.q is None:
                raise ValueError("learner.q_loss_weight > 0 needs batches with root values")
            # A position without a value target (z NaN) trains no value-like head.
            root_values = torch.where(torch.isfinite(tensors.z), tensors.q, torch.full_like(tensors.q, float("nan")))
        soft, q = auxiliary_losses(aux, tensors.policy, tensors.legal, root_values,
                                   temperature=config.soft_policy_temperature)
        total = stats.total + config.soft_policy_loss_weight * soft + config.q_loss_weight * q
        return replace(stats, total=total, soft_policy=soft.detach(), q=q.detach())

    def _add_action_value_loss(self, stats: StepStats, out: NetOutput, tensors: DeviceBatch) -> StepStats:
        """Adds action_value_loss_weight x the action-value loss, and action_value_rank_weight x the listwise one
        on the head's ranking (none without the head or targets)."""
        if self.action_value_head is None or tensors.action_values is None:
            return stats
        head, features, config = self.action_value_head, action_features(out), self.config
        loss, _ = action_value_loss(head, features, *tensors.action_values)
        total = stats.total + config.action_value_loss_weight * loss
        if config.action_value_rank_weight > 0:
            total = total + config.action_value_rank_weight * action_value_rank_loss(
                head, features, *tensors.action_values, temperature=config.action_value_rank_temperature)
        return replace(stats, total=total, action_value=loss.detach())

    def _add_anchor_loss(self, stats: StepStats, out: NetOutput, tensors: DeviceBatch) -> StepStats:
        """Adds start_anchor_weight x anchor_loss against the start network's outputs on the batch."""
        assert self.anchor is not None
        with torch.no_grad(), self._autocast():
            start = features_only(self.anchor)(tensors.planes, tensors.scalars)
        anchor = anchor_loss(out, start, tensors.legal)
        return replace(stats, total=stats.total + self.config.start_anchor_weight * anchor, anchor=anchor.detach())

    @torch.no_grad()
    def evaluate(self, batch: AnyBatch) -> StepStats:
        """Computes a batch's figures in eval mode (batch-norm running statistics), without training."""
        tensors = self.to_device(batch)
        with eval_mode(self.model), self._autocast():
            out = self._pass(tensors.planes, tensors.scalars)
        return self._add_action_value_loss(self._losses(out, tensors), out, tensors)

    @torch.no_grad()
    def validate(self, batches: Iterable[AnyBatch]) -> dict[str, float] | None:
        """Computes the means of VALIDATION_FIGURES over ``batches`` in eval mode, plus ``positions``; with an
        action-value head and batches that have targets, ``action_value_loss`` and ``action_value_mae`` too.

        Returns None when the batches hold no position.
        """
        sums, positions = None, 0
        action_sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss, |error|, moves
        with eval_mode(self.model):
            for batch in batches:
                tensors = self.to_device(batch)
                with self._autocast():
                    out = self._pass(tensors.planes, tensors.scalars)
                part = validation_sums(out, tensors.policy, tensors.legal, tensors.z, self._q(tensors),
                                       q_weight=self.config.value_target_q_weight)
                sums = part if sums is None else sums + part
                positions += tensors.size
                if self.action_value_head is not None and tensors.action_values is not None:
                    action_sums += action_value_sums(self.action_value_head, action_features(out),
                                                     *tensors.action_values)
        if sums is None or positions == 0:
            return None
        policy_means, value_means = sums[:2] / positions, sums[2:5] / max(float(sums[5]), 1.0)
        means = dict(zip(VALIDATION_FIGURES, [*policy_means.tolist(), *value_means.tolist()], strict=True))
        loss, error, moves = action_sums.tolist()
        if moves > 0:
            means.update(action_value_loss=loss / moves, action_value_mae=error / moves)
        return {**means, "positions": float(positions)}

