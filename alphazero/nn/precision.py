"""Which precision the network runs in: bfloat16 autocast, or float32.

On CUDA the answer is bf16 unless told otherwise (the tensor cores want it;
the parity check watches it). On a CPU bf16 pays only where the processor
computes it natively (AVX512-BF16 or AMX, which torch's oneDNN kernels use):
elsewhere it is emulated and slower than float32. So on a CPU ``auto`` asks
the processor first, then times one short pass (or training step) both ways
on the network at hand, and takes bf16 only when it measured at least
MIN_SPEEDUP faster. The choice is made once per process, architecture,
thread count and purpose (``choose_precision`` caches it), and says why in
``PrecisionChoice.reason``, which the commands print once.

Settings (``PRECISIONS``), from ``selfplay.cpu_precision``,
``learner.cpu_precision``, a player's ``precision=`` option or the UCI
option ``Precision``: ``auto``, ``bf16`` (forced, even where emulated) and
``float32``. The heads' last layers stay float32 under bf16 either way
(alphazero.nn.heads.float32_head), so priors and values are not rounded to
8 bits of mantissa.

Example::

    choice = choose_precision("auto", torch.device("cpu"), key=("tiny", "forward"), timer=time_both_ways)
    print(choice.reason)   # 'bf16 (AVX512-BF16; 2.4x float32, measured at start)'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch

from alphazero.config import PRECISIONS

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


@dataclass(frozen=True)
class PrecisionChoice:
    """What a network runs in, and why (a line for the user)."""

    bf16: bool
    reason: str
    speedup: float | None = None  # float32's time over bf16's, where it was measured

    @property
    def name(self) -> str:
        return "bf16" if self.bf16 else "float32"


_CHOSEN: dict[Hashable, PrecisionChoice] = {}


def check_precision(setting: str, where: str = "precision") -> str:
    """Gets ``setting`` lower-cased when it is one of PRECISIONS.

    Raises:
        ValueError: another value; the message names ``where`` (a config key or an option).
    """
    value = str(setting).strip().lower()
    if value not in PRECISIONS:
        raise ValueError(f"{where} must be one of {', '.join(PRECISIONS)}, got {setting!r}")
    return value


def choose_precision(setting: str, device: torch.device, *, key: Hashable, timer: Timer,
                     probe: Probe | None = None) -> PrecisionChoice:
    """Decides bf16 or float32 for a network on ``device`` (see the module's docstring).

    ``key`` names what is timed (the architecture, the purpose): a CPU
    decision for the same key and thread count is made once per process.
    ``timer`` runs only for 'auto' on a CPU with native bf16; ``probe`` (default
    native_bf16) says whether the processor has it.

    Raises:
        ValueError: an unknown setting.
    """
    setting = check_precision(setting)
    probe = probe or native_bf16  # looked up now: tests replace the module's probe
    if device.type != "cpu":
        return PrecisionChoice(setting != "float32", "float32 (forced)" if setting == "float32"
                               else f"bf16 autocast on {device.type}")
    if setting != "auto":
        native = probe()
        why = f"forced; {native} native" if native else "forced; emulated here: no native bf16, slower"
        return PrecisionChoice(setting == "bf16", f"{setting} ({why})" if setting == "bf16" else "float32 (forced)")
    cache_key = (key, torch.get_num_threads(), probe)
    chosen = _CHOSEN.get(cache_key)
    if chosen is None:
        chosen = _CHOSEN[cache_key] = _measure(timer, probe)
    return chosen


def _measure(timer: Timer, probe: Probe) -> PrecisionChoice:
    native = probe()
    if native is None:
        return PrecisionChoice(False, "float32 (this processor has no native bf16: neither AVX512-BF16 nor AMX)")
    # Alternate the two so that a burst of load elsewhere slows both; keep each one's best. Where bf16 did not
    # win, time both again before settling: the choice holds for the process's life, and a burst at start
    # can cost an actor bf16 for all of it (EXPERIMENTS.md, "Issue 33: self-play that climbs").
    times: dict[bool, list[float]] = {False: [], True: []}
    for _series in range(TIMING_SERIES):
        for _ in range(TIMING_ROUNDS):
            for use_bf16 in (False, True):
                times[use_bf16].append(timer(use_bf16))
        float32, bf16 = min(times[False]), min(times[True])
        speedup = float32 / max(bf16, 1e-9)
        if speedup >= MIN_SPEEDUP:
            break
    if speedup >= MIN_SPEEDUP:
        return PrecisionChoice(True, f"bf16 ({native}; {speedup:.1f}x float32, measured at start)", speedup)
    return PrecisionChoice(False, f"float32 ({native}, but bf16 measured {speedup:.2f}x float32 at start)", speedup)


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


def forget_choices() -> None:
    """Forgets the measured choices (tests; a process whose load changed for good)."""
    _CHOSEN.clear()


__all__ = ["MIN_SPEEDUP", "PRECISIONS", "TIMING_ROUNDS", "PrecisionChoice", "check_precision", "choose_precision",
           "forget_choices", "native_bf16", "random_positions", "seconds_per_call"]
