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

Each point times the path self-play uses (``Evaluator.evaluate_legal``:
compact numpy in, expansion on the device, forward pass, the logits of 32
"legal" moves per position gathered on the device, float32 numpy out) on
random positions, and is compared with batch size 1 of the same preset and
device in the same run. Each point is the fastest of five or more timed
rounds. On CUDA the evaluator runs in channels_last and the precision its compute
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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from alphazero.app.bench import bench_devices, int_list, precision_list, preset_list, rate, ratio
from alphazero.config import FORWARD_MODES, apply_overrides
from alphazero.errors import UserError
from alphazero.presets import PRESET_NAMES, get_preset

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

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


_int_list = functools.partial(int_list, what="batch sizes")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", type=preset_list, default=list(PRESET_NAMES), metavar="NAMES",
                        help=f"comma-separated presets to measure (default: {','.join(PRESET_NAMES)})")
    parser.add_argument("--batch-sizes", type=_int_list, default=_int_list(DEFAULT_BATCH_SIZES), metavar="SIZES",
                        help=f"comma-separated batch sizes (default: {DEFAULT_BATCH_SIZES}); 1 is always added "
                             "as the baseline")
    parser.add_argument("--device", default="auto",
                        help="auto (the CPU, and CUDA when present), cpu, cuda or cuda:N")
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per point (default: 1.0)")
    parser.add_argument("--max-pass-seconds", type=float, default=1.0,
                        help="skip batch sizes whose single pass would take longer (default: 1.0)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the network (slow first passes)")
    parser.add_argument("--forward", choices=FORWARD_MODES, default=None,
                        help="how a CUDA pass runs (default: the preset's selfplay.cuda_forward; the CPU runs eager)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--precision", type=precision_list, default=precision_list("auto"), metavar="LIST",
                        help="comma-separated precisions to measure each in: auto (on CUDA bf16 from compute "
                             "capability 8.0, float16 from 7.0; on a CPU bf16 where native and faster), bf16, "
                             "float16 (CUDA), float32; e.g. float32,auto (default: auto)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field of every measured preset, e.g. --set network.filters=64 "
                             "(repeatable)")


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
    arrays = _random_positions(batch, rng)
    pinned = evaluator.pin(arrays)
    for target, array in zip(pinned, arrays):
        target[...] = array
    arrays = pinned
    warmup_passes, start = 0, time.perf_counter()
    while warmup_passes < WARMUP_PASSES or time.perf_counter() - start < WARMUP_SECONDS * seconds:
        evaluator.evaluate_legal(*arrays)
        warmup_passes += 1
    last_pass = time.perf_counter()
    evaluator.evaluate_legal(*arrays)
    per_round = max(1, round(seconds / ROUNDS / (time.perf_counter() - last_pass)))
    best, rounds, start = float("inf"), 0, time.perf_counter()
    while rounds < ROUNDS or time.perf_counter() - start < seconds:
        round_start = time.perf_counter()
        for _ in range(per_round):
            evaluator.evaluate_legal(*arrays)  # returns numpy, so CUDA work has finished when it does
        best = min(best, (time.perf_counter() - round_start) / per_round)
        rounds += 1
    profiles = [evaluator.profile_legal(*arrays) for _ in range(PROFILE_PASSES)]
    stages = {name: min(p[name] for p in profiles) for name in profiles[0]}
    return Point(batch, best, stages=stages)


def _measure_model(evaluator: Evaluator, batches: list[int], args: argparse.Namespace) -> list[Point]:
    import numpy as np

    rng = np.random.default_rng(0)
    points: list[Point] = []
    seconds_per_position = 0.0
    for batch in batches:
        # Per-position time falls as batches grow, so this prediction errs long.
        predicted = seconds_per_position * batch
        if predicted > args.max_pass_seconds:
            points.append(Point(batch, skipped=f"~{predicted:.1f} s/pass"))
            continue
        point = measure_batch(evaluator, batch, args.seconds, rng)
        seconds_per_position = point.seconds_per_pass / batch
        points.append(point)
    return points


def _device_label(device: torch.device, forward: str, precision: str) -> str:
    """Names the device and what the pass ran in (Evaluator.precision: 'bf16', 'float16' or 'float32')."""
    import torch

    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)}, {precision}, {forward})"
    return f"cpu ({torch.get_num_threads()} threads, {precision})"


def run(args: argparse.Namespace) -> None:
    import torch
    from rich.console import Console
    from rich.table import Table

    from alphazero.nn.action_values import has_action_values
    from alphazero.nn.forward import Evaluator
    from alphazero.nn.network import build_network, count_parameters

    if args.seconds <= 0 or args.max_pass_seconds <= 0:
        raise UserError("--seconds and --max-pass-seconds must be positive")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    devices = bench_devices(args.device)
    batches = sorted(set(args.batch_sizes) | {1})
    configs = {name: apply_overrides(get_preset(name), args.overrides).network for name in args.preset}
    table = Table(title="network evaluations per second (Evaluator.evaluate_legal: compact numpy in, the legal "
                        "moves' logits out)",
                  caption="MFLOP/eval: the search's pass per position, the one timed (with an action-value head: "
                          "its per-square features, no move scored)")
    for column in ("preset", "kind", "parameters", "MFLOP/eval", "device", "batch", "evals/s", "ms/pass",
                   "input ms", "forward ms", "output ms", "vs batch 1"):
        table.add_column(column, justify="right")
    notes, best = [], []
    for name, config in configs.items():
        for device, precision in ((device, precision) for device in devices for precision in args.precision):
            torch.manual_seed(0)
            model = build_network(config)
            flops = flops_per_evaluation(model)
            if device == devices[0] and precision == args.precision[0] and has_action_values(model):
                notes.append(f"{name}: {flops_per_evaluation(model, legal_values=True) / 1e6:.1f} MFLOP/eval with "
                             f"the action-value head's values of {LEGAL_MOVES} legal moves (search.fpu_mode or "
                             f"gumbel_unvisited = action_value; not timed here)")
            forward = args.forward or get_preset(name).selfplay.cuda_forward
            evaluator = Evaluator(model, device, compile=args.compile, forward=forward, precision=precision)
            if device.type == "cpu":
                notes.append(f"{name} on the CPU, precision {precision}: {evaluator.precision_text()}")
            points = _measure_model(evaluator, batches, args)
            baseline = points[0].evals_per_second
            for i, point in enumerate(points):
                label = ((name, config.kind, f"{count_parameters(model) / 1e6:.2f}M", f"{flops / 1e6:.1f}",
                          _device_label(device, evaluator.forward_mode, evaluator.precision)) if i == 0 else ("",) * 5)
                if point.skipped:
                    table.add_row(*label, str(point.batch), "skipped", point.skipped, "-", "-", "-", "-")
                else:
                    stages = point.stages or {}
                    table.add_row(*label, str(point.batch), rate(point.evals_per_second),
                                  f"{point.seconds_per_pass * 1e3:.2f}",
                                  *(f"{stages.get(name, 0.0) * 1e3:.2f}" for name in ("input", "forward", "output")),
                                  ratio(point.evals_per_second, baseline))
            table.rows[-1].end_section = True
            skipped = [str(p.batch) for p in points if p.skipped]
            if skipped:
                notes.append(f"{name} on {device}: batch sizes {', '.join(skipped)} skipped, a pass would take over "
                             f"{args.max_pass_seconds:g} s (raise --max-pass-seconds to measure them)")
            top = max((p for p in points if not p.skipped), key=lambda p: p.evals_per_second)
            best.append(f"{name} on {device}: {flops / 1e6:.1f} MFLOP/eval, best {rate(top.evals_per_second)} "
                        f"evals/s at batch {top.batch} ({rate(top.evals_per_second * flops)}FLOP/s), "
                        f"{ratio(top.evals_per_second, baseline)} batch 1")
            del evaluator, model
    console = Console(width=max(Console().width, 150))
    console.print(table)
    for line in best + notes:
        print(line)
