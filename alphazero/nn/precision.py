"""Which precision the network runs in: bfloat16 or float16 autocast, or float32.

On CUDA the answer is a function of the device's compute capability
(``cuda_choice``): bf16 where the GPU computes it natively (8.0 and up:
Ampere on); below that float16 where the GPU has float16 tensor cores (7.0
and up: the V100, the T4), else float32. A fast inference pass is checked
against float32 eager either way (alphazero.nn.parity), which also catches
float16's overflow past 65504; the learner trains float16 with loss scaling
(learner.loss_scaling: float16 gradients underflow without it). A caller
that can do neither passes ``float16=False`` and gets float32 below 8.0.
On a CPU bf16 pays only where the processor computes it natively
(AVX512-BF16 or AMX, which torch's oneDNN kernels use): elsewhere it is
emulated and slower than float32. So on a CPU ``auto`` asks the processor
first, then times one short pass (or training step) both ways on the network
at hand, and takes bf16 only when it measured at least MIN_SPEEDUP faster.
That choice is made once per process, architecture, thread count and purpose
(``choose_precision`` caches it). Every choice says why in
``PrecisionChoice.reason``, which the commands print once.

Settings (``PRECISIONS``): ``auto``, ``bf16`` (forced, even where emulated),
``float16`` (CUDA; a CPU runs float32 for it) and ``float32``, from
``selfplay.cpu_precision`` / ``selfplay.cuda_precision`` (the network of
actors and servers on each kind of device), ``learner.cpu_precision`` /
``learner.cuda_precision``, a player's ``precision=`` option or the UCI
option ``Precision``. The heads' last layers stay float32 under autocast
either way (alphazero.nn.heads.float32_head), so priors and values are not
rounded to 8 (bf16) or 11 (float16) bits of mantissa.

Example::

    choice = choose_precision("auto", torch.device("cpu"), key=("tiny", "forward"), timer=time_both_ways)
    print(choice.reason)   # 'bf16 (AVX512-BF16; 2.4x float32, measured at start)'
    cuda_choice("auto", torch.device("cuda:0"), (7, 5), float16=True).name   # 'float16'
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from alphazero.config import PRECISIONS
from alphazero.nn.action_values import features_only
from alphazero.nn.cuda_device import FLOAT16_TENSOR_CORES, NATIVE_BF16, cuda_capability
from alphazero.nn.kept_precision import KEPT_TIMING_ROUNDS, KeptPrecisions

MIN_SPEEDUP = 1.1  # bf16 is taken on a CPU only when a pass measured at least this much faster than float32
TIMING_ROUNDS = 3  # each precision is timed this many times, alternating; the fastest of each counts
TIMING_SERIES = 2  # where bf16 did not win a series of rounds, at most this many series in all

# The native-bf16 probe: the name of the processor's bf16 instructions, or None (tests replace it).
Probe = Callable[[], "str | None"]
# Times one pass (or step) of the network at hand: seconds, with bf16 autocast (True) or in float32 (False).
Timer = Callable[[bool], float]


def native_bf16() -> str | None:
    """Names the processor's native bf16 instructions as torch reports them ('AMX', 'AVX512-BF16'), else None."""
    cpu = torch.cpu
    for name, probe in (("AMX", "_is_amx_tile_supported"), ("AVX512-BF16", "_is_avx512_bf16_supported")):
        check = getattr(cpu, probe, None)
        try:
            if check is not None and check():
                return name
        except RuntimeError:  # a build without the probe's kernels
            continue
    return None


_DTYPES = {"bf16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class PrecisionChoice:
    """What a network runs in, and why (a line for the user)."""

    name: str  # 'bf16', 'float16' (autocast to that type) or 'float32'
    reason: str
    speedup: float | None = None  # float32's time over bf16's, where it was measured

    @property
    def bf16(self) -> bool:
        return self.name == "bf16"

    @property
    def autocast(self) -> bool:
        """Whether the network runs under autocast (bf16 or float16)."""
        return self.name in _DTYPES

    @property
    def dtype(self) -> torch.dtype | None:
        """The autocast type (torch.bfloat16 or torch.float16), None in float32."""
        return _DTYPES.get(self.name)


def _of(bf16: bool, reason: str, speedup: float | None = None) -> PrecisionChoice:
    return PrecisionChoice("bf16" if bf16 else "float32", reason, speedup)


_CHOSEN: dict[Hashable, PrecisionChoice] = {}


def check_precision(setting: str, where: str = "precision", choices: tuple[str, ...] = PRECISIONS) -> str:
    """Gets ``setting`` lower-cased when it is one of ``choices``.

    Raises:
        ValueError: another value; the message names ``where`` (a config key or an option).
    """
    value = str(setting).strip().lower()
    if value not in choices:
        raise ValueError(f"{where} must be one of {', '.join(choices)}, got {setting!r}")
    return value


def choose_precision(setting: str, device: torch.device, *, key: Hashable, timer: Timer,
                     probe: Probe | None = None, float16: bool = False,
                     capability: tuple[int, int] | None = None,
                     keep: KeptPrecisions | None = None) -> PrecisionChoice:
    """Decides the precision of a network on ``device`` (see the module's docstring).

    ``key`` names what is timed (the architecture, the purpose): a CPU
    decision for the same key and thread count is made once per process.
    ``timer`` runs only for 'auto' on a CPU with native bf16; ``probe`` (default
    native_bf16) says whether the processor has it. ``float16``: whether the
    caller may run float16 autocast (inference, which the parity check
    watches; the learner, which scales its loss). On CUDA ``capability`` is the
    device's compute capability (default: asked of the device; tests give it).
    ``keep`` (the UCI engine's) keeps a CPU's measured choice across processes:
    one kept for ``key`` on this machine is taken without timing; else the
    timing runs KEPT_TIMING_ROUNDS rounds and is kept
    (alphazero.nn.kept_precision).

    Raises:
        ValueError: an unknown setting, or float16 for a caller that may not run it.
    """
    setting = check_precision(setting)
    if device.type == "cuda":
        return cuda_choice(setting, device, capability or cuda_capability(device), float16=float16)
    if device.type != "cpu":  # (pick_device makes no other kind)
        return _of(setting not in ("float32", "float16"), f"{setting} on {device.type}")
    probe = probe or native_bf16  # looked up now: tests replace the module's probe
    if setting == "float16":  # one setting (a player's, the UCI option) may serve either device
        return _of(False, "float32 (float16 is for CUDA: a CPU has no fast float16, so it runs float32)")
    if setting != "auto":
        native = probe()
        why = f"forced; {native} native" if native else "forced; emulated here: no native bf16, slower"
        return _of(setting == "bf16", f"{setting} ({why})" if setting == "bf16" else "float32 (forced)")
    if keep is not None:
        return _kept(keep, key, timer, probe)
    cache_key = (key, torch.get_num_threads(), probe)
    chosen = _CHOSEN.get(cache_key)
    if chosen is None:
        chosen = _CHOSEN[cache_key] = _measure(timer, probe)
    return chosen


def _kept(keep: KeptPrecisions, key: Hashable, timer: Timer, probe: Probe) -> PrecisionChoice:
    """The choice kept for ``key`` on this machine, else one measured with KEPT_TIMING_ROUNDS rounds and kept."""
    native = probe()
    if native is None:
        return _of(False, "float32 (this processor has no native bf16: neither AVX512-BF16 nor AMX)")
    kept = keep.get(key)
    if kept is not None:
        return _of(kept.name == "bf16", f"{kept.name} ({native}; {kept.speedup:.2f}x float32, measured "
                                        f"{kept.measured}, kept in {keep.path})", kept.speedup)
    measured = _measure(timer, probe, rounds=KEPT_TIMING_ROUNDS, series=1)
    assert measured.speedup is not None
    kept = keep.put(key, measured.name, measured.speedup)
    where = f"kept in {keep.path}" if keep.write_error is None else keep.write_error
    return _of(measured.bf16, f"{measured.name} ({native}; {measured.speedup:.2f}x float32, measured now over "
                              f"{KEPT_TIMING_ROUNDS} rounds, {where})", measured.speedup)


def cuda_choice(setting: str, device: torch.device, capability: tuple[int, int], *,
                float16: bool) -> PrecisionChoice:
    """Decides the precision of a network on the CUDA ``device`` of compute ``capability`` (no timing): see the
    module's docstring; ``float16`` as in choose_precision.

    Raises:
        ValueError: float16 asked for by a caller that may not run it.
    """
    where = f"{device}, compute capability {capability[0]}.{capability[1]}"
    native = tuple(capability) >= NATIVE_BF16
    if setting == "float32":
        return _of(False, "float32 (forced)")
    if setting == "bf16":
        why = "native bf16" if native else "no native bf16 below 8.0: emulated, slower"
        return _of(True, f"bf16 autocast (forced; {where}: {why})")
    if setting == "float16":
        if not float16:
            raise ValueError("float16 training needs loss scaling, which this caller does not do: "
                             "use auto, bf16 or float32")
        return PrecisionChoice("float16", f"float16 autocast (forced; {where})")
    if native:
        return _of(True, f"bf16 autocast ({where}: native bf16)")
    if not float16:
        return _of(False, f"float32 ({where}: no native bf16 below 8.0, and float16 training needs loss "
                          f"scaling, which this caller does not do)")
    if tuple(capability) >= FLOAT16_TENSOR_CORES:
        # float16 keeps more mantissa than bf16 (11 bits to 8) but overflows past 65504: the parity check
        # compares a pass with float32 eager, and an overflow (inf or NaN) falls back to float32. Training
        # takes float16 here too, as AMP on a V100 or T4 does (lc0's and KataGo's trainers with it): the tensor
        # cores run it at many times float32's rate, and the learner's loss scaling keeps small gradients
        # from flushing to zero and skips (then retries) a step whose gradients overflowed.
        return PrecisionChoice("float16", f"float16 autocast ({where}: no native bf16 below 8.0; float16 "
                                          f"tensor cores)")
    # Below 7.0 there are no tensor cores, and the 6.1 GPUs (GTX 10x0) run float16 at a 64th of float32's rate.
    return _of(False, f"float32 ({where}: neither native bf16, from 8.0, nor float16 tensor cores, from 7.0)")


def _measure(timer: Timer, probe: Probe, *, rounds: int = TIMING_ROUNDS,
             series: int = TIMING_SERIES) -> PrecisionChoice:
    native = probe()
    if native is None:
        return _of(False, "float32 (this processor has no native bf16: neither AVX512-BF16 nor AMX)")
    # Alternate the two so that a burst of load elsewhere slows both; keep each one's best. Where bf16 did not
    # win, time both again before settling: the choice holds for the process's life, and a burst at start
    # can cost an actor bf16 for all of it (EXPERIMENTS.md, "Self-play that climbs").
    times: dict[bool, list[float]] = {False: [], True: []}
    for _series in range(series):
        for _ in range(rounds):
            for use_bf16 in (False, True):
                times[use_bf16].append(timer(use_bf16))
        float32, bf16 = min(times[False]), min(times[True])
        speedup = float32 / max(bf16, 1e-9)
        if speedup >= MIN_SPEEDUP:
            break
    if speedup >= MIN_SPEEDUP:
        return _of(True, f"bf16 ({native}; {speedup:.1f}x float32, measured at start)", speedup)
    return _of(False, f"float32 ({native}, but bf16 measured {speedup:.2f}x float32 at start)", speedup)


TIMING_SECONDS = 0.02  # a timer repeats its pass (or step) for at least this long


def random_positions(rows: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Gets ``rows`` seeded random compact positions (int64 planes, float32 scalars) on ``device``: a timer's input."""
    from alphazero.nn.planes import COMPACT_PLANES, NUM_SCALARS

    generator = torch.Generator().manual_seed(0)
    planes = torch.randint(0, 2 ** 62, (rows, COMPACT_PLANES), generator=generator, dtype=torch.int64)
    return planes.to(device), torch.rand(rows, NUM_SCALARS, generator=generator).to(device)


def seconds_per_call(call: Callable[[], object]) -> float:
    """Runs ``call`` once untimed (oneDNN makes its kernels on a first pass), then repeats it for at least
    TIMING_SECONDS; returns the seconds per call."""
    call()
    calls, start = 0, time.perf_counter()
    while calls == 0 or time.perf_counter() - start < TIMING_SECONDS:
        call()
        calls += 1
    return (time.perf_counter() - start) / calls


# --- a pass's autocast and layout, and the Evaluator's timer (alphazero.nn.forward) ----------------------

TIMING_ROWS = 32  # the batch the start-up timing of a CPU's precision runs when the caller's is not known
MAX_TIMING_ROWS = 64  # and at most this many rows when it is


def pass_autocast(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> contextlib.AbstractContextManager[Any]:
    """Gets autocast to ``dtype`` on ``device``'s type, without the weight-cast cache: a CUDA graph must redo the
    casts it captured on every replay, and a CPU pass's autocast context lasts one pass anyway."""
    return torch.autocast(device_type=device.type, dtype=dtype, cache_enabled=False)


def channels_last(model: torch.nn.Module) -> torch.nn.Module:
    """Puts ``model`` in channels_last memory format (in place), as the evaluator's passes run it."""
    return model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # (stubs)


def time_forward(model: torch.nn.Module, device: torch.device, bf16: bool, rows: int = TIMING_ROWS, *,
                 folded: bool = False) -> float:
    """Times eval-mode passes of a copy of ``model`` on ``rows`` random positions (seconds_per_call): seconds per
    pass, in channels_last, in bf16 autocast (True) or float32 (False); ``folded``: each conv-BN pair
    folded into one convolution first, as the UCI engine runs it (alphazero.nn.network.fold_batch_norm)."""
    from alphazero.nn.network import fold_batch_norm

    planes, scalars = random_positions(rows, device)
    copied = fold_batch_norm(model) if folded else copy.deepcopy(model)
    candidate = channels_last(features_only(copied.eval()))
    context = pass_autocast(device) if bf16 else contextlib.nullcontext()
    with torch.inference_mode(), context:
        return seconds_per_call(lambda: candidate(planes, scalars))


def forget_choices() -> None:
    """Forgets the measured choices (tests; a process whose load changed for good)."""
    _CHOSEN.clear()


__all__ = ["MAX_TIMING_ROWS", "MIN_SPEEDUP", "PRECISIONS", "TIMING_ROUNDS", "TIMING_ROWS", "PrecisionChoice",
           "channels_last", "check_precision", "choose_precision", "cuda_choice", "forget_choices", "native_bf16",
           "pass_autocast", "random_positions", "seconds_per_call", "time_forward"]
