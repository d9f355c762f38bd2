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
  value is t. With ``value_target_short_term_weight`` s > 0 the search's
  root value v_h ``value_target_short_term_plies`` h plies on in the same
  game (for the position's mover; the game's result where the game has no
  sample that far on: learner.game_targets, KataGo's short-term value
  targets) joins the mix: t = (1 - w - s) z + w q + s v_h, and a 'wdl'
  head's soft target mixes v_h's in with weight s as it does q's. A
  position whose z is NaN has no value target (a shard marked
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
EXPERIMENTS.md, "A stronger built-in network, the data"). The
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
target| win probability, comparable across the two forms).

Auxiliary targets, added to the loss with their weights (a Chessformer's
second policy and value heads, see alphazero.nn.chessformer; with both weights
0 those heads are neither run nor trained):

- **Soft policy** (``soft_policy_loss_weight``): cross-entropy of the soft
  head's legal-move softmax against pi^(1/T) renormalised over the legal
  moves (T = ``soft_policy_temperature``, 4 as in KataGo and the Chessformer
  paper): the flattened target makes the body learn which moves the search
  found nearly as good, not only the best. The resnet trains it on its
  training-only soft policy head (``network.soft_policy_head``, KataGo's
  auxiliary soft policy target; KataGo weighs it 8), run with the reply head.
- **q** (``q_loss_weight``): squared error of the q head against the
  search's root value of the position (shards store it per sample): a less
  noisy value signal than the game's result, which the value head keeps.

**Reply policy** (``network.reply_policy_head``, ``reply_policy_weight``;
KataGo's auxiliary policy target, Wu 2019, weighted 0.15 there): the reply
head's logits, a softmax over the NEXT position's legal moves (in that
position's frame), against that position's visit shares: the opponent's
reply (learner.game_targets builds the targets). The mean is over the
positions that have one (the game's last position, or one whose next
position was not written, has none); ``loss/reply_policy``. Only the training
pass runs the head (the networks' ``forward_with_training_heads``); search never does.

**Moves left** (``network.moves_left_head``, ``moves_left_weight``; lc0's
moves-left head): the head's plies left against the plies from the position
to its game's end (learner.game_targets: to the resignation, or to the ply
limit's cut, where the game ended so), lc0's Huber loss on both over 20,
delta 10 plies (learner.losses.moves_left_loss). The mean is over the
positions whose game has a recorded end (pretraining labels cut by the
labeller have none); ``loss/moves_left``. Only the training pass runs the
head, as the reply head's; search does not read it.

The functions of the loss live in learner.losses; this module re-exports them.

Example::

    trainer = Trainer(build_network(config.network), config.learner, torch.device("cpu"))
    stats = trainer.step(batch, step=0)      # StepStats of 0-dim tensors; float(stats.total)
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import torch
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
from alphazero.nn.heads import TrainingHeads
from alphazero.nn.network import NetOutput, model_config
from learner.batch import Batch
from learner.batch_device import DeviceBatch, StagedBatch, on_device, pins, stage
from learner.loss_scaling import MAX_SKIPS, attach, new_scaler, overflow_message
from learner.losses import (
    VALIDATION_FIGURES,
    StepStats,
    anchor_loss,
    auxiliary_losses,
    compute_losses,
    masked_log_softmax,
    moves_left_loss,
    policy_kl,
    reply_policy_loss,
    result_classes,
    soft_policy_loss,
    soft_policy_targets,
    validation_sums,
    value_classes,
    value_target,
)
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
    "compute_losses", "eval_mode", "masked_log_softmax", "moves_left_loss", "policy_kl", "reply_policy_loss",
    "result_classes", "soft_policy_loss", "soft_policy_targets", "time_training_step", "training_mode",
    "training_precision", "validation_sums", "value_classes", "value_target", "weight_decay_term",
]

log = logging.getLogger(__name__)

AnyBatch = Batch | StagedBatch | DeviceBatch  # a batch of numpy arrays, staged on the host, or on the device
# The training-only heads: (the learner's weight, the network's setting, the head's name in messages).
_TRAINING_HEADS = (("reply_policy_weight", "reply_policy_head", "the reply-policy head"),
                   ("moves_left_weight", "moves_left_head", "the moves-left head"))
# The resnet's soft policy head is one too (the chessformer's is an auxiliary head it always has).
_SOFT_POLICY_HEAD = ("soft_policy_loss_weight", "soft_policy_head", "the soft policy head")


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
        # layout (EXPERIMENTS.md, "A stronger built-in network, the data", its "channels_last for
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
        # Optimiser steps taken: a loss scaler skips optimizer.step() on overflowed gradients, so a count that did
        # not move tells a skipped try without reading the scale (a device sync). (A fused optimiser, which
        # GradScaler always steps, would break this; build_optimizer makes none.)
        self._optimizer_steps = 0
        self.optimizer.register_step_post_hook(self._count_optimizer_step)
        self.clip_grad_norm = clip_grad_norm
        # The action-value head's moves are scored by the loss, for the moves with a target alone.
        self._pass = features_only(self.model)
        self.action_value_head = action_value_head(self.model)
        self._forward: nn.Module = torch.compile(self._pass) if compile else self._pass  # type: ignore[assignment]
        # The chessformer's auxiliary heads (soft policy, q) run in its forward_with_aux; the resnet's soft policy
        # head is a training-only head (network.soft_policy_head), run with the others below.
        has_aux = hasattr(self.model, "forward_with_aux")
        if config.q_loss_weight > 0 and not has_aux:
            kind = model_config(self.model).kind
            raise UserError("learner.q_loss_weight trains the auxiliary q head, which only network.kind = "
                            f"'chessformer' has (this network is {kind!r}); set it to 0")
        self.auxiliary = has_aux and (config.soft_policy_loss_weight > 0 or config.q_loss_weight > 0)
        # The training-only heads that train (their pass runs them): each needs its head.
        self.reply = config.reply_policy_weight > 0
        self.moves_left = config.moves_left_weight > 0
        self.soft_policy = config.soft_policy_loss_weight > 0 and not has_aux
        self._check_training_heads()
        asked = {"reply_policy": self.reply, "moves_left": self.moves_left}
        forward_with_aux = getattr(self.model, "forward_with_aux", None)
        if forward_with_aux is not None:
            forward_with_aux = functools.partial(forward_with_aux, **asked)
        self._forward_aux: Any = torch.compile(forward_with_aux) if compile and self.auxiliary else forward_with_aux
        self.training_heads = self.reply or self.moves_left or self.soft_policy  # without auxiliary heads, their
        forward_heads = getattr(self.model, "forward_with_training_heads", None)  # own pass runs them
        if forward_heads is not None:
            forward_heads = functools.partial(forward_heads, **asked, soft_policy=self.soft_policy)
        self._forward_heads: Any = torch.compile(forward_heads) if compile and self.training_heads else forward_heads
        self.anchor: nn.Module | None = None  # the start network (set_anchor), when learner.start_anchor_weight > 0

    def _check_training_heads(self) -> None:
        """Checks that the network has each training-only head that a weight trains.

        Raises:
            UserError: a weight > 0 for a head the network has not.
        """
        network = model_config(self.model)
        for weight, head, what in (*_TRAINING_HEADS, *([_SOFT_POLICY_HEAD] if self.soft_policy else [])):
            if getattr(self.config, weight) > 0 and not getattr(network, head):
                raise UserError(f"learner.{weight} trains {what}, which this network has not (network.{head} = "
                                f"false): set learner.{weight}=0, or start a run with network.{head}=true")

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

    @property
    def untrained_figures(self) -> set[str]:
        """Names the StepStats figures that stay 0 here, whatever the batches: a head the network has not, a
        loss without a weight (the learner logs the others)."""
        untrained = set() if self.action_value_head is not None else {"action_value"}
        weighted = {"reply_policy": self.reply, "moves_left": self.moves_left}
        return untrained | {name for name, trains in weighted.items() if not trains}

    def _q(self, tensors: DeviceBatch) -> torch.Tensor | None:
        """Gets the batch's root values when the value target uses them."""
        return None if self.config.value_target_q_weight == 0.0 else tensors.q

    def _short_term(self, tensors: DeviceBatch) -> dict[str, Any]:
        """Gets the value target's short-term arguments (learner.game_targets): none while its weight is 0.

        Raises:
            ValueError: the weight is set but the batch carries no short-term targets.
        """
        weight = self.config.value_target_short_term_weight
        if weight == 0.0:
            return {}
        if tensors.short_term is None:
            raise ValueError("learner.value_target_short_term_weight > 0 needs batches with short-term value targets "
                             "(ReplayWindow(targets=GameTargets.of(config)))")
        return {"short_term": tensors.short_term, "short_term_weight": weight}

    def _losses(self, out: NetOutput, tensors: DeviceBatch) -> StepStats:
        return compute_losses(out, tensors.policy, tensors.legal, tensors.z,
                              value_loss_weight=self.config.value_loss_weight, q=self._q(tensors),
                              q_weight=self.config.value_target_q_weight, **self._short_term(tensors))

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
            heads = TrainingHeads()
            if self.auxiliary:
                out, aux = self._forward_aux(tensors.planes, tensors.scalars)
                heads = TrainingHeads(aux.reply_policy_logits, aux.moves_left)
            elif self.training_heads:
                out, heads = self._forward_heads(tensors.planes, tensors.scalars)
            else:
                out = self._forward(tensors.planes, tensors.scalars)
        stats = self._losses(out, tensors)
        if self.auxiliary:
            stats = self._add_auxiliary_losses(stats, aux, tensors)
        if heads.reply_policy_logits is not None:
            stats = self._add_reply_loss(stats, heads.reply_policy_logits, tensors)
        if heads.moves_left is not None:
            stats = self._add_moves_left_loss(stats, heads.moves_left, tensors)
        if heads.soft_policy_logits is not None:
            stats = self._add_soft_policy_loss(stats, heads.soft_policy_logits, tensors)
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
        steps = self._optimizer_steps
        scaler.step(self.optimizer)  # skipped when unscale_ found inf or NaN
        scaler.update()  # halves the scale after a skip (and only then lowers it)
        return self._optimizer_steps > steps, grad_norm

    def _count_optimizer_step(self, *_: Any) -> None:
        """Counts an optimiser step (its post-step hook; see __init__)."""
        self._optimizer_steps += 1

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

    def _add_soft_policy_loss(self, stats: StepStats, logits: torch.Tensor, tensors: DeviceBatch) -> StepStats:
        """Adds soft_policy_loss_weight x the resnet's soft policy head's loss against the flattened targets."""
        loss = soft_policy_loss(logits, tensors.policy, tensors.legal, self.config.soft_policy_temperature)
        return replace(stats, total=stats.total + self.config.soft_policy_loss_weight * loss, soft_policy=loss.detach())

    def _add_reply_loss(self, stats: StepStats, logits: torch.Tensor, tensors: DeviceBatch) -> StepStats:
        """Adds reply_policy_weight x the reply-policy head's loss against the next positions' policies.

        Raises:
            ValueError: the batch carries no reply targets.
        """
        if tensors.reply is None:
            raise ValueError("learner.reply_policy_weight > 0 needs batches with reply targets "
                             "(ReplayWindow(targets=GameTargets.of(config)))")
        loss = reply_policy_loss(logits, tensors.reply)
        return replace(stats, total=stats.total + self.config.reply_policy_weight * loss, reply_policy=loss.detach())

    def _add_moves_left_loss(self, stats: StepStats, plies: torch.Tensor, tensors: DeviceBatch) -> StepStats:
        """Adds moves_left_weight x the moves-left head's loss against the plies left in the positions' games.

        Raises:
            ValueError: the batch carries no moves-left targets.
        """
        if tensors.moves_left is None:
            raise ValueError("learner.moves_left_weight > 0 needs batches with moves-left targets "
                             "(ReplayWindow(targets=GameTargets.of(config)))")
        loss = moves_left_loss(plies, tensors.moves_left)
        return replace(stats, total=stats.total + self.config.moves_left_weight * loss, moves_left=loss.detach())

    def _add_action_value_loss(self, stats: StepStats, out: NetOutput, tensors: DeviceBatch) -> StepStats:
        """Adds action_value_loss_weight x the action-value loss, and action_value_rank_weight x the listwise one
        on the head's ranking (none without the head or targets)."""
        if self.action_value_head is None or tensors.action_values is None:
            return stats
        head, features, config = self.action_value_head, action_features(out), self.config
        rows, moves, labels = tensors.action_values
        logits = head.logits(features, rows, moves)  # gathered once, for both losses
        loss, _ = action_value_loss(head, logits, labels)
        total = stats.total + config.action_value_loss_weight * loss
        if config.action_value_rank_weight > 0:
            total = total + config.action_value_rank_weight * action_value_rank_loss(
                head, logits, rows, labels, len(features), temperature=config.action_value_rank_temperature)
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
                                       q_weight=self.config.value_target_q_weight, **self._short_term(tensors))
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

