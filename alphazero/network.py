"""AlphaZero's residual network in PyTorch and its inference wrapper (files: alphazero.checkpoint).

The network takes the compact input (int64 bitboards [N, 112] and float32 raw
scalars [N, 7]) and expands it on its own device as its first step, so only
~1 KB per position crosses to a GPU. Outputs, always from the side to move:

- ``policy_logits`` [N, 4672]: index = plane * 64 + square, square = 8 * row + col
  of the oriented board (see .notes/SPEC.md for the 73 move planes).
- ``value`` [N] in [-1, 1]: the expected outcome.
- ``wdl_logits`` [N, 3] (win, draw, loss) when the value head is 'wdl', else None;
  then value = P(win) - P(loss).

Example::

    model = AlphaZeroNet(get_preset("tiny").network)
    evaluator = Evaluator(model, pick_device("auto"))
    logits, values = evaluator.evaluate(planes, scalars)   # numpy in, float32 numpy out
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from alphazero.config import NetworkConfig
from alphazero.errors import UserError
from alphazero.planes import INPUT_PLANES, check_compact_numpy, compact_to_torch, expand_torch

POLICY_PLANES = 73  # 56 queen-like + 8 knight + 9 under-promotion move planes
POLICY_SIZE = POLICY_PLANES * 64  # 4672 move indices
_COMPILED_PREFIX = "_orig_mod."  # torch.compile's wrapper prefixes parameter names with this


class NetOutput(NamedTuple):
    """What the network returns for a batch of N positions."""

    policy_logits: torch.Tensor  # float32 [N, 4672], unmasked
    value: torch.Tensor  # float32 [N] in [-1, 1]
    wdl_logits: torch.Tensor | None  # float32 [N, 3] (win, draw, loss), or None for a scalar head


def _conv_bn(in_channels: int, out_channels: int, kernel: int) -> nn.Sequential:
    # No conv bias: the batch norm's shift does its work.
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(out_channels),
    )


class ResidualBlock(nn.Module):
    """conv-BN-ReLU-conv-BN, plus the input, then ReLU."""

    def __init__(self, filters: int) -> None:
        super().__init__()
        self.first = _conv_bn(filters, filters, 3)
        self.second = _conv_bn(filters, filters, 3)
        # Zero the last batch norm's scale so every block starts as the identity;
        # deep towers train faster from there (Goyal et al., 2017).
        nn.init.zeros_(self.second[1].weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.first(x))
        return F.relu(x + self.second(y))


class AlphaZeroNet(nn.Module):
    """AlphaZero's residual tower with a convolutional policy head and a value head.

    Args:
        config: the architecture; kept as ``self.config`` and saved with the weights.
    """

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        self.config = config
        self.stem = _conv_bn(INPUT_PLANES, config.filters, 3)
        self.tower = nn.Sequential(*(ResidualBlock(config.filters) for _ in range(config.blocks)))
        self.policy_conv = _conv_bn(config.filters, config.policy_filters, 3)
        kernel = config.policy_kernel
        self.policy_out = nn.Conv2d(config.policy_filters, POLICY_PLANES, kernel, padding=kernel // 2)
        self.value_conv = _conv_bn(config.filters, config.value_filters, 1)
        self.value_fc = nn.Linear(config.value_filters * 64, config.value_hidden)
        self.value_out = nn.Linear(config.value_hidden, 3 if config.value_head == "wdl" else 1)

    def forward(self, planes: torch.Tensor, scalars: torch.Tensor) -> NetOutput:
        """Evaluates a batch of compact positions (int64 [N, 112], float32 [N, 7]) on the model's device.

        Raises:
            ValueError: wrong input dtypes or shapes (from planes.expand_torch).
        """
        x = expand_torch(planes, scalars)
        if self.stem[0].weight.is_contiguous(memory_format=torch.channels_last):
            x = x.contiguous(memory_format=torch.channels_last)
        x = self.tower(F.relu(self.stem(x)))
        # [N, 73, 8, 8] -> [N, 4672]: index plane*64 + 8*row + col, the move index's layout.
        policy = self.policy_out(F.relu(self.policy_conv(x))).flatten(1).float()
        hidden = F.relu(self.value_fc(F.relu(self.value_conv(x)).flatten(1)))
        out = self.value_out(hidden).float()
        if self.config.value_head == "wdl":
            probabilities = out.softmax(dim=1)
            return NetOutput(policy, probabilities[:, 0] - probabilities[:, 2], out)
        return NetOutput(policy, torch.tanh(out[:, 0]), None)


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

    Raises:
        UserError: the weights do not fit the model (names or shapes differ).
    """
    try:
        with torch.no_grad():
            _unwrap(model).load_state_dict(clean_state_dict(state_dict))
    except RuntimeError as error:
        first_line = str(error).strip().splitlines()[0]
        raise UserError(f"{source}: the weights do not fit the model: {first_line}") from None


class Evaluator:
    """Runs a model for search: numpy in, float32 numpy out, no gradients.

    The model itself is moved to ``device`` (default: where its weights are),
    put in eval mode and, on CUDA, into channels_last memory format; it then
    runs under bf16 autocast (``bf16=False`` turns that off) and outputs are cast
    back to float32. ``compile=True`` wraps the model in torch.compile; the first
    batches of each new size are then slow.

    Example::

        evaluator = Evaluator(model, pick_device("auto"))
        logits, values = evaluator.evaluate(planes, scalars)   # [B, 4672], [B]
    """

    def __init__(self, model: AlphaZeroNet, device: torch.device | str | None = None, *,
                 compile: bool = False, bf16: bool = True) -> None:
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.model = model.to(self.device).eval()
        self.use_cuda = self.device.type == "cuda"
        if self.use_cuda:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.autocast = bf16 and self.use_cuda
        self._forward: nn.Module = torch.compile(self.model) if compile else self.model  # type: ignore[assignment]

    @property
    def config(self) -> NetworkConfig:
        return self.model.config

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.autocast:
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def evaluate(self, planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Evaluates B compact positions: uint64 [B, 112] and float32 [B, 7].

        Returns:
            (policy_logits float32 [B, 4672], values float32 [B]), both numpy.

        Raises:
            ValueError: wrong dtypes or shapes.
        """
        check_compact_numpy(planes, scalars)
        if planes.shape[0] == 0:
            return np.zeros((0, POLICY_SIZE), np.float32), np.zeros((0,), np.float32)
        planes_t, scalars_t = compact_to_torch(planes, scalars, self.device)
        with torch.inference_mode(), self._autocast():
            out = self._forward(planes_t, scalars_t)
        logits = out.policy_logits.float().cpu().numpy()
        values = out.value.float().cpu().numpy()
        return logits, values

    def set_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Replaces the model's weights in place (no rebuild, no recompile).

        Raises:
            UserError: the weights do not fit the model.
        """
        load_weights(self.model, state_dict, "new weights")

    load_state_dict = set_weights


def count_parameters(model: nn.Module) -> int:
    """Counts the model's trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "POLICY_PLANES", "POLICY_SIZE", "AlphaZeroNet", "Evaluator", "NetOutput",
    "check_architecture", "count_parameters", "cpu_state_dict", "load_weights", "pick_device",
]
