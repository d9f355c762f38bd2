"""AlphaZero's residual network in PyTorch, its inference wrapper and its model files.

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
import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from alphazero.config import NetworkConfig, network_config_from_dict
from alphazero.errors import UserError
from alphazero.planes import INPUT_PLANES, check_compact_numpy, compact_to_torch, expand_torch
from alphazero.rundir import atomic_write_bytes

POLICY_PLANES = 73  # 56 queen-like + 8 knight + 9 under-promotion move planes
POLICY_SIZE = POLICY_PLANES * 64  # 4672 move indices
MODEL_FORMAT = "alphazero-model"  # the "format" entry of files written by save_model
FORMAT_VERSION = 1
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


def build_network(config: NetworkConfig) -> nn.Module:
    """Builds the network ``config.kind`` names: AlphaZeroNet ('resnet') or Chessformer ('chessformer').

    Both take (int64 planes [N, 112], float32 scalars [N, 7]), return a
    NetOutput and keep the config as ``.config``.
    """
    if config.kind == "chessformer":
        from alphazero.chessformer import Chessformer  # it imports this module (NetOutput)

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


def _first_useful_line(error: BaseException) -> str:
    # torch's weights-only refusal opens with paragraphs of advice; the line
    # naming the refused object is the one that tells what the file holds.
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if "Unsupported global" in line or "Unsupported operand" in line:
            return line.split(" Please use")[0]
    return lines[0] if lines else type(error).__name__


def read_payload(path: str | os.PathLike[str], map_location: torch.device | str = "cpu",
                 *, mmap: bool = False) -> dict[str, Any]:
    """Reads a model or checkpoint file into a dict (weights only: no code is run).

    Raises:
        UserError: the file is missing, unreadable, truncated or not a torch file.
    """
    path = Path(path)
    try:
        # torch.save writes a zip archive; a truncated one has lost its central
        # directory at the end, so this also catches files cut short.
        if path.is_dir():
            raise IsADirectoryError(path)
        if not zipfile.is_zipfile(path):
            size = path.stat().st_size
            raise UserError(f"{path} is corrupt or not a checkpoint: not a complete torch archive ({size} bytes)")
        payload = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a directory, not a checkpoint") from None
    except PermissionError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    except (RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, OSError,
            KeyError, AttributeError, TypeError, IndexError) as error:
        raise UserError(f"{path} is corrupt or not a checkpoint: {_first_useful_line(error)}") from None
    if not isinstance(payload, dict) or "network" not in payload or "model" not in payload:
        raise UserError(f"{path} is corrupt or not a checkpoint: it holds no network config and weights")
    return payload


def network_config_of(payload: dict[str, Any], source: str | os.PathLike[str]) -> NetworkConfig:
    """Gets the NetworkConfig saved in a model or checkpoint payload.

    Raises:
        UserError: the saved network config is invalid.
    """
    try:
        return network_config_from_dict(payload["network"])
    except UserError as error:
        raise UserError(f"{source} is corrupt or not a checkpoint: {error}") from None


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


def save_model(path: str | os.PathLike[str], model: AlphaZeroNet, **extra: Any) -> None:
    """Saves the model's weights and NetworkConfig (plus ``extra`` entries) to ``path`` atomically.

    ``extra`` values must be plain data (numbers, strings, lists, dicts, tensors)
    so that the file loads with torch.load(weights_only=True).

    Raises:
        OSError: the folder is missing or unwritable.
    """
    payload = {
        "format": MODEL_FORMAT,
        "version": FORMAT_VERSION,
        "network": dataclasses.asdict(_unwrap(model).config),
        "model": cpu_state_dict(model),
        "extra": extra,
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_model(
    path: str | os.PathLike[str], device: torch.device | str = "cpu", *, expected: NetworkConfig | None = None
) -> tuple[nn.Module, dict[str, Any]]:
    """Loads a model file (save_model) or a learner checkpoint into a new network (build_network) in eval mode.

    Returns the model on ``device`` and the file's other entries: ``extra`` of a
    model file, or the checkpoint's metadata (step, config_toml, ...) without
    weights and optimizer state.

    Raises:
        UserError: the file is missing or corrupt, or its architecture differs
            from ``expected`` (the message names each differing field).
    """
    payload = read_payload(path)
    network = network_config_of(payload, path)
    if expected is not None:
        check_architecture(network, expected, path)
    model = build_network(network)
    load_weights(model, payload["model"], path)
    model.to(device).eval()
    if payload.get("format") == MODEL_FORMAT:
        extra = dict(payload.get("extra") or {})
    else:
        extra = {k: v for k, v in payload.items() if k not in ("model", "optimizer", "rng")}
    return model, extra


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
    "POLICY_PLANES", "POLICY_SIZE", "AlphaZeroNet", "Evaluator", "NetOutput", "build_network",
    "check_architecture", "count_parameters", "cpu_state_dict", "load_model", "load_weights", "pick_device",
    "read_payload", "save_model",
]
