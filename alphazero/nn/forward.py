"""The Evaluator, which runs the network for the search: numpy in, float32 numpy out.

It gives all 4672 logits or only the legal moves' (what the search reads,
gathered by alphazero.nn.legal), under bf16 or float16 autocast on a GPU
(alphazero.nn.precision), checking its fast passes against float32 eager
(alphazero.nn.parity). Every pass runs with its model's device current
(alphazero.nn.cuda_device): CUDA graphs, events and synchronisations follow
the current device, which on a machine of several GPUs need not be the
model's. A pass runs eager,
or padded to a batch-size bucket (alphazero.nn.buckets, which describes the
forward modes) whose pass is a CUDA graph's replay (alphazero.nn.cuda_graphs)
or compiled code (alphazero.nn.compiled). The legal moves' results reach the
host in preallocated buffers, pinned on CUDA, one set per lane (below).

Example::

    evaluator = Evaluator(model, pick_device("auto"), forward="graphs", max_batch=512)
    legal, values = evaluator.evaluate_legal(planes, scalars, legal_indices, legal_counts)   # what search reads
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, overload

import numpy as np
import torch

from alphazero.chess.moves import NUM_MOVES
from alphazero.config import CPU_FORWARD_MODES, FORWARD_MODES, NetworkConfig
from alphazero.config_compat import architecture_hash
from alphazero.errors import UserError
from alphazero.nn.action_values import ActionValueHead, action_features, action_value_head, features_only
from alphazero.nn.buckets import BucketedForward, Runner, RunnerMaker, bucket_for, start_buckets
from alphazero.nn.compiled import compile_per_bucket
from alphazero.nn.cuda_device import device_context, indexed
from alphazero.nn.cuda_graphs import capture_graph
from alphazero.nn.host import (
    HostOutput,
    LegalActionResult,
    LegalResult,
    PendingOutput,
    legal_shape,
    stage_events,
    to_device,
)
from alphazero.nn.kept_precision import KeptPrecisions
from alphazero.nn.legal import gather_legal, gather_legal_numpy, safe_legal_indices, safe_legal_indices_numpy
from alphazero.nn.network import fold_batch_norm, load_weights, model_config
from alphazero.nn.parity import ParityErrors, ParitySettings, compare_legal
from alphazero.nn.planes import check_compact_numpy, compact_to_torch
from alphazero.nn.precision import (
    MAX_TIMING_ROWS,
    TIMING_ROWS,
    channels_last,
    choose_precision,
    pass_autocast,
    time_forward,
)

log = logging.getLogger(__name__)

# --- the host side: CUDA events (the rest is alphazero.nn.host) -------------------------------------


def _pass_events(device: torch.device) -> tuple[Any, Any] | None:
    """Gets a lane's pair of CUDA events (None off CUDA): they time its passes, and wait() waits on the second.

    Blocking: a thread that waits on them sleeps until the GPU is done, where
    the default spins a CPU core (one per actor) for the whole pass.
    """
    if device.type != "cuda":
        return None
    return (torch.cuda.Event(enable_timing=True, blocking=True),
            torch.cuda.Event(enable_timing=True, blocking=True))


# --- the Evaluator: what the search calls ----------------------------------------------------


class Evaluator:
    """Runs a model for search: numpy in, float32 numpy out, no gradients.

    The model itself is moved to ``device`` (default: where its weights are),
    put in eval mode and into channels_last memory format (on a CPU in float32
    too, where its passes beat the default layout's: EXPERIMENTS.md,
    "channels_last for the network's passes on the CPU in float32");
    ``precision`` ('auto', 'bf16', 'float16', 'float32':
    alphazero.nn.precision) says whether it runs under autocast and to which
    type: on CUDA 'auto' is bf16 where the GPU has native bf16 (compute
    capability 8.0 and up), else float16 where it has float16 tensor cores,
    else float32; on a CPU bf16 where the processor has native bf16 and a pass
    timed at start was faster, else float32 (``precision_choice.reason`` says
    which and why). The heads' last layers stay float32 and outputs are
    float32. ``compile=True`` wraps the model in torch.compile; the first
    batches of each new size are then slow.

    ``forward`` picks how a CUDA pass runs (alphazero.nn.forward.FORWARD_MODES):
    'eager', 'graphs' (a CUDA graph per batch-size bucket) or 'compile'
    (torch.compile(mode='reduce-overhead') per bucket); ``max_batch`` is the
    largest batch the caller sends (a bucket of its own, and with it the
    buckets warm_up() makes at start). On the CPU there are no graphs
    ('graphs' runs eager) and 'compile' makes one bucket, ``max_batch``, into
    which smaller batches are padded: a CPU pass costs its rows, not its
    launches, and one compilation is what a self-play actor can afford at
    start (EXPERIMENTS.md, "bf16 on the CPU"). ``runner_maker``
    replaces the mode's own way to make a bucket's pass (a fake fast pass:
    tests reach the fast path's code on the CPU with it). ``keep`` keeps a CPU's
    ``auto`` precision across processes, timed on the folded pass
    (alphazero.nn.kept_precision: the UCI engine's).

    A fast pass (bf16 on any device, graphs or compiled) checks itself against
    float32 eager on the same batch (alphazero.nn.parity; ``parity`` says when: the
    first pass of each batch size or bucket, the first after each weight update,
    a share of the others): on a
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
    With an action-value head (``has_action_values``), evaluate_action_values()
    gives every move's win probability, and ``action_values=True`` adds the
    legal moves' to the legal pass: scored after the same pass with the
    logits' indices, on the same stream, into the lane's (pinned) buffers, and
    checked by the parity check with them.

    Example::

        evaluator = Evaluator(model, pick_device("auto"))
        logits, values = evaluator.evaluate(planes, scalars)   # [B, 4672], [B]
        legal, values = evaluator.evaluate_legal(planes, scalars, legal_indices, legal_counts)   # [B, W], [B]

    Raises:
        ValueError: an unknown forward mode.
    """

    def __init__(self, model: torch.nn.Module, device: torch.device | str | None = None, *,
                 compile: bool = False, precision: str = "auto", forward: str = "eager",
                 max_batch: int | None = None, parity: ParitySettings | None = None,
                 runner_maker: RunnerMaker | None = None, name: str = "this network",
                 keep: KeptPrecisions | None = None) -> None:
        if forward not in FORWARD_MODES:
            raise ValueError(f"forward must be one of {', '.join(FORWARD_MODES)}, got {forward!r}")
        device = torch.device(device) if device is not None else next(model.parameters()).device
        self.model = model.to(device).eval()
        self.device = indexed(device, self.model)  # 'cuda' -> the GPU the weights went to, for device_context
        self.use_cuda = self.device.type == "cuda"
        rows = min(max_batch, MAX_TIMING_ROWS) if max_batch else TIMING_ROWS  # the batches it will run
        # A kept choice (the UCI engine's) is timed on the folded pass, the one the engine runs.
        self.precision_choice = choose_precision(
            precision, self.device, key=(architecture_hash(model_config(self.model)), "forward", rows),
            timer=functools.partial(time_forward, self.model, self.device, rows=rows, folded=keep is not None),
            float16=True, keep=keep)
        self.autocast = self.precision_choice.autocast
        self.autocast_dtype = self.precision_choice.dtype or torch.bfloat16
        self.model = channels_last(self.model)
        self.name = name
        self._search = features_only(self.model)
        self._head: ActionValueHead | None = action_value_head(self.model)
        self._eager: Any = torch.compile(self._search) if compile else self._search
        self._forward: Any = self._eager
        cpu_mode = forward if forward in CPU_FORWARD_MODES else "eager"  # no CUDA graphs on a CPU
        self.forward_mode = forward if self.use_cuda or runner_maker is not None else cpu_mode
        self._bucketed: BucketedForward | None = None
        if self.forward_mode != "eager":
            # A CPU pass costs its rows, not its launches: one compiled bucket, the largest batch, takes
            # the smaller batches padded (self-play's batches are nearly all full) and compiles once.
            buckets = [max_batch] if not self.use_cuda and runner_maker is None and max_batch else None
            self._bucketed = BucketedForward(self._search, self.device, mode=self.forward_mode, max_batch=max_batch,
                                             make=runner_maker or self._runner_maker(self.forward_mode),
                                             buckets=buckets)
            self._forward = self._bucketed
        self.parity = parity or ParitySettings()
        self._check_passes = self._fast()
        # (bucket or, unbucketed, batch size; with action values) checked since the last weight update
        self._checked: set[tuple[int, bool]] = set()
        self._parity_draw = random.Random(0)  # which of the other passes are checked
        self.fallbacks: list[str] = []
        self._lanes: dict[int, tuple[HostOutput, tuple[Any, Any] | None]] = {}
        self.gpu_seconds = 0.0
        self.folded = False  # passes run through fold_batch_norm(model) (see fold_batch_norm())

    @property
    def config(self) -> NetworkConfig:
        return model_config(self.model)

    @property
    def bucket_failures(self) -> dict[int, str]:
        """Buckets whose capture or compilation failed (they run eager), with the error."""
        return dict(self._bucketed.failures) if self._bucketed is not None else {}

    @property
    def precision(self) -> str:
        """What a pass runs in now: 'bf16', 'float16' or 'float32'."""
        if not self.autocast:
            return "float32"
        return "float16" if self.autocast_dtype == torch.float16 else "bf16"

    def describe_pass(self) -> str:
        """Gets how a pass runs now: 'graphs, bf16', 'eager, float32', ..."""
        return f"{self.forward_mode}, {self.precision}"

    def precision_text(self) -> str:
        """Says what the passes run in and why: the start's choice (precision_choice.reason), or the fallback."""
        if self.autocast or not self.precision_choice.autocast:
            return self.precision_choice.reason
        return f"float32 ({self.precision_choice.name} differed from float32 eager: the parity check fell back)"

    def _runner_maker(self, mode: str) -> RunnerMaker:
        if mode == "graphs":
            return functools.partial(capture_graph, self._search)
        return compile_per_bucket(self._search, cuda_graphs=self.use_cuda)

    def _fast(self) -> bool:
        """Whether a pass differs from float32 eager, so that the parity check applies."""
        return self.parity.mode != "off" and (self.forward_mode != "eager" or self.autocast)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        return pass_autocast(self.device, self.autocast_dtype) if self.autocast else contextlib.nullcontext()

    @contextlib.contextmanager
    def _pass(self) -> Iterator[None]:
        """A pass's contexts: no gradients, the model's device current (graph captures and replays, events and
        synchronisations use the current device's stream: alphazero.nn.cuda_device), its autocast."""
        with torch.inference_mode(), device_context(self.device), self._autocast():
            yield

    def warm_up(self) -> None:
        """Captures or compiles the fast pass's start buckets now (alphazero.nn.buckets.start_buckets), so that
        none stalls a pass later; a bucket that fails runs eager (one warning). Nothing on an eager pass."""
        if self._bucketed is not None and self._forward is self._bucketed:
            with self._pass():
                self._bucketed.warm()

    @property
    def has_action_values(self) -> bool:
        """Whether the network has an action-value head (network.action_value_head is not 'none')."""
        return self._head is not None

    def _action_value_head(self) -> ActionValueHead:
        """Gets the network's action-value head.

        Raises:
            UserError: it has none.
        """
        if self._head is None:
            raise UserError(f"{self.name} has no action-value head (network.action_value_head = 'none'): "
                            f"use weights trained with one")
        return self._head

    def evaluate(self, planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Evaluates B compact positions: uint64 [B, 112] and float32 [B, 7].

        Returns:
            (policy_logits float32 [B, 4672], values float32 [B]), both numpy.

        Raises:
            ValueError: wrong dtypes or shapes.
        """
        check_compact_numpy(planes, scalars)
        if planes.shape[0] == 0:
            return np.zeros((0, NUM_MOVES), np.float32), np.zeros((0,), np.float32)
        with self._pass():
            planes_t, scalars_t = compact_to_torch(planes, scalars, self.device)
            out = self._forward(planes_t, scalars_t)
            return out.policy_logits.float().cpu().numpy(), out.value.float().cpu().numpy()

    def evaluate_action_values(self, planes: np.ndarray, scalars: np.ndarray) -> np.ndarray:
        """Evaluates B compact positions' action values: float32 [B, 4672], the mover's win probability in
        [0, 1] after each move (NetOutput.action_values: 0 at the indices that are never legal moves; at
        the others that are illegal in a position it is whatever the head says), numpy.

        The pass is the one evaluate() runs (its precision and forward mode); the
        moves are scored in float32.

        Raises:
            UserError: the network has no action-value head (the message names it).
            ValueError: wrong dtypes or shapes.
        """
        head = self._action_value_head()
        check_compact_numpy(planes, scalars)
        if planes.shape[0] == 0:
            return np.zeros((0, NUM_MOVES), np.float32)
        with self._pass():
            planes_t, scalars_t = compact_to_torch(planes, scalars, self.device)
            out = self._forward(planes_t, scalars_t)
            return head.all_values(action_features(out)).cpu().numpy()

    def pin(self, arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """Gets zeroed arrays shaped like ``arrays`` in pinned host memory on CUDA (the arrays themselves on the CPU).

        A batch gathered straight into pinned memory goes to the GPU
        asynchronously, without a staging copy: give the search
        ``evaluator.pin(search.new_batch())``.
        """
        if not self.use_cuda:
            return arrays
        pinned = []
        with device_context(self.device):  # pinning opens a CUDA context: on this GPU, not on GPU 0 as well
            for array in arrays:
                memory = torch.zeros(array.nbytes, dtype=torch.uint8, pin_memory=True)
                pinned.append(memory.numpy().view(array.dtype).reshape(array.shape))
        return tuple(pinned)

    @overload
    def submit_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                     legal_counts: np.ndarray, *, lane: int = 0,
                     action_values: Literal[False] = False) -> PendingOutput[LegalResult]: ...

    @overload
    def submit_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                     legal_counts: np.ndarray, *, lane: int = 0,
                     action_values: Literal[True]) -> PendingOutput[LegalActionResult]: ...

    @overload
    def submit_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                     legal_counts: np.ndarray, *, lane: int = 0,
                     action_values: bool) -> PendingOutput[tuple[np.ndarray, ...]]: ...

    def submit_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                     legal_counts: np.ndarray, *, lane: int = 0, action_values: bool = False) -> PendingOutput[Any]:
        """Starts evaluating B positions; returns their legal moves' logits and values when waited for.

        legal_indices int32 [>=B, >=W] and legal_counts int32 [>=B] are the
        search's gather() arrays: row b's first legal_counts[b] entries are
        its legal moves' policy indices (the rest are ignored). The result's
        width W is the largest count. On CUDA the pass only gets queued, so
        the caller can search meanwhile (a pass the parity check takes is
        waited for here); batches of different ``lane``s may be in flight
        together (each lane has its own output buffers), a lane's next batch
        may only be submitted after its last one was waited for.

        With ``action_values`` the result has a third array, float32 [B, W]:
        each legal move's win probability for the mover (the action-value
        head's, in the order of legal_indices), scored from the same pass
        after the logits' gather and copied into the lane's host buffers
        beside them.

        Raises:
            UserError: action values asked of a network without the head.
            ValueError: wrong dtypes or shapes, or counts beyond legal_indices' width.
        """
        if action_values:
            self._action_value_head()
        rows, width = legal_shape(planes, scalars, legal_indices, legal_counts)
        host, events = self._lane(lane)
        if rows == 0:
            host.tensors(0, width, action_values=action_values)
            host.flag.zero_()
            return PendingOutput(host, rows, width, None, action_values=action_values)
        made = self._bucketed.made if self._bucketed is not None else 0
        check = self._parity_key(rows, action_values) if self._check_passes else None
        with self._pass():  # the events record on the model's device's stream, as its pass runs
            self._run_legal(planes, scalars, legal_indices, legal_counts,
                            host.tensors(rows, width, action_values=action_values), stage_events(events))
        if check is not None:
            self._check_parity(check, (planes, scalars, legal_indices, legal_counts), host, rows, width, events)
        timed = check is None and (self._bucketed.made if self._bucketed is not None else 0) == made
        return PendingOutput(host, rows, width, events, action_values=action_values, timed=timed,
                             on_gpu_seconds=self._add_gpu_seconds)

    def _add_gpu_seconds(self, seconds: float) -> None:
        self.gpu_seconds += seconds

    def _run_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                   legal_counts: np.ndarray,
                   outputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None],
                   stage_done: Callable[[str], None]) -> None:
        """Queues one legal pass into ``outputs`` (logits, values, flag and action values or None: host views);
        stage_done(name) after each stage."""
        logits_out, values_out, flag_out, action_out = outputs
        rows, width = logits_out.shape
        planes_t, scalars_t = compact_to_torch(planes, scalars, self.device)
        if self.use_cuda:
            indices_t = to_device(legal_indices[:rows], self.device)
            counts_t = to_device(legal_counts[:rows], self.device)
        stage_done("input")
        out = self._forward(planes_t, scalars_t)
        stage_done("forward")
        if self.use_cuda:
            safe, bad = safe_legal_indices(indices_t[:, :width], counts_t, out.policy_logits.shape[1])
            logits_out.copy_(out.policy_logits.gather(1, safe), non_blocking=True)
            flag_out.copy_(bad, non_blocking=True)
            if action_out is not None:  # the same indices, after the same pass, into the lane's pinned buffer
                action_out.copy_(self._action_value_head().legal_values(action_features(out), safe), non_blocking=True)
        else:
            # The logits are host memory already: numpy gathers them with less overhead than torch's small ops.
            flag_out[0] = gather_legal_numpy(out.policy_logits.numpy(), legal_indices[:rows], legal_counts[:rows],
                                             logits_out.numpy())
            moves = None if action_out is None else safe_legal_indices_numpy(legal_indices[:rows],
                                                                             legal_counts[:rows], width)
            if action_out is not None and moves is not None:  # None: a bad index, and wait() raises
                moves_t = torch.from_numpy(moves.astype(np.int64))
                action_out.copy_(self._action_value_head().legal_values(action_features(out), moves_t))
        values_out.copy_(out.value, non_blocking=True)
        stage_done("output")

    # -- the parity check -----------------------------------------------------------

    def _parity_key(self, rows: int, action_values: bool) -> tuple[int, bool] | None:
        """Gets the bucket (an unbucketed pass: the batch size), with whether the pass scores action values, to
        note when this pass is to be checked; else None."""
        bucket = rows
        if self._bucketed is not None and self._forward is self._bucketed:
            bucket = self._bucketed.bucket_of(rows)
        key = (bucket, action_values)
        if self.parity.mode == "always" or key not in self._checked \
                or self._parity_draw.random() < self.parity.share:
            return key
        return None

    def _check_parity(self, key: tuple[int, bool], batch: tuple[np.ndarray, ...], host: HostOutput, rows: int,
                      width: int, events: tuple[Any, Any] | None) -> None:
        """Compares the pass just queued with float32 eager; on a mismatch puts eager's results in its place
        and falls back (one warning)."""
        if events is not None:
            events[1].synchronize()
        logits, values, flag, action = host.numpy(rows, width, action_values=key[1])
        if flag[0]:
            return  # a bad legal index: wait() raises
        ref_action = None
        if key[1]:
            ref_logits, ref_values, ref_action = self._reference(*batch, rows=rows, width=width, action_values=True)
        else:
            ref_logits, ref_values = self.reference_legal(*batch, rows=rows, width=width)
        errors = compare_legal(logits, values, ref_logits, ref_values, batch[3][:rows], self.parity,
                               fast_action_values=action, ref_action_values=ref_action)
        self._checked.add(key)
        if not errors.ok:
            logits[...], values[...] = ref_logits, ref_values  # what reaches the search: the eager results
            if action is not None and ref_action is not None:
                action[...] = ref_action
            self._fall_back(errors, rows)

    def reference_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                        legal_counts: np.ndarray, *, rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Gets plain float32 eager's legal logits [rows, width] and values [rows] (new numpy arrays) for the
        first ``rows`` positions: what the parity check compares a pass with."""
        logits, values, _ = self._reference(planes, scalars, legal_indices, legal_counts, rows=rows, width=width,
                                            action_values=False)
        return logits, values

    def _reference(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                   legal_counts: np.ndarray, *, rows: int, width: int,
                   action_values: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """reference_legal, plus the legal moves' action values [rows, width] when asked (else None)."""
        planes_t, scalars_t = compact_to_torch(planes[:rows], scalars[:rows], self.device)
        indices_t = to_device(legal_indices[:rows, :width], self.device)
        counts_t = to_device(legal_counts[:rows], self.device)
        with torch.inference_mode(), device_context(self.device):
            out = self._search(planes_t, scalars_t)
            legal, _ = gather_legal(out.policy_logits.float(), indices_t, counts_t)
            action = None
            if action_values:
                safe, _ = safe_legal_indices(indices_t, counts_t)
                action = self._action_value_head().legal_values(action_features(out), safe).cpu().numpy()
            return legal.cpu().numpy(), out.value.float().cpu().numpy(), action

    def _fall_back(self, errors: ParityErrors, rows: int) -> None:
        """Steps to a plainer pass after a mismatch (graphs or compile -> eager; bf16 or float16 -> float32), with
        one warning."""
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

    @overload
    def evaluate_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                       legal_counts: np.ndarray, *, lane: int = 0,
                       action_values: Literal[False] = False) -> LegalResult: ...

    @overload
    def evaluate_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                       legal_counts: np.ndarray, *, lane: int = 0,
                       action_values: Literal[True]) -> LegalActionResult: ...

    @overload
    def evaluate_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                       legal_counts: np.ndarray, *, lane: int = 0, action_values: bool) -> tuple[np.ndarray, ...]: ...

    def evaluate_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                       legal_counts: np.ndarray, *, lane: int = 0, action_values: bool = False) -> Any:
        """Evaluates B positions now: (legal logits float32 [B, W], values float32 [B]), and with
        ``action_values`` the legal moves' win probabilities float32 [B, W] (see submit_legal).

        The arrays are views of the lane's buffers, valid until its next call.

        Raises:
            UserError: action values asked of a network without the head.
            ValueError: as submit_legal and PendingOutput.wait.
        """
        return self.submit_legal(planes, scalars, legal_indices, legal_counts, lane=lane,
                                 action_values=action_values).wait()

    def _lane(self, lane: int) -> tuple[HostOutput, tuple[Any, Any] | None]:
        entry = self._lanes.get(lane)
        if entry is None:
            with device_context(self.device):  # the pinned buffers' CUDA context: this GPU's (see pin())
                entry = (HostOutput(pin=self.use_cuda), _pass_events(self.device))
            self._lanes[lane] = entry
        return entry

    def profile_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                      legal_counts: np.ndarray, *, action_values: bool = False) -> dict[str, float]:
        """Times one evaluate_legal pass stage by stage: seconds of 'input', 'forward' and 'output'.

        input: the compact batch and its legal indices to the device;
        forward: the network (input expansion included); output: the legal
        logits' gather (and with ``action_values`` the legal moves' scores)
        and the copy to the host. Each stage is waited for before the next
        starts, so the sum exceeds a real pass, where they overlap.

        Raises:
            UserError: action values asked of a network without the head.
            ValueError: as submit_legal, or an empty batch.
        """
        if action_values:
            self._action_value_head()
        rows, width = legal_shape(planes, scalars, legal_indices, legal_counts)
        if rows == 0:
            raise ValueError("profile_legal needs at least one position")
        host, _ = self._lane(-1)
        sync = functools.partial(torch.cuda.synchronize, self.device) if self.use_cuda else (lambda: None)
        times: dict[str, float] = {}
        tick = [time.perf_counter()]

        def stage_done(name: str) -> None:
            sync()
            now = time.perf_counter()
            times[name], tick[0] = now - tick[0], now

        with self._pass():
            sync()
            tick[0] = time.perf_counter()
            self._run_legal(planes, scalars, legal_indices, legal_counts,
                            host.tensors(rows, width, action_values=action_values), stage_done)
        return times

    def fold_batch_norm(self) -> bool:
        """Runs the passes through a copy of the model with each conv-BN pair folded into one convolution
        (alphazero.nn.network.fold_batch_norm): fewer ops a pass. For an evaluator whose weights change
        only through set_weights (which folds again), such as the UCI engine's: weights loaded into
        ``model`` directly are not seen.

        Returns whether it folded: only on the CPU, eager and not compiled.
        """
        if self.use_cuda or self._forward is not self._search:
            return False
        self._forward = self._folded()
        self.folded = True
        return True

    def _folded(self) -> torch.nn.Module:
        folded = fold_batch_norm(self.model)
        return features_only(channels_last(folded))

    def set_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Replaces the model's weights in place (no rebuild, no recompile, captured graphs stay valid); the
        next pass of each bucket is checked again (the parity check).

        Raises:
            UserError: the weights do not fit the model.
        """
        load_weights(self.model, state_dict, "new weights")
        self._checked.clear()
        if self.folded:
            self._forward = self._folded()

    load_state_dict = set_weights


__all__ = [
    "FORWARD_MODES", "BucketedForward", "Evaluator", "PendingOutput", "Runner", "RunnerMaker", "bucket_for",
    "capture_graph", "compile_per_bucket", "gather_legal", "gather_legal_numpy", "start_buckets",
]
