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
    legal, values = evaluator.evaluate_legal(planes, scalars, legal_indices, legal_counts)   # what search reads
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import random
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from alphazero.config import NetworkConfig
from alphazero.errors import UserError
from alphazero.forward import FORWARD_MODES, BucketedForward, RunnerMaker, capture_graph, compile_per_bucket
from alphazero.parity import ParityErrors, ParitySettings, compare_legal
from alphazero.planes import INPUT_PLANES, check_compact_numpy, compact_to_torch, expand_torch

POLICY_PLANES = 73  # 56 queen-like + 8 knight + 9 under-promotion move planes
POLICY_SIZE = POLICY_PLANES * 64  # 4672 move indices
_COMPILED_PREFIX = "_orig_mod."  # torch.compile's wrapper prefixes parameter names with this
_T = TypeVar("_T")

log = logging.getLogger(__name__)


class NetOutput(NamedTuple):
    """What the network returns for a batch of N positions."""

    policy_logits: torch.Tensor  # float32 [N, 4672], unmasked
    value: torch.Tensor  # float32 [N] in [-1, 1]
    wdl_logits: torch.Tensor | None  # float32 [N, 3] (win, draw, loss), or None for a scalar head


def float32_head(layer: Callable[[torch.Tensor], _T], x: torch.Tensor) -> _T:
    """Runs a head's last layer (a module or a function of one tensor) in float32, whatever autocast says.

    Its outputs are what the search reads: under bf16 autocast they would keep
    8 bits of mantissa, so priors would be rounded before the legal moves'
    logits are gathered. Without autocast (the CPU) it is just ``layer(x)``.
    """
    if not torch.is_autocast_enabled(x.device.type):
        return layer(x)
    with torch.autocast(device_type=x.device.type, enabled=False):
        return layer(x.float())


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
        policy = float32_head(self.policy_out, F.relu(self.policy_conv(x))).flatten(1).float()
        hidden = F.relu(self.value_fc(F.relu(self.value_conv(x)).flatten(1)))
        out = float32_head(self.value_out, hidden).float()
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


class PendingOutput:
    """One batch's legal-move logits and values on their way to the host (Evaluator.submit_legal).

    wait() returns (legal_logits float32 [B, W], values float32 [B]) as numpy
    views of the evaluator's buffers for the batch's lane: they stay valid
    until the next batch of that lane is submitted.
    """

    def __init__(self, evaluator: Evaluator, host: _HostOutput, rows: int, width: int,
                 events: tuple[Any, Any] | None, *, timed: bool = False) -> None:
        self._evaluator = evaluator
        self._host = host
        self._rows = rows
        self._width = width
        self._events = events
        self._timed = timed  # the events bracket the device's work on this pass alone (no capture, no check)
        self._result: tuple[np.ndarray, np.ndarray] | None = None

    def wait(self) -> tuple[np.ndarray, np.ndarray]:
        """Waits for the batch (the pass's one synchronisation on CUDA, a blocking one) and returns its results.

        Raises:
            ValueError: a legal index outside [0, 4672) among a row's first legal_counts[b].
        """
        if self._result is None:
            if self._events is not None:
                start, end = self._events
                end.synchronize()
                if self._timed:
                    self._evaluator.gpu_seconds += start.elapsed_time(end) / 1000
            logits, values, flag = self._host.numpy(self._rows, self._width)
            if flag[0]:
                raise ValueError(f"legal move indices must lie in [0, {POLICY_SIZE}), got one outside")
            self._result = (logits, values)
        return self._result


def _pass_events(device: torch.device) -> tuple[Any, Any] | None:
    """Gets a lane's pair of CUDA events (None off CUDA): they time its passes, and wait() waits on the second.

    Blocking: a thread that waits on them sleeps until the GPU is done, where
    the default spins a CPU core (one per actor) for the whole pass.
    """
    if device.type != "cuda":
        return None
    return (torch.cuda.Event(enable_timing=True, blocking=True),
            torch.cuda.Event(enable_timing=True, blocking=True))


class _HostOutput:
    """Preallocated host memory (pinned on CUDA) for one lane's legal logits, values and error flag."""

    def __init__(self, pin: bool) -> None:
        self.pin = pin
        self.logits = torch.empty(0, dtype=torch.float32)
        self.values = torch.empty(0, dtype=torch.float32)
        self.flag = torch.zeros(1, dtype=torch.bool, pin_memory=pin)

    def tensors(self, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Views for a batch of rows x width, growing the buffers (doubling) when they are too small."""
        if self.logits.numel() < rows * width:
            self.logits = torch.empty(max(rows * width, 2 * self.logits.numel()), dtype=torch.float32,
                                      pin_memory=self.pin)
        if self.values.numel() < rows:
            self.values = torch.empty(max(rows, 2 * self.values.numel()), dtype=torch.float32, pin_memory=self.pin)
        return self.logits[:rows * width].view(rows, width), self.values[:rows], self.flag

    def numpy(self, rows: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        logits, values, flag = self.tensors(rows, width)
        return logits.numpy(), values.numpy(), flag.numpy()


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """Moves a numpy array to ``device``; asynchronously when it lies in pinned memory (see compact_to_torch)."""
    if not array.flags.c_contiguous or not array.flags.writeable:
        array = np.array(array, order="C")  # torch.from_numpy needs writeable, contiguous memory
    tensor = torch.from_numpy(array)
    return tensor.to(device, non_blocking=device.type == "cuda" and tensor.is_pinned())


def _check_legal(legal_indices: np.ndarray, legal_counts: np.ndarray, rows: int) -> None:
    if not isinstance(legal_indices, np.ndarray) or not isinstance(legal_counts, np.ndarray):
        raise ValueError("legal_indices and legal_counts must be numpy arrays")
    if legal_indices.dtype != np.int32 or legal_counts.dtype != np.int32:
        raise ValueError(f"legal_indices and legal_counts must be int32, got {legal_indices.dtype} "
                         f"and {legal_counts.dtype}")
    if legal_indices.ndim != 2 or legal_indices.shape[0] < rows or legal_counts.ndim != 1 \
            or legal_counts.shape[0] < rows:
        raise ValueError(f"legal_indices must be [>={rows}, W] and legal_counts [>={rows}], got "
                         f"{legal_indices.shape} and {legal_counts.shape}")
    counts = legal_counts[:rows]
    if rows and (counts.min() < 0 or counts.max() > legal_indices.shape[1]):
        raise ValueError(f"legal_counts must lie in [0, {legal_indices.shape[1]}] (the width of legal_indices), "
                         f"got {counts.min()}..{counts.max()}")


def _legal_shape(planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                 legal_counts: np.ndarray) -> tuple[int, int]:
    """Checks a legal pass's inputs; returns its rows and result width (the largest count, at least 1)."""
    check_compact_numpy(planes, scalars)
    rows = planes.shape[0]
    _check_legal(legal_indices, legal_counts, rows)
    return rows, max(int(legal_counts[:rows].max()), 1) if rows else 1


def gather_legal(policy_logits: torch.Tensor, legal_indices: torch.Tensor,
                 legal_counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gathers each row's legal moves' logits: out[b, i] = policy_logits[b, legal_indices[b, i]].

    Columns at and beyond legal_counts[b] are padding: whatever they hold,
    they read index 0, so the search (which reads only the first
    legal_counts[b] columns) never sees them. Works on any device without a
    synchronisation: an index outside [0, 4672) among the real columns reads
    index 0 too and raises the returned flag (a bool tensor) instead of
    faulting on the GPU.

    Returns:
        (float32 [B, W] legal logits, bool [] flag of a bad index).
    """
    width = legal_indices.shape[1]
    real = torch.arange(width, device=legal_indices.device) < legal_counts[:, None].to(torch.int64)
    valid = (legal_indices >= 0) & (legal_indices < policy_logits.shape[1])
    safe = torch.where(real & valid, legal_indices, 0).to(torch.int64)
    return policy_logits.gather(1, safe), (real & ~valid).any()


def gather_legal_numpy(policy_logits: np.ndarray, legal_indices: np.ndarray, legal_counts: np.ndarray,
                       out: np.ndarray) -> bool:
    """gather_legal on the host: fills ``out`` [B, W]; returns the flag of a bad index (out is then unspecified)."""
    width = out.shape[1]
    real = np.arange(width) < legal_counts[:, None]
    safe = np.where(real, legal_indices[:, :width], 0)
    if safe.min() < 0 or safe.max() >= policy_logits.shape[1]:
        return True
    out[...] = np.take_along_axis(policy_logits, safe, axis=1)
    return False


class Evaluator:
    """Runs a model for search: numpy in, float32 numpy out, no gradients.

    The model itself is moved to ``device`` (default: where its weights are),
    put in eval mode and, on CUDA, into channels_last memory format; it then
    runs under bf16 autocast (``bf16=False`` turns that off; the heads' last
    layers stay float32) and outputs are float32. ``compile=True`` wraps the
    model in torch.compile; the first batches of each new size are then slow.

    ``forward`` picks how a CUDA pass runs (alphazero.forward.FORWARD_MODES):
    'eager', 'graphs' (a CUDA graph per batch-size bucket) or 'compile'
    (torch.compile(mode='reduce-overhead') per bucket); ``max_batch`` is the
    largest batch the caller sends (a bucket of its own, and with it the
    buckets warm_up() makes at start). On the CPU both are ignored: the pass
    is eager, as there is no launch overhead to save. ``runner_maker``
    replaces the mode's own way to make a bucket's pass (a fake fast pass:
    tests reach the fast path's code on the CPU with it).

    A fast pass (bf16, graphs or compiled) checks itself against float32
    eager on the same batch (alphazero.parity; ``parity`` says when): on a
    mismatch it logs one warning with the largest errors, hands the search
    eager's results for that batch, and runs plainer from then on (graphs or
    compile -> eager; bf16 eager -> float32). ``fallbacks`` lists those
    warnings, ``bucket_failures`` the buckets whose capture or compilation failed.

    Two ways in: evaluate() returns all 4672 logits per position;
    submit_legal() / evaluate_legal() return only the legal moves' logits,
    gathered on the device, in preallocated (on CUDA pinned) host buffers, with
    one synchronisation per pass; that is what the search reads
    (MultiGameSearch.backup_legal). ``gpu_seconds`` sums the GPU time of the
    legal passes (CUDA events from the forward pass to the copy to the host;
    passes that captured, compiled or were checked are left out; 0 on the CPU).

    Example::

        evaluator = Evaluator(model, pick_device("auto"))
        logits, values = evaluator.evaluate(planes, scalars)   # [B, 4672], [B]
        legal, values = evaluator.evaluate_legal(planes, scalars, legal_indices, legal_counts)   # [B, W], [B]

    Raises:
        ValueError: an unknown forward mode.
    """

    def __init__(self, model: AlphaZeroNet, device: torch.device | str | None = None, *,
                 compile: bool = False, bf16: bool = True, forward: str = "eager",
                 max_batch: int | None = None, parity: ParitySettings | None = None,
                 runner_maker: RunnerMaker | None = None) -> None:
        if forward not in FORWARD_MODES:
            raise ValueError(f"forward must be one of {', '.join(FORWARD_MODES)}, got {forward!r}")
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.model = model.to(self.device).eval()
        self.use_cuda = self.device.type == "cuda"
        if self.use_cuda:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.autocast = bf16 and self.use_cuda
        self._eager: Any = torch.compile(self.model) if compile else self.model
        self._forward: Any = self._eager
        self.forward_mode = forward if self.use_cuda or runner_maker is not None else "eager"
        self._bucketed: BucketedForward | None = None
        if self.forward_mode != "eager":
            self._bucketed = BucketedForward(self.model, self.device, mode=self.forward_mode, max_batch=max_batch,
                                             make=runner_maker or self._runner_maker(self.forward_mode))
            self._forward = self._bucketed
        self.parity = parity or ParitySettings()
        self._check_passes = self._fast()
        self._checked: set[int] = set()  # buckets (0: an unbucketed pass) checked since the last weight update
        self._parity_draw = random.Random(0)  # which of the other passes are checked
        self.fallbacks: list[str] = []
        self._lanes: dict[int, tuple[_HostOutput, tuple[Any, Any] | None]] = {}
        self.gpu_seconds = 0.0
        self.folded = False  # passes run through fold_batch_norm(model) (see fold_batch_norm())

    @property
    def config(self) -> NetworkConfig:
        return self.model.config

    @property
    def bucket_failures(self) -> dict[int, str]:
        """Buckets whose capture or compilation failed (they run eager), with the error."""
        return dict(self._bucketed.failures) if self._bucketed is not None else {}

    def describe_pass(self) -> str:
        """Gets how a pass runs now: 'graphs, bf16', 'eager, float32', ..."""
        return f"{self.forward_mode}, {'bf16' if self.autocast else 'float32'}"

    def _runner_maker(self, mode: str) -> RunnerMaker:
        if mode == "graphs":
            return functools.partial(capture_graph, self.model)
        return compile_per_bucket(self.model)

    def _fast(self) -> bool:
        """Whether a pass differs from float32 eager, so that the parity check applies."""
        return self.parity.mode != "off" and (self.forward_mode != "eager" or self.autocast)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.autocast:
            # No weight-cast cache: a CUDA graph must redo the casts it captured on every replay.
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16, cache_enabled=False)
        return contextlib.nullcontext()

    def warm_up(self) -> None:
        """Captures or compiles the fast pass's start buckets now (alphazero.forward.start_buckets), so that
        none stalls a pass later; a bucket that fails runs eager (one warning). Nothing on an eager pass."""
        if self._bucketed is not None and self._forward is self._bucketed:
            with torch.inference_mode(), self._autocast():
                self._bucketed.warm()

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

    def pin(self, arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """Gets zeroed arrays shaped like ``arrays`` in pinned host memory on CUDA (the arrays themselves on the CPU).

        A batch gathered straight into pinned memory goes to the GPU
        asynchronously, without a staging copy: give the search
        ``evaluator.pin(search.new_batch())``.
        """
        if not self.use_cuda:
            return arrays
        pinned = []
        for array in arrays:
            memory = torch.zeros(array.nbytes, dtype=torch.uint8, pin_memory=True)
            pinned.append(memory.numpy().view(array.dtype).reshape(array.shape))
        return tuple(pinned)

    def submit_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                     legal_counts: np.ndarray, *, lane: int = 0) -> PendingOutput:
        """Starts evaluating B positions; returns their legal moves' logits and values when waited for.

        legal_indices int32 [>=B, >=W] and legal_counts int32 [>=B] are the
        search's gather() arrays: row b's first legal_counts[b] entries are
        its legal moves' policy indices (the rest are ignored). The result's
        width W is the largest count. On CUDA the pass only gets queued, so
        the caller can search meanwhile (a pass the parity check takes is
        waited for here); batches of different ``lane``s may be in flight
        together (each lane has its own output buffers), a lane's next batch
        may only be submitted after its last one was waited for.

        Raises:
            ValueError: wrong dtypes or shapes, or counts beyond legal_indices' width.
        """
        rows, width = _legal_shape(planes, scalars, legal_indices, legal_counts)
        host, events = self._lane(lane)
        if rows == 0:
            host.flag.zero_()
            return PendingOutput(self, host, rows, width, None)
        made = self._bucketed.made if self._bucketed is not None else 0
        check = self._parity_key(rows) if self._check_passes else None
        with torch.inference_mode(), self._autocast():
            self._run_legal(planes, scalars, legal_indices, legal_counts, host.tensors(rows, width),
                            _stage_events(events))
        if check is not None:
            self._check_parity(check, (planes, scalars, legal_indices, legal_counts), host, rows, width, events)
        timed = check is None and (self._bucketed.made if self._bucketed is not None else 0) == made
        return PendingOutput(self, host, rows, width, events, timed=timed)

    def _run_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                   legal_counts: np.ndarray, outputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                   stage_done: Callable[[str], None]) -> None:
        """Queues one legal pass into ``outputs`` (logits, values, flag host views); stage_done(name) after each stage."""
        logits_out, values_out, flag_out = outputs
        rows, width = logits_out.shape
        planes_t, scalars_t = compact_to_torch(planes, scalars, self.device)
        if self.use_cuda:
            indices_t = _to_device(legal_indices[:rows], self.device)
            counts_t = _to_device(legal_counts[:rows], self.device)
        stage_done("input")
        out = self._forward(planes_t, scalars_t)
        stage_done("forward")
        if self.use_cuda:
            legal, bad = gather_legal(out.policy_logits, indices_t[:, :width], counts_t)
            logits_out.copy_(legal, non_blocking=True)
            flag_out.copy_(bad, non_blocking=True)
        else:
            # The logits are host memory already: numpy gathers them with less overhead than torch's small ops.
            flag_out[0] = gather_legal_numpy(out.policy_logits.numpy(), legal_indices[:rows], legal_counts[:rows],
                                             logits_out.numpy())
        values_out.copy_(out.value, non_blocking=True)
        stage_done("output")

    # -- the parity check -----------------------------------------------------------

    def _parity_key(self, rows: int) -> int | None:
        """Gets the bucket to note when this pass is to be checked (0 for an unbucketed pass), else None."""
        key = 0
        if self._bucketed is not None and self._forward is self._bucketed:
            key = self._bucketed.bucket_of(rows)
        if self.parity.mode == "always" or key not in self._checked \
                or self._parity_draw.random() < self.parity.share:
            return key
        return None

    def _check_parity(self, key: int, batch: tuple[np.ndarray, ...], host: _HostOutput, rows: int, width: int,
                      events: tuple[Any, Any] | None) -> None:
        """Compares the pass just queued with float32 eager; on a mismatch puts eager's results in its place
        and falls back (one warning)."""
        if events is not None:
            events[1].synchronize()
        logits, values, flag = host.numpy(rows, width)
        if flag[0]:
            return  # a bad legal index: wait() raises
        ref_logits, ref_values = self.reference_legal(*batch, rows=rows, width=width)
        errors = compare_legal(logits, values, ref_logits, ref_values, batch[3][:rows], self.parity)
        self._checked.add(key)
        if not errors.ok:
            logits[...], values[...] = ref_logits, ref_values  # what reaches the search: the eager results
            self._fall_back(errors, rows)

    def reference_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                        legal_counts: np.ndarray, *, rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Gets plain float32 eager's legal logits [rows, width] and values [rows] (new numpy arrays) for the
        first ``rows`` positions: what the parity check compares a pass with."""
        planes_t, scalars_t = compact_to_torch(planes[:rows], scalars[:rows], self.device)
        indices_t = _to_device(legal_indices[:rows, :width], self.device)
        counts_t = _to_device(legal_counts[:rows], self.device)
        with torch.inference_mode():
            out = self.model(planes_t, scalars_t)
            legal, _ = gather_legal(out.policy_logits.float(), indices_t, counts_t)
            return legal.cpu().numpy(), out.value.float().cpu().numpy()

    def _fall_back(self, errors: ParityErrors, rows: int) -> None:
        """Steps to a plainer pass after a mismatch (graphs or compile -> eager; bf16 -> float32), with one warning."""
        before = self.describe_pass()
        if self.forward_mode != "eager":
            self.forward_mode, self._forward = "eager", self._eager
        else:
            self.autocast = False
        self._check_passes = self._fast()
        self._checked.clear()
        line = (f"the forward pass ({before}) differs from float32 eager on a batch of {rows}: {errors.describe()} "
                f"(tolerance {self.parity.atol:g} + {self.parity.rtol:g} x |eager|, selfplay.parity_atol and "
                f"parity_rtol); running {self.describe_pass()} from now on")
        log.warning(line)
        self.fallbacks.append(line)

    # -- lanes, profiles, weights ---------------------------------------------------------

    def evaluate_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                       legal_counts: np.ndarray, *, lane: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Evaluates B positions now: (legal logits float32 [B, W], values float32 [B]) (see submit_legal).

        The arrays are views of the lane's buffers, valid until its next call.

        Raises:
            ValueError: as submit_legal and PendingOutput.wait.
        """
        return self.submit_legal(planes, scalars, legal_indices, legal_counts, lane=lane).wait()

    def _lane(self, lane: int) -> tuple[_HostOutput, tuple[Any, Any] | None]:
        entry = self._lanes.get(lane)
        if entry is None:
            entry = (_HostOutput(pin=self.use_cuda), _pass_events(self.device))
            self._lanes[lane] = entry
        return entry

    def profile_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                      legal_counts: np.ndarray) -> dict[str, float]:
        """Times one evaluate_legal pass stage by stage: seconds of 'input', 'forward' and 'output'.

        input: the compact batch and its legal indices to the device;
        forward: the network (input expansion included); output: the legal
        logits' gather and the copy to the host. Each stage is waited for
        before the next starts, so the sum exceeds a real pass, where they overlap.

        Raises:
            ValueError: as submit_legal, or an empty batch.
        """
        rows, width = _legal_shape(planes, scalars, legal_indices, legal_counts)
        if rows == 0:
            raise ValueError("profile_legal needs at least one position")
        host, _ = self._lane(-1)
        sync = torch.cuda.synchronize if self.use_cuda else (lambda: None)
        times: dict[str, float] = {}
        tick = [time.perf_counter()]

        def stage_done(name: str) -> None:
            sync()
            now = time.perf_counter()
            times[name], tick[0] = now - tick[0], now

        with torch.inference_mode(), self._autocast():
            sync()
            tick[0] = time.perf_counter()
            self._run_legal(planes, scalars, legal_indices, legal_counts, host.tensors(rows, width), stage_done)
        return times

    def fold_batch_norm(self) -> bool:
        """Runs the passes through a copy of the model with each conv-BN pair folded into one convolution
        (module function fold_batch_norm): fewer ops a pass, about 9% less time at batch 32 for the small
        preset on a CPU. For an evaluator whose weights change only through set_weights (which folds
        again), such as the UCI engine's: weights loaded into ``model`` directly are not seen.

        Returns whether it folded: only on the CPU, eager and not compiled.
        """
        if self.use_cuda or self._forward is not self.model:
            return False
        self._forward = fold_batch_norm(self.model)
        self.folded = True
        return True

    def set_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Replaces the model's weights in place (no rebuild, no recompile, captured graphs stay valid); the
        next pass of each bucket is checked again (the parity check).

        Raises:
            UserError: the weights do not fit the model.
        """
        load_weights(self.model, state_dict, "new weights")
        self._checked.clear()
        if self.folded:
            self._forward = fold_batch_norm(self.model)

    load_state_dict = set_weights


def _ignore_stage(name: str) -> None:
    """A stage_done that does nothing (the CPU's passes)."""


def _stage_events(events: tuple[Any, Any] | None) -> Callable[[str], None]:
    """Gets a stage_done that records the lane's events: the first once the inputs are queued (so the set-up
    on the host is not timed), the second after the copy to the host."""
    if events is None:
        return _ignore_stage
    start, end = events

    def stage_done(name: str) -> None:
        if name == "input":
            start.record()
        elif name == "output":
            end.record()

    return stage_done


def count_parameters(model: nn.Module) -> int:
    """Counts the model's trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "POLICY_PLANES", "POLICY_SIZE", "AlphaZeroNet", "Evaluator", "NetOutput", "PendingOutput", "build_network",
    "fold_batch_norm",
    "gather_legal",
    "check_architecture", "count_parameters", "cpu_state_dict", "load_weights", "pick_device",
]
