"""`alphazero bench network`: network evaluations per second by batch size, per preset and device.

Beside the speed, each preset's FLOPs per evaluation: counted by
``torch.utils.flop_counter.FlopCounterMode`` over one pass of the search (the
matrix products and convolutions; a multiply-add counts 2, element-wise work
such as softmax and activations is not counted), divided by the batch. The
search's pass is the one timed: with an action-value head it computes the
head's per-square features but scores no move (alphazero.nn.action_values
features_only), not the every-move scoring of a plain ``model(planes,
scalars)`` call, which only the ``av`` player and the probe ask for. For a
network with the head a note adds the pass that also scores the LEGAL_MOVES
legal moves (``evaluate_legal(..., action_values=True)``: search.fpu_mode or
search.gumbel_unvisited = action_value).
``--set network.KEY=VALUE`` changes every measured preset's network (e.g. a
wider resnet to compare with a Chessformer of some FLOPs).

``--beside "NAME KEY=VALUE ..."`` (repeatable) measures a variant beside each
preset in the same process: the preset with these overrides too (after
--set's), e.g. ``--beside "se network.se_ratio=2"``. At each batch size and
precision the preset and its variants are timed in alternating rounds
(preset, se, se, preset, ...), so that whatever else the machine runs slows
them alike; each variant's rows print its evals/s and its ratio to the
preset's at the same batch size and precision (``se 0.93x``), and a line
after the table lists those ratios.

Each point times the path self-play uses (``Evaluator.evaluate_legal``:
compact numpy in, expansion on the device, forward pass, the logits of 32
"legal" moves per position gathered on the device, float32 numpy out) on
random positions, and is compared with batch size 1 of the same preset and
device in the same run. Each point is the fastest of five or more timed
rounds (with variants, rounds that alternate between the preset and them).
On CUDA the evaluator runs in channels_last and the precision its compute
capability takes (bf16 from 8.0, float16 from 7.0: alphazero.nn.precision), and the
forward pass the way self-play runs it (the preset's selfplay.cuda_forward:
CUDA graphs or torch.compile per batch size; --forward to choose). Beside
each point: where one pass goes (``Evaluator.profile_legal``, the fastest of
a few passes stage by stage): input (the batch to the device), forward (the
network) and output (the gather and the copy to the host).

A point is skipped when one pass would take longer than --max-pass-seconds
(default 1 s, predicted from the previous batch size), which keeps the 20x256
alphazero network on a small CPU to its small batches (up to 64 on 2 cores) and
the whole default run near a minute there; the output says what was skipped.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from alphazero.app.bench import (
    add_threads_and_precision_arguments,
    bench_devices,
    int_list,
    preset_list,
    rate,
    ratio,
)
from alphazero.arguments import positive_float
from alphazero.config import FORWARD_MODES, Config, apply_overrides
from alphazero.errors import UserError
from alphazero.presets import PRESET_NAMES, get_preset

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from alphazero.config import NetworkConfig
    from alphazero.nn.forward import Evaluator

# torch, numpy and rich are imported inside the functions that use them: the CLI
# imports every bench module to build its parser, and `alphazero perft` must not load torch.

DEFAULT_BATCH_SIZES = "1,8,32,64,128,256"
WARMUP_PASSES = 3  # the first passes allocate buffers and pick convolution algorithms
WARMUP_SECONDS = 0.2  # and warm-up lasts at least this share of --seconds
ROUNDS = 5  # timed rounds per point; the fastest counts
LEGAL_MOVES = 32  # "legal" moves per random position: about a middlegame's count
PROFILE_PASSES = 5  # passes timed stage by stage per point; the fastest of each stage counts


@dataclass
class Point:
    batch: int
    seconds_per_pass: float = 0.0
    skipped: str = ""
    stages: dict[str, float] | None = None  # seconds of input, forward and output

    @property
    def evals_per_second(self) -> float:
        return self.batch / self.seconds_per_pass if self.seconds_per_pass > 0 else 0.0


@dataclass(frozen=True)
class Variant:
    """A --beside variant: its name and the config overrides it adds to each measured preset."""

    name: str
    overrides: tuple[str, ...]


def beside_variant(text: str) -> Variant:
    """Parses a --beside value: a name, then one or more section.key=value overrides, separated by spaces
    (argparse type). The keys and values are checked against each preset when the bench starts.

    >>> beside_variant("se network.se_ratio=2")
    Variant(name='se', overrides=('network.se_ratio=2',))
    """
    name, *overrides = text.split() or [""]
    if not name or "=" in name:
        raise argparse.ArgumentTypeError(f"a variant is a name, then its overrides (section.key=value, separated "
                                         f"by spaces), e.g. \"se network.se_ratio=2\"; got {text!r}")
    if not overrides:
        raise argparse.ArgumentTypeError(f"variant {name!r} has no overrides: give one or more section.key=value "
                                         f"after its name, e.g. \"{name} network.se_ratio=2\"")
    malformed = [item for item in overrides if "=" not in item or "." not in item.partition("=")[0]]
    if malformed:
        raise argparse.ArgumentTypeError(f"variant {name!r}: an override must look like section.key=value, "
                                         f"got {malformed[0]!r}")
    return Variant(name, tuple(overrides))


@dataclass
class _Measured:
    """One network measured at one device and precision: the preset as given, or a variant of it."""

    label: str  # the preset's name, or 'preset + variant'
    config: NetworkConfig
    model: nn.Module
    flops: float
    evaluator: Evaluator
    points: list[Point]


_int_list = functools.partial(int_list, what="batch sizes")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", type=preset_list, default=list(PRESET_NAMES), metavar="NAMES",
                        help=f"comma-separated presets to measure (default: {','.join(PRESET_NAMES)})")
    parser.add_argument("--batch-sizes", type=_int_list, default=_int_list(DEFAULT_BATCH_SIZES), metavar="SIZES",
                        help=f"comma-separated batch sizes (default: {DEFAULT_BATCH_SIZES}); 1 is always added "
                             "as the baseline")
    parser.add_argument("--device", default="auto",
                        help="auto (the CPU, and CUDA when present), cpu, cuda or cuda:N")
    parser.add_argument("--seconds", type=positive_float, default=1.0, help="timed seconds per point (default: 1.0)")
    parser.add_argument("--max-pass-seconds", type=positive_float, default=1.0,
                        help="skip batch sizes whose single pass would take longer (default: 1.0)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the network (slow first passes)")
    parser.add_argument("--forward", choices=FORWARD_MODES, default=None,
                        help="how a CUDA pass runs (default: the preset's selfplay.cuda_forward; the CPU runs eager)")
    add_threads_and_precision_arguments(parser)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field of every measured preset, e.g. --set network.filters=64 "
                             "(repeatable)")
    parser.add_argument("--beside", dest="variants", type=beside_variant, action="append", default=[],
                        metavar='"NAME KEY=VALUE ..."',
                        help="also measure each preset with these overrides (after --set's), in the same process: "
                             "at each batch size and precision the preset and its variants are timed in "
                             "alternating rounds, and each variant's rows print its evals/s and its ratio to the "
                             "preset's (e.g. --beside \"se network.se_ratio=2\" prints 'se 0.93x'); repeatable. "
                             "A variant may set selfplay.cuda_forward when --forward is not given")


def _random_positions(batch: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Random compact positions with LEGAL_MOVES random move indices each: planes, scalars,
    legal_indices [B, 256] (as wide as the search's) and legal_counts."""
    import numpy as np

    from alphazero.chess.moves import NUM_MOVES
    from alphazero.nn.planes import COMPACT_PLANES, NUM_SCALARS

    planes = rng.integers(0, np.iinfo(np.uint64).max, size=(batch, COMPACT_PLANES), dtype=np.uint64, endpoint=True)
    scalars = rng.integers(0, 100, size=(batch, NUM_SCALARS)).astype(np.float32)
    indices = np.zeros((batch, 256), np.int32)  # as wide as the search's arrays
    indices[:, :LEGAL_MOVES] = rng.integers(0, NUM_MOVES, size=(batch, LEGAL_MOVES))
    counts = np.full(batch, LEGAL_MOVES, np.int32)
    return planes, scalars, indices, counts


def flops_per_evaluation(model: nn.Module, batch: int = 4, *, legal_values: bool = False) -> float:
    """Counts the FLOPs of one pass of the search per position (FlopCounterMode; float32 on the CPU, no
    gradients): the forward pass without the action-value head's every-move scoring (features_only), and
    with ``legal_values`` the head's values of LEGAL_MOVES legal moves too (a network with the head).

    A copy of the model runs, so the caller's model keeps its device and mode.
    """
    import copy

    import numpy as np
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from alphazero.nn.action_values import action_features, action_value_head, features_only
    from alphazero.nn.planes import compact_to_torch

    counted = copy.deepcopy(model).to("cpu").float().eval()
    compact = _random_positions(batch, np.random.default_rng(0))
    planes, scalars = compact_to_torch(compact[0], compact[1], "cpu")
    head = action_value_head(counted)
    legal = torch.from_numpy(compact[2][:, :LEGAL_MOVES].astype(np.int64))
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        out = features_only(counted)(planes, scalars)  # the search's pass: Evaluator.evaluate_legal's
        if legal_values and head is not None:
            head.legal_values(action_features(out), legal)
    return counter.get_total_flops() / batch


def measure_batch(evaluator: Evaluator, batch: int, seconds: float, rng: np.random.Generator) -> Point:
    """Times evaluator.evaluate_legal on ``batch`` positions for about ``seconds``, then its stages.

    The time is split into at least ROUNDS rounds and the fastest round counts,
    as timeit does: other processes on the machine only ever make a round slower.
    """
    return measure_side_by_side([evaluator], batch, seconds, rng)[0]


def measure_side_by_side(evaluators: Sequence[Evaluator], batch: int, seconds: float,
                         rng: np.random.Generator) -> list[Point]:
    """Times each evaluator's evaluate_legal on the same ``batch`` positions for about ``seconds`` each, in
    alternating rounds, then their stages: one Point per evaluator, in order.

    Each round times one evaluator for about seconds / ROUNDS; the order turns
    round every round (A B, B A, A B, ...), so a slower or faster spell of the
    machine falls on every evaluator alike. The fastest round of each counts.
    """
    arrays = _random_positions(batch, rng)
    timed: list[tuple[Evaluator, tuple[np.ndarray, ...], int]] = []  # evaluator, its arrays, passes per round
    for evaluator in evaluators:
        pinned = evaluator.pin(arrays)
        for target, array in zip(pinned, arrays):
            target[...] = array
        timed.append((evaluator, pinned, _warm_up(evaluator, pinned, seconds)))
    best = [float("inf")] * len(timed)
    order = list(range(len(timed)))
    rounds, start = 0, time.perf_counter()
    while rounds < ROUNDS or time.perf_counter() - start < seconds * len(timed):
        for i in order:
            evaluator, pinned, per_round = timed[i]
            round_start = time.perf_counter()
            for _ in range(per_round):
                evaluator.evaluate_legal(*pinned)  # returns numpy, so CUDA work has finished when it does
            best[i] = min(best[i], (time.perf_counter() - round_start) / per_round)
        order.reverse()
        rounds += 1
    profiles: list[list[dict[str, float]]] = [[] for _ in timed]
    for _ in range(PROFILE_PASSES):
        for i, (evaluator, pinned, _) in enumerate(timed):
            profiles[i].append(evaluator.profile_legal(*pinned))
    return [Point(batch, seconds_per_pass, stages={name: min(p[name] for p in passes) for name in passes[0]})
            for seconds_per_pass, passes in zip(best, profiles)]


def _warm_up(evaluator: Evaluator, arrays: tuple[np.ndarray, ...], seconds: float) -> int:
    """Runs WARMUP_PASSES passes or more (WARMUP_SECONDS of ``seconds``), then gets how many passes make a
    round of about seconds / ROUNDS, from one more pass."""
    warmup_passes, start = 0, time.perf_counter()
    while warmup_passes < WARMUP_PASSES or time.perf_counter() - start < WARMUP_SECONDS * seconds:
        evaluator.evaluate_legal(*arrays)
        warmup_passes += 1
    last_pass = time.perf_counter()
    evaluator.evaluate_legal(*arrays)
    return max(1, round(seconds / ROUNDS / (time.perf_counter() - last_pass)))


def _measure_models(evaluators: Sequence[Evaluator], batches: list[int], args: argparse.Namespace) -> list[list[Point]]:
    """Measures the evaluators side by side at each batch size: one list of Points per evaluator.

    An evaluator's batch size is skipped when its pass would take over
    --max-pass-seconds (predicted from its previous batch size); the others
    are still measured there.
    """
    import numpy as np

    rng = np.random.default_rng(0)
    points: list[list[Point]] = [[] for _ in evaluators]
    seconds_per_position = [0.0] * len(evaluators)
    for batch in batches:
        # Per-position time falls as batches grow, so this prediction errs long.
        predicted = [seconds * batch for seconds in seconds_per_position]
        measured = [i for i in range(len(evaluators)) if predicted[i] <= args.max_pass_seconds]
        for i in set(range(len(evaluators))) - set(measured):
            points[i].append(Point(batch, skipped=f"~{predicted[i]:.1f} s/pass"))
        if not measured:
            continue
        for i, point in zip(measured, measure_side_by_side([evaluators[i] for i in measured], batch, args.seconds,
                                                           rng)):
            seconds_per_position[i] = point.seconds_per_pass / batch
            points[i].append(point)
    return points


def _device_label(device: torch.device, forward: str, precision: str) -> str:
    """Names the device and what the pass ran in (Evaluator.precision: 'bf16', 'float16' or 'float32')."""
    import torch

    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)}, {precision}, {forward})"
    return f"cpu ({torch.get_num_threads()} threads, {precision})"


def _preset_configs(name: str, args: argparse.Namespace) -> list[tuple[str, Config]]:
    """The configs measured for preset ``name``: the preset with --set's overrides, labelled with its name, then
    each --beside variant's (--set's overrides, then the variant's), labelled 'preset + variant'.

    Raises:
        UserError: an override that does not apply, naming the variant it came from.
    """
    configs = [(name, apply_overrides(get_preset(name), args.overrides))]
    for variant in args.variants:
        try:
            config = apply_overrides(get_preset(name), [*args.overrides, *variant.overrides])
        except UserError as error:
            raise UserError(f"--beside {variant.name!r} on preset {name}: {error}") from error
        configs.append((f"{name} + {variant.name}", config))
    return configs


def _build(label: str, config: Config, device: torch.device, precision: str, args: argparse.Namespace,
           notes: list[str], *, first: bool) -> _Measured:
    """Builds one network (seed 0) and its Evaluator, adding its notes (the action-value head's FLOPs when
    ``first``, the CPU's precision) to ``notes``."""
    import torch

    from alphazero.nn.action_values import has_action_values
    from alphazero.nn.forward import Evaluator
    from alphazero.nn.network import build_network

    torch.manual_seed(0)
    model = build_network(config.network)
    flops = flops_per_evaluation(model)
    if first and has_action_values(model):
        notes.append(f"{label}: {flops_per_evaluation(model, legal_values=True) / 1e6:.1f} MFLOP/eval with "
                     f"the action-value head's values of {LEGAL_MOVES} legal moves (search.fpu_mode or "
                     f"gumbel_unvisited = action_value; not timed here)")
    forward = args.forward or config.selfplay.cuda_forward
    evaluator = Evaluator(model, device, compile=args.compile, forward=forward, precision=precision)
    if device.type == "cpu":
        notes.append(f"{label} on the CPU, precision {precision}: {evaluator.precision_text()}")
    return _Measured(label, config.network, model, flops, evaluator, [])


def _versus(point: Point, preset: Point) -> str:
    """A variant's evals/s over the preset's at the same batch size ('0.93x'; '-' when either was skipped)."""
    if point.skipped or preset.skipped or point.evals_per_second <= 0 or preset.evals_per_second <= 0:
        return "-"
    return f"{point.evals_per_second / preset.evals_per_second:.2f}x"


def _beside_line(entry: _Measured, preset: _Measured, device: torch.device, versus: list[str]) -> str:
    """Says a variant's ratios to its preset at each batch size, and how the two passes ran where they differ
    (a precision of 'auto' chooses for each network by timing it on a CPU; a capture may fall back)."""
    ratios = ", ".join(f"{cell} at batch {point.batch}" for cell, point in zip(versus, entry.points))
    line = (f"{entry.label} vs {preset.label} on {device}, {entry.evaluator.describe_pass()}: evals/s {ratios} "
            f"(the two timed in alternating rounds)")
    if entry.evaluator.describe_pass() != preset.evaluator.describe_pass():
        line += f"; not alike: {preset.label} ran {preset.evaluator.describe_pass()}"
    return line


def _rows(entry: _Measured, device: torch.device, versus: list[str] | None) -> list[tuple[str, ...]]:
    """The table's rows of one measured network, one per batch size; ``versus`` (with --beside) is the last
    column's cell at each batch size."""
    from alphazero.nn.network import count_parameters

    rows = []
    baseline = entry.points[0].evals_per_second
    for i, point in enumerate(entry.points):
        label = ((entry.label, entry.config.kind, f"{count_parameters(entry.model) / 1e6:.2f}M",
                  f"{entry.flops / 1e6:.1f}",
                  _device_label(device, entry.evaluator.forward_mode, entry.evaluator.precision))
                 if i == 0 else ("",) * 5)
        cells: tuple[str, ...]
        if point.skipped:
            cells = (str(point.batch), "skipped", point.skipped, "-", "-", "-", "-")
        else:
            stages = point.stages or {}
            cells = (str(point.batch), rate(point.evals_per_second), f"{point.seconds_per_pass * 1e3:.2f}",
                     *(f"{stages.get(stage, 0.0) * 1e3:.2f}" for stage in ("input", "forward", "output")),
                     ratio(point.evals_per_second, baseline))
        rows.append((*label, *cells, *((versus[i],) if versus is not None else ())))
    return rows


def run(args: argparse.Namespace) -> None:
    import torch
    from rich.console import Console
    from rich.table import Table

    names = [variant.name for variant in args.variants]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise UserError(f"--beside {twice!r} is given twice: each variant needs a name of its own")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    devices = bench_devices(args.device)
    batches = sorted(set(args.batch_sizes) | {1})
    configs = {name: _preset_configs(name, args) for name in args.preset}  # every one checked before measuring
    table = Table(title="network evaluations per second (Evaluator.evaluate_legal: compact numpy in, the legal "
                        "moves' logits out)",
                  caption="MFLOP/eval: the search's pass per position, the one timed (with an action-value head: "
                          "its per-square features, no move scored)"
                          + ("; vs preset: a variant's evals/s over the preset's at the same batch size and "
                             "precision, the two timed in alternating rounds" if args.variants else ""))
    for column in ("preset", "kind", "parameters", "MFLOP/eval", "device", "batch", "evals/s", "ms/pass",
                   "input ms", "forward ms", "output ms", "vs batch 1", *(("vs preset",) if args.variants else ())):
        table.add_column(column, justify="right")
    notes: list[str] = []
    best: list[str] = []
    beside: list[str] = []
    for networks in configs.values():
        for device, precision in ((device, precision) for device in devices for precision in args.precision):
            first = device == devices[0] and precision == args.precision[0]
            measured = [_build(label, config, device, precision, args, notes, first=first)
                        for label, config in networks]
            for entry, points in zip(measured, _measure_models([entry.evaluator for entry in measured], batches,
                                                               args)):
                entry.points = points
            preset = measured[0]
            for entry, variant in zip(measured, [None, *args.variants]):
                versus = None  # the last column's cells, with --beside
                if variant is not None:
                    ratios = [_versus(point, against) for point, against in zip(entry.points, preset.points)]
                    beside.append(_beside_line(entry, preset, device, ratios))
                    versus = [f"{variant.name} {cell}" for cell in ratios]
                elif args.variants:
                    versus = [""] * len(entry.points)
                for row in _rows(entry, device, versus):
                    table.add_row(*row)
                skipped = [str(p.batch) for p in entry.points if p.skipped]
                if skipped:
                    notes.append(f"{entry.label} on {device}: batch sizes {', '.join(skipped)} skipped, a pass "
                                 f"would take over {args.max_pass_seconds:g} s (raise --max-pass-seconds to "
                                 f"measure them)")
                baseline = entry.points[0].evals_per_second
                top = max((p for p in entry.points if not p.skipped), key=lambda p: p.evals_per_second)
                best.append(f"{entry.label} on {device}: {entry.flops / 1e6:.1f} MFLOP/eval, best "
                            f"{rate(top.evals_per_second)} evals/s at batch {top.batch} "
                            f"({rate(top.evals_per_second * entry.flops)}FLOP/s), "
                            f"{ratio(top.evals_per_second, baseline)} batch 1")
            table.rows[-1].end_section = True
            del measured, preset
    console = Console(width=max(Console().width, 170 if args.variants else 150))  # (a variant adds a column)
    console.print(table)
    for line in best + beside + notes:
        print(line)

