"""`alphazero doctor`: checks this machine's forward passes against float32 eager; run it first on a new machine.

The GPU path (bf16 or float16 autocast, CUDA graphs or torch.compile per
batch-size bucket, the legal logits gathered on the device) was written on
machines without a GPU, so it is checked where it runs. The doctor prints the
devices, torch and CUDA versions, what precision 'auto' takes on each device
and why (alphazero.nn.precision), then for each forward mode the devices
support (the first GPU: eager, graphs and compile in the precision 'auto'
takes there; every other GPU: graphs; always the CPU: eager in float32 and
bf16, compiled in bf16) and a few batch sizes: evaluations per second through ``Evaluator.evaluate_legal`` (the path
self-play uses) and the largest differences from plain float32 eager on the
same batch and device: of a value, and of a legal move's probability (the
softmax over each position's legal moves: alphazero.nn.parity). A mode passes
when every difference lies within selfplay.parity_atol + parity_rtol x
|eager| and none of its buckets fell back to eager; the exit status is 1
when a mode does not pass, else 0. On a machine without CUDA it checks the
CPU path and says that the GPU was not checked.

The positions are self-play leaves: games searched a few dozen plies with
random priors (so the openings differ), through the same Cython search and
encoding as self-play. The network is the built-in one (trained, so its
errors are a trained network's) unless --weights or --preset says otherwise.
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alphazero import __version__
from alphazero.arguments import positive_float, thread_count
from alphazero.errors import UserError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from alphazero.nn.forward import Evaluator, RunnerMaker
    from alphazero.nn.parity import ParitySettings

DEFAULT_BATCH_SIZES = "1,64,512"
LEAF_GATHERS = 120  # search steps before the sample is taken: about 30 plies at 4 simulations a move
LEAF_SIMULATIONS = 4


@dataclass(frozen=True)
class Mode:
    """One way a pass runs: a device, a forward mode and a precision (runner_maker: a fake fast pass, tests)."""

    device: str
    forward: str = "eager"
    precision: str = "float32"  # 'bf16', 'float16' or 'float32' (alphazero.nn.precision)
    runner_maker: RunnerMaker | None = None

    @property
    def label(self) -> str:
        return f"{self.device} {self.forward} ({self.precision})"


@dataclass
class Point:
    """One batch size of one mode: its speed and its largest differences from float32 eager."""

    batch: int
    evals_per_second: float
    value_error: float
    policy_error: float
    ok: bool


@dataclass
class ModeReport:
    """What the doctor found for one mode."""

    mode: Mode
    points: list[Point] = field(default_factory=list)
    problem: str = ""  # why it does not pass beyond the points: a failure, or buckets that fell back to eager

    @property
    def passed(self) -> bool:
        return not self.problem and all(point.ok for point in self.points)

    def verdict(self) -> str:
        if self.problem:
            return f"FAILED: {self.problem}"
        return "ok" if self.passed else "MISMATCH"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from alphazero.presets import PRESET_NAMES

    parser.add_argument("--weights", default="builtin", metavar="FILE_OR_RUN",
                        help="the network checked: a model file, a checkpoint, a run directory or 'builtin' "
                             "(default)")
    parser.add_argument("--preset", choices=PRESET_NAMES, default=None,
                        help="check this preset's network with fresh weights instead of --weights")
    parser.add_argument("--batch-sizes", default=DEFAULT_BATCH_SIZES, metavar="SIZES",
                        help=f"comma-separated batch sizes (default: {DEFAULT_BATCH_SIZES})")
    parser.add_argument("--seconds", type=positive_float, default=0.5, help="timed seconds per point (default: 0.5)")
    parser.add_argument("--threads", type=thread_count, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, e.g. --set selfplay.parity_atol=0.05 (the tolerances)")


def cuda_devices() -> list[tuple[torch.device, str, tuple[int, int]]]:
    """Lists this machine's CUDA devices: (device, name, compute capability)."""
    import torch

    from alphazero.nn.cuda_device import cuda_capability

    devices = [torch.device("cuda", index) for index in range(torch.cuda.device_count())]
    return [(device, torch.cuda.get_device_name(device), cuda_capability(device)) for device in devices]


def _cuda_auto(device: torch.device, capability: tuple[int, int], *, training: bool = False) -> Any:
    """What precision 'auto' takes for the network on a GPU of ``capability`` (a PrecisionChoice); the same
    for training (``training``), since the learner scales its float16 losses."""
    from alphazero.nn.precision import cuda_choice

    return cuda_choice("auto", device, capability, float16=True)


def supported_modes(cuda: bool) -> list[Mode]:
    """Gets the modes checked: with CUDA eager, graphs and compile on the first GPU and graphs on each other one
    (a pass on a GPU that is not the current device), in the precision 'auto' takes there; then the CPU eager in
    float32 and bf16, and compiled in bf16."""
    from alphazero.config import FORWARD_MODES

    cuda_modes = []
    for device, _, capability in cuda_devices() if cuda else []:
        precision = _cuda_auto(device, capability).name
        forwards = FORWARD_MODES if device.index == 0 else ("graphs",)
        cuda_modes += [Mode(str(device), forward, precision) for forward in forwards]
    # Compiled, the CPU is checked as self-play's actors run it where bf16 pays (selfplay.cpu_forward): in bf16.
    cpu_modes = [Mode("cpu"), Mode("cpu", precision="bf16"), Mode("cpu", "compile", "bf16")]
    return [*cuda_modes, *cpu_modes]


def _batch_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.replace(" ", ",").split(",") if part})
    except ValueError:
        raise UserError(f"--batch-sizes takes comma-separated integers, got {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise UserError(f"--batch-sizes must be positive integers, got {text!r}")
    return sizes


def sample_leaves(count: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Gets ``count`` self-play leaves: (planes, scalars, legal_indices, legal_counts) of games searched with
    random priors for about 30 plies."""
    import numpy as np

    from mcts_ext.params import SearchParams
    from mcts_ext.search import MultiGameSearch

    search = MultiGameSearch(count, SearchParams(simulations=LEAF_SIMULATIONS, temperature_plies=1000), seed=seed)
    batch = search.new_batch()[:4]
    rng = np.random.default_rng(seed)
    for _ in range(LEAF_GATHERS):
        rows = search.gather(*batch)
        if rows:
            logits = rng.normal(size=(rows, batch[2].shape[1])).astype(np.float32)
            search.backup_legal(logits, rng.uniform(-0.5, 0.5, rows).astype(np.float32))
    rows = search.gather(*batch)
    return tuple(np.resize(array[:max(rows, 1)], (count, *array.shape[1:])) for array in batch)


def _network(args: argparse.Namespace) -> tuple[Any, dict[str, Any], str]:
    """Gets the network config, the state dict and a description of the network checked.

    Raises:
        UserError: the weights cannot be read.
    """
    import torch

    from alphazero.nn.network import build_network, cpu_state_dict
    from alphazero.presets import get_preset
    from alphazero.store.sources import read_weights

    if args.preset is not None:
        config = get_preset(args.preset).network
        torch.manual_seed(0)
        return config, cpu_state_dict(build_network(config)), f"preset {args.preset}'s network, fresh weights"
    weights = read_weights(args.weights)
    notice = f"; notice: {weights.notice}" if weights.notice else ""
    return weights.network, weights.state, weights.summary + notice


def _evaluator(mode: Mode, config: Any, state: dict[str, Any], max_batch: int, settings: ParitySettings) -> Evaluator:
    """Builds the mode's evaluator; its own parity check is off (the doctor compares every batch itself: the
    evaluator's check would hide a mismatch by falling back)."""
    import dataclasses

    from alphazero.nn.forward import Evaluator
    from alphazero.nn.network import build_network, load_weights

    model = build_network(config)
    load_weights(model, state, "the network checked")
    # A CPU compiles one bucket, its max_batch (forward.Evaluator): here each batch size gets its own instead.
    cpu_compiled = mode.device == "cpu" and mode.forward == "compile" and mode.runner_maker is None
    return Evaluator(model, mode.device, precision=mode.precision, forward=mode.forward,
                     max_batch=None if cpu_compiled else max_batch,
                     parity=dataclasses.replace(settings, mode="off"), runner_maker=mode.runner_maker)


def _rate(evaluator: Evaluator, arrays: tuple[np.ndarray, ...], seconds: float) -> float:
    """Evaluations/s of evaluate_legal on one batch over about ``seconds`` (after the caller's first pass)."""
    done, start = 0, time.perf_counter()
    while done == 0 or time.perf_counter() - start < seconds:
        evaluator.evaluate_legal(*arrays)
        done += len(arrays[0])
    return done / (time.perf_counter() - start)


def check_mode(mode: Mode, config: Any, state: dict[str, Any], leaves: tuple[np.ndarray, ...], batches: list[int],
               settings: ParitySettings, seconds: float) -> ModeReport:
    """Checks one mode at each batch size; a failure (an exception) ends its report with the error.

    Each batch size's first pass captures or compiles its bucket and is not
    timed; only the buckets the batch sizes need are made (not all of
    warm_up's: compiling takes long).
    """
    from alphazero.nn.parity import compare_legal

    report = ModeReport(mode)
    try:
        evaluator = _evaluator(mode, config, state, max(batches), settings)
        for batch in batches:
            arrays = evaluator.pin(tuple(array[:batch].copy() for array in leaves))
            for target, array in zip(arrays, leaves):
                target[...] = array[:batch]
            width = max(int(arrays[3].max()), 1)
            logits, values = (a.copy() for a in evaluator.evaluate_legal(*arrays))
            ref_logits, ref_values = evaluator.reference_legal(*arrays, rows=batch, width=width)
            errors = compare_legal(logits, values, ref_logits, ref_values, arrays[3], settings)
            report.points.append(Point(batch, _rate(evaluator, arrays, seconds), errors.value, errors.policy,
                                       errors.ok))
        failures = evaluator.bucket_failures
        if failures:
            report.problem = "; ".join(f"bucket {bucket} fell back to eager ({why})"
                                       for bucket, why in sorted(failures.items()))
    except Exception as error:
        text = str(error).strip().splitlines()
        report.problem = f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")
    return report


def _header(cuda: bool) -> list[str]:
    import numpy
    import torch

    from alphazero.nn.precision import native_bf16

    lines = [f"alphazero {__version__}, Python {platform.python_version()}, torch {torch.__version__}, "
             f"numpy {numpy.__version__}",
             f"CUDA: torch built for {torch.version.cuda or 'no CUDA'}"]
    if cuda:
        named = ", ".join(f"{device} = {name} (compute capability {major}.{minor})"
                          for device, name, (major, minor) in cuda_devices())
        lines[-1] += f"; {named}; cuDNN {torch.backends.cudnn.version()}"
    else:
        lines[-1] += "; CUDA is not available here: the GPU was not checked"
    lines.append(f"CPU: {platform.machine()}, torch threads {torch.get_num_threads()}, native bf16: "
                 f"{native_bf16() or 'none (neither AVX512-BF16 nor AMX)'}")
    return lines


def cuda_precision_lines(devices: list[tuple[torch.device, str, tuple[int, int]]]) -> list[str]:
    """Says what precision 'auto' takes on each GPU and why: for the network of self-play and the engine
    (selfplay.cuda_precision, the UCI option Precision) and for training (learner.cuda_precision)."""
    return [f"on {device} ({name}) precision 'auto' runs the network in {_cuda_auto(device, capability).reason} "
            f"and trains in {_cuda_auto(device, capability, training=True).reason}"
            for device, name, capability in devices]


def _cpu_auto_line(config: Any, state: dict[str, Any]) -> str:
    """Says what precision 'auto' takes on this CPU for the network checked (selfplay.cpu_precision, the UCI
    option Precision), as self-play and the engine decide it at start."""
    import torch

    from alphazero.nn.forward import Evaluator
    from alphazero.nn.network import build_network, load_weights

    model = build_network(config)
    load_weights(model, state, "the network checked")
    choice = Evaluator(model, torch.device("cpu"), precision="auto").precision_choice
    return f"on this CPU precision 'auto' runs {choice.reason}"


def _table_header() -> str:
    return f"{'mode':<24} {'batch':>6} {'evals/s':>9} {'value error':>12} {'policy error':>13}  verdict"


def _table_rows(report: ModeReport) -> list[str]:
    from alphazero.app.bench import rate

    lines = [f"{report.mode.label:<24} {point.batch:>6} {rate(point.evals_per_second):>9} "
             f"{point.value_error:>12.2e} {point.policy_error:>13.2e}  {'ok' if point.ok else 'MISMATCH'}"
             for point in report.points]
    return [*lines, f"{report.mode.label:<24} {'':>44}  => {report.verdict()}"]


def run(args: argparse.Namespace) -> int:
    """Checks every supported mode and prints the table; returns the exit status (1: a mode did not pass).

    Raises:
        UserError: bad options, or weights that cannot be read.
    """
    import torch

    from alphazero.config import DEFAULT_PRESET, apply_overrides
    from alphazero.nn.parity import ParitySettings
    from alphazero.presets import get_preset

    batches = _batch_sizes(args.batch_sizes)
    settings = ParitySettings.from_config(apply_overrides(get_preset(DEFAULT_PRESET), args.overrides).selfplay)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    config, state, described = _network(args)
    leaves = sample_leaves(max(batches))
    for line in _header(cuda):
        print(line)
    print(f"network: {described}; {max(batches)} self-play leaves")
    for line in [_cpu_auto_line(config, state), *cuda_precision_lines(cuda_devices() if cuda else [])]:
        print(line)
    print(f"a mode passes when every value and legal-move probability lies within {settings.atol:g} + "
          f"{settings.rtol:g} x |float32 eager's| (selfplay.parity_atol, parity_rtol) and no bucket fell back\n",
          flush=True)
    print(_table_header(), flush=True)
    reports = []
    for mode in supported_modes(cuda):
        reports.append(check_mode(mode, config, state, leaves, batches, settings, args.seconds))
        print("\n".join(_table_rows(reports[-1])), flush=True)
    failed = [report.mode.label for report in reports if not report.passed]
    if failed:
        print(f"\ndoctor: {', '.join(failed)} did not pass; self-play falls back to eager (then float32) on such "
              f"a mismatch by itself, or set selfplay.cuda_forward and cuda_precision (on a CPU "
              f"selfplay.cpu_precision) to a mode that passed")
        return 1
    checked = "every mode" if cuda else "the CPU path (the GPU was not checked: CUDA is not available here)"
    print(f"\ndoctor: ok: {checked} agrees with float32 eager")
    return 0
