"""AlphaZero's residual network in PyTorch.

Its files: alphazero.store.checkpoint; inference: alphazero.nn.forward.Evaluator.

The network takes the compact input (int64 bitboards [N, 112] and float32 raw
scalars [N, 7]) and expands it on its own device as its first step, so only
~1 KB per position crosses to a GPU. Outputs (a NetOutput, alphazero.nn.heads,
which the Chessformer returns too), always from the side to move:

- ``policy_logits`` [N, 4672]: index = plane * 64 + square, square = 8 * row + col
  of the oriented board (see docs/encodings.md for the 73 move planes).
- ``value`` [N] in [-1, 1]: the expected outcome.
- ``wdl_logits`` [N, 3] (win, draw, loss) when the value head is 'wdl', else None;
  then value = P(win) - P(loss).
- ``action_values`` [N, 4672] in [0, 1] and ``action_features`` ([N, 64, 2E],
  or [N, 4672] in the 'policy' shape) with an action-value head (``network.action_value_head``,
  alphazero.nn.action_values), else None.

With ``network.reply_policy_head`` a second policy head of the same shape
(``reply_policy_conv``, ``reply_policy_out``) gives logits [N, 4672] for the
next position's search policy, in that position's frame (the opponent's, the
board flipped for it): ``forward_with_reply`` and ``forward_with_training_heads``
alone run it, for the learner; ``forward`` never does, so search pays nothing
for it.

With ``network.moves_left_head`` lc0's moves-left head (MovesLeftHead,
weights ``moves_left.*``) predicts the plies left in the game, float32 [N]
>= 0; ``forward_with_training_heads`` runs it (and the reply head) for the
learner, ``forward`` never does: search does not read it.

With ``network.soft_policy_head`` KataGo's auxiliary soft policy head, of the
policy head's shape (``soft_policy_conv``, ``soft_policy_out``), gives
logits [N, 4672] that the learner trains on the search's policy at a
temperature (learner.soft_policy_loss_weight); only
``forward_with_training_heads`` runs it.

With ``network.se_ratio`` > 0 each residual block ends its branch with lc0's
squeeze-and-excitation (SqueezeExcitation, weights ``tower.K.se.*``); at 0,
the default, the blocks and their weights' names are as before it existed.
With ``network.global_pool_channels`` > 0 every third block from the second
is KataGo's global pooling block (GlobalPoolingBias, weights
``tower.K.pool_conv.*`` and ``tower.K.pool.*``); at 0 the tower is as before.

Example::

    model = build_network(get_preset("tiny").network)
    model.load_state_dict(state_dict)   # or alphazero.store.checkpoint.load_model
"""

from __future__ import annotations

import dataclasses
import logging
import os
import textwrap

import torch
import torch.nn.functional as F
from torch import nn

from alphazero.chess.moves import NUM_PLANES
from alphazero.config import NetworkConfig
from alphazero.errors import UserError
from alphazero.nn.action_values import ACTION_VALUE_PREFIX, ActionValueHead, start_level_from_value, with_action_values
from alphazero.nn.chessformer import Chessformer
from alphazero.nn.heads import (
    MOVES_LEFT_FILTERS,
    MOVES_LEFT_HIDDEN,
    MOVES_LEFT_PREFIX,
    REPLY_POLICY_PREFIX,
    SOFT_POLICY_PREFIX,
    NetOutput,
    TrainingHeads,
    float32_head,
    moves_left_plies,
)
from alphazero.nn.planes import INPUT_PLANES, expand_torch

_COMPILED_PREFIX = "_orig_mod."  # torch.compile's wrapper prefixes parameter names with this

log = logging.getLogger(__name__)


def _conv_bn(in_channels: int, out_channels: int, kernel: int) -> nn.Sequential:
    # No conv bias: the batch norm's shift does its work.
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(out_channels),
    )


class SqueezeExcitation(nn.Module):
    """lc0's squeeze-and-excitation on a residual block's branch: a scale and a bias per channel, from each
    channel's mean over the board.

    pooled [N, C] = the mean of x [N, C, 8, 8] over the 64 squares -> Linear(C, C // ratio) -> ReLU ->
    Linear(C // ratio, 2C) -> w, b (the first C outputs, then the last C, lc0's order) -> sigmoid(w) * x + b,
    each broadcast over the board.

    It starts as half the branch: the first layer takes torch's default initialisation (Kaiming-uniform),
    the second starts at zero (weights and biases), so every channel's scale is sigmoid(0) = 0.5 and its bias
    0. Zero rather than torch's default, whose biases would add a random constant to every channel of every
    block: the tower's blocks start as the identity (ResidualBlock), and with this start they still do.
    (lc0 draws both layers' weights from Glorot-normal, biases 0.)
    """

    def __init__(self, channels: int, ratio: int) -> None:
        super().__init__()
        self.squeeze = nn.Linear(channels, channels // ratio)
        self.excite = nn.Linear(channels // ratio, 2 * channels)
        nn.init.zeros_(self.excite.weight)
        nn.init.zeros_(self.excite.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A mean over fixed dimensions: one graph for torch.compile and CUDA graphs, either memory format.
        pooled = x.mean(dim=(2, 3))
        scale, bias = self.excite(F.relu(self.squeeze(pooled))).chunk(2, dim=1)
        return torch.sigmoid(scale)[:, :, None, None] * x + bias[:, :, None, None]


class GlobalPoolingBias(nn.Module):
    """KataGo's global pooling bias (Wu 2019, "Accelerating Self-Play Learning in Go", section 3.4) on a board
    of fixed size: a bias per channel of a block's regular channels from the pooled ones, so that every
    square hears of the whole board within one block.

    pooled channels g [N, G, 8, 8] (batch-normed: the block's pool_conv) -> ReLU -> each channel's mean and
    max over the 64 squares [N, 2G] -> Linear(2G, C) -> added to each of the C regular channels x [N, C, 8, 8],
    broadcast over the board.
    (KataGo's third feature, the mean scaled by the board's width, is a constant multiple of the mean on a
    board that is always 8x8.) The linear layer starts at zero, weights and bias: the bias is 0 until
    training moves it, and the block starts as the plain block does.
    """

    def __init__(self, pooled: int, channels: int) -> None:
        super().__init__()
        self.fc = nn.Linear(2 * pooled, channels)
        nn.init.zeros_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        g = F.relu(g)
        features = torch.cat((g.mean(dim=(2, 3)), g.amax(dim=(2, 3))), dim=1)
        return x + self.fc(features)[:, :, None, None]


class ResidualBlock(nn.Module):
    """conv-BN-ReLU-conv-BN (then squeeze-and-excitation with ``se_ratio`` > 0), plus the input, then ReLU.

    With ``global_pool`` > 0 (KataGo's global pooling block) the first convolution's last ``global_pool``
    channels are pooled into a bias on its others (GlobalPoolingBias, weights ``tower.K.pool.*``) and the
    second convolution reads those others alone: the block costs about what a plain one does.
    """

    def __init__(self, filters: int, se_ratio: int = 0, global_pool: int = 0) -> None:
        super().__init__()
        regular = filters - global_pool
        self.first = _conv_bn(filters, regular, 3)
        # Its own conv-BN pair rather than a slice of first's: fold_batch_norm folds both alike.
        self.pool_conv = _conv_bn(filters, global_pool, 3) if global_pool else None
        self.pool = GlobalPoolingBias(global_pool, regular) if global_pool else None
        self.second = _conv_bn(regular, filters, 3)
        # Zero the last batch norm's scale so every block starts as the identity;
        # deep towers train faster from there (Goyal et al., 2017).
        nn.init.zeros_(self.second[1].weight)  # type: ignore[arg-type]  # a BatchNorm2d's: a Tensor
        self.se = SqueezeExcitation(filters, se_ratio) if se_ratio else None  # weights tower.K.se.*

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        if self.pool is not None and self.pool_conv is not None:
            h = self.pool(h, self.pool_conv(x))
        y = self.second(F.relu(h))
        if self.se is not None:
            y = self.se(y)
        return F.relu(x + y)


def global_pooling_blocks(blocks: int) -> list[int]:
    """Gets the indices of the tower's blocks that pool (network.global_pool_channels > 0): every third from the
    second, 1, 4, 7, ..., as KataGo spreads them through its towers (one of 2 blocks, two of small's six)."""
    return list(range(1, blocks, 3))


class ValueLevel(nn.Module):
    """A scalar per position, shaped as the value head (1x1 conv-BN-ReLU, a hidden layer, one output): the
    'policy'-shaped action-value head's level (alphazero.nn.action_values)."""

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        self.conv = _conv_bn(config.filters, config.value_filters, 1)
        self.fc = nn.Linear(config.value_filters * 64, config.value_hidden)
        self.out = nn.Linear(config.value_hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.relu(self.fc(F.relu(self.conv(x)).flatten(1)))
        return float32_head(self.out, hidden).float()  # [N, 1]


class MovesLeftHead(nn.Module):
    """lc0's moves-left head: a 1x1 conv-BN-ReLU to 8 channels, a hidden layer of 128 (ReLU), one output, the
    plies left float32 [N] >= 0 (alphazero.nn.heads.moves_left_plies)."""

    def __init__(self, filters: int) -> None:
        super().__init__()
        self.conv = _conv_bn(filters, MOVES_LEFT_FILTERS, 1)
        self.fc = nn.Linear(MOVES_LEFT_FILTERS * 64, MOVES_LEFT_HIDDEN)
        self.out = nn.Linear(MOVES_LEFT_HIDDEN, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.relu(self.fc(F.relu(self.conv(x)).flatten(1)))
        return moves_left_plies(float32_head(self.out, hidden))


class AlphaZeroNet(nn.Module):
    """AlphaZero's residual tower with a convolutional policy head and a value head.

    Args:
        config: the architecture; kept as ``self.config`` and saved with the weights.
    """

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        self.config = config
        self.stem = _conv_bn(INPUT_PLANES, config.filters, 3)
        pooling = set(global_pooling_blocks(config.blocks)) if config.global_pool_channels else set()
        self.tower = nn.Sequential(*(ResidualBlock(config.filters, config.se_ratio,
                                                   config.global_pool_channels if k in pooling else 0)
                                     for k in range(config.blocks)))
        self.policy_conv = _conv_bn(config.filters, config.policy_filters, 3)
        kernel = config.policy_kernel
        self.policy_out = nn.Conv2d(config.policy_filters, NUM_PLANES, kernel, padding=kernel // 2)
        self.value_conv = _conv_bn(config.filters, config.value_filters, 1)
        self.value_fc = nn.Linear(config.value_filters * 64, config.value_hidden)
        self.value_out = nn.Linear(config.value_hidden, 3 if config.value_head == "wdl" else 1)
        self.action_value_conv: nn.Module | None = None
        self.action_value_planes: nn.Conv2d | None = None  # the 'policy' shape's last conv
        self.action_value_level: ValueLevel | None = None  # and its level
        self.action_value: ActionValueHead | None = None
        if config.action_value_head != "none":
            self.action_value = ActionValueHead(config)
            if config.action_value_shape == "policy":  # the policy head's shape (see start_action_values_from_policy)
                self.action_value_conv = _conv_bn(config.filters, config.policy_filters, 3)
                self.action_value_planes = nn.Conv2d(config.policy_filters, NUM_PLANES, kernel,
                                                     padding=kernel // 2)
                self.action_value_level = ValueLevel(config)
            else:
                # A bias, no batch norm: a head added to trained (and frozen-statistics) weights starts as it trains.
                self.action_value_conv = nn.Conv2d(config.filters, 2 * config.action_value_filters, 1)
        # Built last, so that the other layers start from the same random weights with it or without it.
        self.reply_policy_conv: nn.Module | None = None  # network.reply_policy_head: the policy head's shape
        self.reply_policy_out: nn.Conv2d | None = None
        if config.reply_policy_head:
            self.reply_policy_conv = _conv_bn(config.filters, config.policy_filters, 3)
            self.reply_policy_out = nn.Conv2d(config.policy_filters, NUM_PLANES, kernel, padding=kernel // 2)
        # After the reply head, for the same reason.
        self.moves_left = MovesLeftHead(config.filters) if config.moves_left_head else None
        # Last, for the same reason: KataGo's auxiliary soft policy head, the policy head's shape.
        self.soft_policy_conv: nn.Module | None = None
        self.soft_policy_out: nn.Conv2d | None = None
        if config.soft_policy_head:
            self.soft_policy_conv = _conv_bn(config.filters, config.policy_filters, 3)
            self.soft_policy_out = nn.Conv2d(config.policy_filters, NUM_PLANES, kernel, padding=kernel // 2)

    def start_action_values_from_policy(self) -> bool:
        """Starts a 'policy'-shaped action-value head from the policy and value heads (a network loaded from
        weights without the head; see alphazero.nn.action_values); False, copying nothing, for any other head."""
        if self.action_value_planes is None or self.action_value_conv is None or self.action_value_level is None:
            return False
        self.action_value_conv.load_state_dict(self.policy_conv.state_dict())
        self.action_value_planes.load_state_dict(self.policy_out.state_dict())
        self.action_value_level.conv.load_state_dict(self.value_conv.state_dict())
        self.action_value_level.fc.load_state_dict(self.value_fc.state_dict())
        start_level_from_value(self.action_value_level.out, self.value_out, self.config.value_head)
        return True

    def forward(self, planes: torch.Tensor, scalars: torch.Tensor, *, action_values: bool = True) -> NetOutput:
        """Evaluates a batch of compact positions (int64 [N, 112], float32 [N, 7]) on the model's device.

        With an action-value head, ``action_values=False`` leaves NetOutput.action_values out (the
        head's features, NetOutput.action_features, come out alone, for the caller to score the moves it needs).

        Raises:
            ValueError: wrong input dtypes or shapes (from planes.expand_torch).
        """
        return self._heads(self._body(planes, scalars), action_values)

    def forward_with_reply(self, planes: torch.Tensor, scalars: torch.Tensor) -> tuple[NetOutput, torch.Tensor]:
        """Evaluates positions as ``forward(..., action_values=False)`` does (training scores the moves it needs),
        plus the reply-policy head's logits [N, 4672] (one pass through the tower).

        Raises:
            ValueError: the network has no reply-policy head (network.reply_policy_head), or wrong inputs.
        """
        out, heads = self.forward_with_training_heads(planes, scalars, reply_policy=True)
        assert heads.reply_policy_logits is not None
        return out, heads.reply_policy_logits

    def forward_with_training_heads(self, planes: torch.Tensor, scalars: torch.Tensor, *, reply_policy: bool = False,
                                    moves_left: bool = False, soft_policy: bool = False
                                    ) -> tuple[NetOutput, TrainingHeads]:
        """Evaluates positions as ``forward(..., action_values=False)`` does, plus the training-only heads asked
        for (one pass through the tower): the reply policy's logits, the plies left, the soft policy's logits.

        Raises:
            ValueError: a head asked for that the network has not, or wrong inputs.
        """
        x = self._body(planes, scalars)
        heads = TrainingHeads(self._reply(x) if reply_policy else None, self._moves_left(x) if moves_left else None,
                              self._soft_policy(x) if soft_policy else None)
        return self._heads(x, False), heads

    def _reply(self, x: torch.Tensor) -> torch.Tensor:
        if self.reply_policy_conv is None or self.reply_policy_out is None:
            raise ValueError("this network has no reply-policy head (network.reply_policy_head = false)")
        return float32_head(self.reply_policy_out, F.relu(self.reply_policy_conv(x))).flatten(1).float()

    def _moves_left(self, x: torch.Tensor) -> torch.Tensor:
        if self.moves_left is None:
            raise ValueError("this network has no moves-left head (network.moves_left_head = false)")
        return self.moves_left(x)

    def _soft_policy(self, x: torch.Tensor) -> torch.Tensor:
        if self.soft_policy_conv is None or self.soft_policy_out is None:
            raise ValueError("this network has no soft policy head (network.soft_policy_head = false)")
        return float32_head(self.soft_policy_out, F.relu(self.soft_policy_conv(x))).flatten(1).float()

    def _body(self, planes: torch.Tensor, scalars: torch.Tensor) -> torch.Tensor:
        """Gets the tower's output [N, filters, 8, 8] for compact positions."""
        x = expand_torch(planes, scalars)
        if self.stem[0].weight.is_contiguous(memory_format=torch.channels_last):  # type: ignore[operator]  # a Conv2d
            x = x.contiguous(memory_format=torch.channels_last)
        return self.tower(F.relu(self.stem(x)))

    def _heads(self, x: torch.Tensor, action_values: bool) -> NetOutput:
        # [N, 73, 8, 8] -> [N, 4672]: index plane*64 + 8*row + col, the move index's layout.
        policy = float32_head(self.policy_out, F.relu(self.policy_conv(x))).flatten(1).float()
        hidden = F.relu(self.value_fc(F.relu(self.value_conv(x)).flatten(1)))
        out = float32_head(self.value_out, hidden).float()
        if self.config.value_head == "wdl":
            probabilities = out.softmax(dim=1)
            result = NetOutput(policy, probabilities[:, 0] - probabilities[:, 2], out)
        else:
            result = NetOutput(policy, torch.tanh(out[:, 0]), None)
        if self.action_value_conv is None:
            return result
        if self.action_value_planes is not None and self.action_value_level is not None:
            # [N, 73, 8, 8] -> [N, 4672] moves' terms, as the policy's logits, plus the position's level
            moves = float32_head(self.action_value_planes, F.relu(self.action_value_conv(x))).flatten(1).float()
            features = self.action_value_level(x) + moves
        else:  # [N, 2E, 8, 8] -> [N, 64, 2E]: square 8 * row + col's from and to features.
            features = self.action_value_conv(x).flatten(2).transpose(1, 2)
        return with_action_values(result, self.action_value, features, action_values)


def build_network(config: NetworkConfig) -> nn.Module:
    """Builds the network ``config.kind`` names: AlphaZeroNet ('resnet') or Chessformer ('chessformer').

    Both take (int64 planes [N, 112], float32 scalars [N, 7]), return a
    NetOutput and keep the config as ``.config``.
    """
    if config.kind == "chessformer":
        return Chessformer(config)
    return AlphaZeroNet(config)


def pick_device(spec: str = "auto") -> torch.device:
    """Gets the torch device for ``spec``: 'auto' (CUDA when present, else CPU), 'cpu', 'cuda' or 'cuda:N'.

    Raises:
        UserError: an unknown spec, or CUDA asked for but not available.
    """
    spec = spec.strip().lower()
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise UserError(f"unknown device {spec!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise UserError(f"unsupported device {spec!r}; use auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise UserError(f"device {spec!r} asked for, but CUDA is not available here (torch {torch.__version__})")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise UserError(f"device {spec!r} asked for, but this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "_orig_mod", model)  # the module inside a torch.compile wrapper


def model_config(model: nn.Module) -> NetworkConfig:
    """Gets the NetworkConfig a model was built from (an AlphaZeroNet or a Chessformer, compiled or not)."""
    config = _unwrap(model).config
    assert isinstance(config, NetworkConfig), f"{type(model).__name__} is not one of this project's networks"
    return config


def clean_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Strips torch.compile's '_orig_mod.' prefix from parameter names, so any model can load them."""
    return {key.removeprefix(_COMPILED_PREFIX): value for key, value in state_dict.items()}


def cpu_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Gets a contiguous CPU copy of the model's weights (safe to save or send to another process)."""
    return {key: value.detach().to("cpu", copy=True).contiguous()
            for key, value in clean_state_dict(_unwrap(model).state_dict()).items()}


def architecture_mismatch(saved: NetworkConfig, expected: NetworkConfig, what: str) -> str | None:
    """Describes how ``saved`` differs from ``expected`` ('checkpoint has network.blocks=20, run config
    says 2'), or returns None when they agree. ``what`` names the saved side."""
    parts = []
    for f in dataclasses.fields(saved):
        old, new = getattr(saved, f.name), getattr(expected, f.name)
        if old != new:
            parts.append(f"{what} has network.{f.name}={old!r}, run config says {new!r}")
    return "; ".join(parts) or None


def check_architecture(saved: NetworkConfig, expected: NetworkConfig, source: str | os.PathLike[str]) -> None:
    """Checks that weights saved for ``saved`` fit a model built from ``expected``.

    Raises:
        UserError: the architectures differ; the message names each field and ``source``.
    """
    mismatch = architecture_mismatch(saved, expected, "checkpoint")
    if mismatch:
        raise UserError(f"{source} does not fit this run's network: {mismatch}")


def load_weights(model: nn.Module, state_dict: dict[str, torch.Tensor], source: str | os.PathLike[str]) -> None:
    """Copies ``state_dict`` into ``model`` in place (keeping its device and memory format).

    Weights without an action-value head (or a reply-policy, moves-left or
    soft policy head) load into a model with one (``train --init`` from a
    network trained before the head, with ``network.action_value_head``,
    ``network.reply_policy_head``, ``network.moves_left_head`` or
    ``network.soft_policy_head`` set):
    everything else loads, the head keeps the weights it was built with (an
    action-value head of the 'policy' shape starts from the policy head's), and
    one warning says so.

    Raises:
        UserError: the weights do not fit the model (names or shapes differ).
    """
    target, state = _unwrap(model), clean_state_dict(state_dict)
    names = set(target.state_dict())
    heads = {prefix: {name for name in names if name.startswith(prefix)}
             for prefix in (ACTION_VALUE_PREFIX, REPLY_POLICY_PREFIX, MOVES_LEFT_PREFIX, SOFT_POLICY_PREFIX)}
    fresh = [prefix for prefix, head in heads.items() if head and not head & set(state)]
    if set().union(*(heads[prefix] for prefix in fresh)) != names - set(state) or not set(state) <= names:
        fresh = []  # something else is missing, or left over: the strict load says what
    try:
        with torch.no_grad():
            target.load_state_dict(state, strict=not fresh)
    except RuntimeError as error:
        differs = names ^ set(state)
        se = " (network.se_ratio differs: squeeze-and-excitation weights on one side only)" \
            if any(".se." in name for name in differs) else ""  # ResidualBlock.se's: tower.K.se.*
        pool = " (network.global_pool_channels differs: global pooling weights on one side only)" \
            if any(".pool" in name for name in differs) else ""  # ResidualBlock's pool_conv and pool
        raise UserError(f"{source}: the weights do not fit the model{se}{pool}: {_load_problem(error)}") from None
    if REPLY_POLICY_PREFIX in fresh:
        log.warning("%s has no reply-policy head: the rest of the network loaded, and its head "
                    "(network.reply_policy_head) starts from fresh weights", source)
    if MOVES_LEFT_PREFIX in fresh:
        log.warning("%s has no moves-left head: the rest of the network loaded, and its head "
                    "(network.moves_left_head) starts from fresh weights", source)
    if SOFT_POLICY_PREFIX in fresh:
        log.warning("%s has no soft policy head: the rest of the network loaded, and its head starts from fresh "
                    "weights", source)
    if ACTION_VALUE_PREFIX in fresh:
        start = getattr(target, "start_action_values_from_policy", None)
        with torch.no_grad():
            from_policy = bool(start is not None and start())
        log.warning("%s has no action-value head: the rest of the network loaded, and its %r head "
                    "(network.action_value_head) starts from %s", source, model_config(target).action_value_head,
                    "a copy of the policy head" if from_policy else "fresh weights")


def _load_problem(error: RuntimeError) -> str:
    """Gets the first thing load_state_dict found wrong, shortened (its message's first line names only the model)."""
    lines = [line.strip() for line in str(error).strip().splitlines()]
    return textwrap.shorten(lines[1] if len(lines) > 1 else lines[0], 240, placeholder=" ...")


def fold_batch_norm(model: nn.Module) -> nn.Module:
    """Gets an inference copy of ``model`` (eval mode) with each conv-BN pair folded into one convolution.

    Every nn.Sequential of exactly a Conv2d and a BatchNorm2d (the resnet's
    conv-BN blocks) becomes a Sequential of one Conv2d with a bias, whose
    weights are W * gamma / sqrt(var + eps) and bias beta + (b - mean) * gamma
    / sqrt(var + eps) (torch.nn.utils.fusion.fuse_conv_bn_eval): the batch
    norm's per-channel affine map, done once instead of on every pass. The
    outputs agree up to float rounding (about 1e-4 in the logits). Other
    models (a Chessformer) come back as a plain copy.
    """
    import copy

    from torch.nn.utils.fusion import fuse_conv_bn_eval

    folded = copy.deepcopy(model).eval()
    for module in list(folded.modules()):
        for name, child in list(module.named_children()):
            layers = list(child.children()) if isinstance(child, nn.Sequential) else []
            if len(layers) == 2 and isinstance(layers[0], nn.Conv2d) and isinstance(layers[1], nn.BatchNorm2d):
                setattr(module, name, nn.Sequential(fuse_conv_bn_eval(layers[0], layers[1])))
    return folded


def count_parameters(model: nn.Module) -> int:
    """Counts the model's trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "AlphaZeroNet", "MovesLeftHead", "NetOutput", "build_network", "check_architecture",
    "count_parameters", "cpu_state_dict", "fold_batch_norm", "load_weights", "model_config", "pick_device",
]
