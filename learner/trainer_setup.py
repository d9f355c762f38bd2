"""What learns and how: the trainable parameters (learner.trainable), the optimiser, the training modes.

Split out of learner.trainer (the loss and the step), which re-exports these names.

- **Trainable** (``set_trainable``): 'all' the network; 'policy_head' the
  policy head alone (the tower, the value head and an action-value head keep
  the weights they came with); 'action_value_head' the action-value head
  alone (its projection of the body and the head: the tower, the policy and
  the value heads keep theirs), to give a trained network a head of its own
  on Stockfish's per-move values without moving what the search plays with.
  Frozen parameters are left out of the optimiser, so weight decay does not
  move them either; both heads' settings need learner.freeze_batch_norm
  (alphazero.config checks it), so the batch-norm statistics stay too.
- **Optimiser** (``build_optimizer``): SGD with momentum (AlphaZero), Adam
  with L2 weight decay 2c (the gradient of c * ||theta||^2, so the objective
  is AlphaZero's), or AdamW / NAdam with decoupled weight decay on the
  weight matrices (``momentum`` and ``beta2`` are the Adam family's betas).
- **Modes** (``training_mode``, ``eval_mode``): training with frozen batch
  norm, and evaluation in between steps.
- **Precision** (``training_precision``): the device's setting
  (learner.cuda_precision or cpu_precision) decided by
  alphazero.nn.precision; on a CPU 'auto' times ``time_training_step`` both
  ways.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from alphazero.config import LearnerConfig
from alphazero.config_compat import architecture_hash
from alphazero.errors import UserError
from alphazero.nn.action_values import ACTION_VALUE_PREFIX, features_only
from alphazero.nn.network import model_config
from alphazero.nn.precision import PrecisionChoice, choose_precision, random_positions, seconds_per_call

__all__ = ["POLICY_HEAD_PREFIX", "TIMING_ROWS", "TRAINABLE_PREFIXES", "build_optimizer", "check_trainable",
           "eval_mode", "set_trainable", "time_training_step", "training_mode", "training_precision",
           "weight_decay_term"]

POLICY_HEAD_PREFIX = "policy"
"""Parameter names of the policy head start with it: the resnet's policy_conv and policy_out, the
Chessformer's policy_embedding and policy."""

TRAINABLE_PREFIXES = {"policy_head": POLICY_HEAD_PREFIX, "action_value_head": ACTION_VALUE_PREFIX}
"""learner.trainable's parts of a network, by the start of their parameters' names (the action-value head's:
every parameter named action_value*, e.g. the resnet's action_value_conv, the Chessformer's
action_value_embedding, the 'policy' shape's planes or attention head and level, and action_value, the head)."""


def check_trainable(model: nn.Module, trainable: str) -> None:
    """Checks that the network has the part ``trainable`` names.

    Raises:
        UserError: 'action_value_head' (or 'policy_head') on a network without that head.
    """
    prefix = TRAINABLE_PREFIXES.get(trainable)
    if prefix is None or any(name.startswith(prefix) for name, _ in model.named_parameters()):
        return
    if trainable == "action_value_head":
        raise UserError("learner.trainable = 'action_value_head' trains the action-value head alone, but this network "
                        "has none (network.action_value_head = 'none'): set network.action_value_head=logit or "
                        "hl_gauss to give it a fresh one")
    raise UserError(f"learner.trainable = {trainable!r}: this network has no parameter named {prefix}*")


def set_trainable(model: nn.Module, trainable: str) -> None:
    """Lets the parameters ``trainable`` names learn ('all', 'policy_head' or 'action_value_head') and freezes
    the rest.

    Raises:
        UserError: the network has no such head (check_trainable).
    """
    check_trainable(model, trainable)
    prefix = TRAINABLE_PREFIXES.get(trainable)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(prefix is None or name.startswith(prefix))


def _decoupled_decay_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    # Decoupled decay pulls weights towards 0; gains, offsets and biases
    # (vectors, and what the model names in no_weight_decay) keep their scale.
    # A Chessformer names its gains; a method nn.Module's typing cannot see.
    skip = model.no_weight_decay() if hasattr(model, "no_weight_decay") else set()  # type: ignore[operator]
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    decay = [p for name, p in named if p.ndim >= 2 and name not in skip]
    rest = [p for name, p in named if not (p.ndim >= 2 and name not in skip)]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, config: LearnerConfig) -> torch.optim.Optimizer:
    """Builds the configured optimiser over the model's trainable parameters (weight decay 2c: see the
    module docstring); frozen ones are left out, so weight decay does not move them either."""
    rate = config.learning_rate(0)
    decay = 2.0 * config.weight_decay
    betas = (config.momentum, config.beta2)
    if config.optimizer == "adamw":
        groups = _decoupled_decay_groups(model, config.weight_decay)
        return torch.optim.AdamW(groups, lr=rate, betas=betas, eps=config.epsilon)
    if config.optimizer == "nadam":
        groups = _decoupled_decay_groups(model, config.weight_decay)
        return torch.optim.NAdam(groups, lr=rate, betas=betas, eps=config.epsilon, decoupled_weight_decay=True)
    if config.optimizer == "adam":
        return torch.optim.Adam(_learning(model), lr=rate, betas=betas, eps=config.epsilon, weight_decay=decay)
    return torch.optim.SGD(_learning(model), lr=rate, momentum=config.momentum, weight_decay=decay)


def _learning(model: nn.Module) -> list[nn.Parameter]:
    return [parameter for parameter in model.parameters() if parameter.requires_grad]


def weight_decay_term(model: nn.Module, config: LearnerConfig) -> float:
    """Gets c * ||theta||^2, the weight decay's share of the objective."""
    with torch.no_grad():
        squares = sum(p.float().square().sum() for p in model.parameters())
    return config.weight_decay * float(squares)


def training_mode(model: nn.Module, *, freeze_batch_norm: bool) -> None:
    """Puts ``model`` in training mode; with ``freeze_batch_norm`` its batch-norm layers stay in eval mode.

    A frozen batch-norm layer normalises with its running statistics and
    never updates them (its scale and offset still train). Fine-tuning a
    network on data of another distribution (self-play after supervised
    pretraining) otherwise re-estimates the statistics from the new
    batches, and those statistics alone cost strength
    (EXPERIMENTS.md, "Self-play from the built-in network, and why it lost strength").
    """
    model.train()
    if freeze_batch_norm:
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.eval()


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Puts every module of ``model`` in eval mode, and back in the mode each was in afterwards."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


TIMING_ROWS = 64  # the batch of the training step timed at start to choose the CPU's precision


def time_training_step(model: nn.Module, config: LearnerConfig, device: torch.device, bf16: bool,
                       rows: int = TIMING_ROWS) -> float:
    """Times forward and backward passes of a copy of ``model`` in training mode on ``rows`` random positions
    (precision.seconds_per_call): seconds per step in channels_last, as the Trainer runs, under bf16 autocast
    (True) or in float32 (False). The loss stands in for the real one: a log-sum-exp of the logits and the
    squared value, plus the squared action-value features of a network with the head (something to learn when
    learner.trainable is that head alone)."""
    planes, scalars = random_positions(rows, device)
    candidate = copy.deepcopy(model).to(device).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    training_mode(candidate, freeze_batch_norm=config.freeze_batch_norm)
    set_trainable(candidate, config.trainable)

    forward = features_only(candidate)

    def step() -> None:
        context = torch.autocast(device_type=device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with context:
            out = forward(planes, scalars)
        loss = out.policy_logits.float().logsumexp(1).mean() + out.value.float().square().mean()
        if out.action_features is not None:
            loss = loss + out.action_features.float().square().mean()
        loss.backward()

    return seconds_per_call(step)


def training_precision(model: nn.Module, config: LearnerConfig, device: torch.device, setting: str | None = None,
                       *, capability: tuple[int, int] | None = None) -> PrecisionChoice:
    """Decides what ``model`` trains in on ``device``: ``setting``, or the device's own
    (config.precision_for(device.type)), through alphazero.nn.precision.choose_precision. float16 may be
    taken (on CUDA: the trainer scales its loss); on a CPU 'auto' times a training step both ways. On CUDA
    ``capability`` is the device's compute capability (default: asked of it; tests give it).

    Raises:
        ValueError: an unknown setting.
    """
    setting = setting if setting is not None else config.precision_for(device.type)
    return choose_precision(
        setting, device, key=(architecture_hash(model_config(model)), "train", config.trainable),
        timer=functools.partial(time_training_step, model, config, device), float16=True, capability=capability)
