"""`alphazero bench learner`: training samples per second, beside inference at the same batch size.

Each point times the learner's real step (``learner.trainer.Trainer.step``:
numpy batch to the device, forward, the masked-softmax and value losses,
backward, gradient norm, SGD with momentum and weight decay) on a synthetic
batch of random positions with 30 legal moves each. The baseline, measured in
the same run on the same network, device and batch size, is inference alone
(``Evaluator.evaluate``: compact numpy in, numpy out, no gradients); a training
step costs about three forward passes, so expect about 0.3x. A third figure
times the replay window's batch assembly (``ReplayWindow.sample``: the compact
arrays and each position's moves, sparse) against the training rate.

The last figures time a step with its batch from a replay window of synthetic
shards, both ways in the same run, in alternate rounds: the old path (the
batch sampled on the training thread, its dense float32 [B, 4672] targets and
legal mask built on the host and copied from pageable memory, the action
values picked from a dense array) against the learner's (learner.feed: the
batch sampled and staged on a prefetch thread, pinned on CUDA, the dense
targets scattered on the device); printed as the learner's speed against the
old path's (EXPERIMENTS.md, "The learner's targets sparse on the
device, a prefetch thread").

Batch sizes: each preset's ``learner.batch_size`` on CUDA (autocast in the
precision the device's compute capability takes: bf16 from 8.0, float16 with
loss scaling from 7.0; channels_last). On a CPU the tiny preset keeps its batch of 256, but the
20x256 alphazero network is slow there (a training step at batch 16 takes
about 0.8 s on 2 cores; at 4096 it would take minutes), so it runs batch 16
and the fewest rounds: the whole default run takes about a minute on 2
cores. Each point is the fastest of
several timed rounds (other processes only ever make a round slower).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alphazero.app.bench import (
    add_threads_and_precision_arguments,
    bench_devices,
    preset_list,
    rate,
    ratio,
)
from alphazero.arguments import nonnegative_int, positive_float
from alphazero.chess.moves import NUM_MOVES
from alphazero.config import apply_overrides
from alphazero.presets import get_preset

if TYPE_CHECKING:
    import numpy as np
    import torch

    from learner.game_targets import GameTargets
    from learner.replay import Batch

# torch, numpy, rich and the learner are imported inside the functions that use
# them: the CLI imports every bench module to build its parser.

DEFAULT_PRESETS = "tiny,alphazero"
CPU_BATCH = {"alphazero": 16, "cf-6m": 16}  # CPU batch sizes where the preset's own is far too slow
LEGAL_MOVES = 30  # about the number of legal moves in a middlegame
WARMUP_STEPS = 2  # the first steps allocate buffers and pick convolution algorithms
MIN_ROUNDS = 3


@dataclass
class Point:
    preset: str
    parameters: int
    device: str
    batch: int
    train_s: float  # seconds per training step
    infer_s: float  # seconds per inference pass
    sample_s: float  # seconds per replay batch
    dense_s: float  # seconds per step with its batch the old way (dense host targets, sampled inline)
    fed_s: float  # seconds per step with its batch the learner's way (sparse, prefetched, scattered on the device)
    dense_batch_s: float  # seconds per batch alone, sampled and on the device the old way
    sparse_batch_s: float  # the same the learner's way (staged, its targets scattered on the device), on one thread

    def per_second(self, seconds: float) -> float:
        return self.batch / seconds if seconds > 0 else 0.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", type=preset_list, default=preset_list(DEFAULT_PRESETS), metavar="NAMES",
                        help=f"comma-separated presets to measure (default: {DEFAULT_PRESETS})")
    parser.add_argument("--device", default="auto", help="auto (the CPU, and CUDA when present), cpu, cuda or cuda:N")
    parser.add_argument("--batch-size", type=nonnegative_int, default=0, metavar="N",
                        help="batch size for every point (default 0: the preset's learner.batch_size; on a CPU "
                             f"{', '.join(f'{k} {v}' for k, v in CPU_BATCH.items())})")
    parser.add_argument("--seconds", type=positive_float, default=2.0, help="timed seconds per figure (default: 2.0)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the network (slow first steps)")
    add_threads_and_precision_arguments(parser)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field of every measured preset, e.g. --set network.blocks=8 "
                             "--set network.filters=96 (repeatable)")


def _batch_size(preset: str, device: torch.device, requested: int) -> int:
    if requested > 0:
        return requested
    own = get_preset(preset).learner.batch_size
    return own if device.type == "cuda" else min(own, CPU_BATCH.get(preset, own))


def synthetic_batch(size: int, rng: np.random.Generator, targets: GameTargets | None = None) -> Batch:
    """Builds a batch of random positions, each with LEGAL_MOVES legal moves, a visit share over them, a
    result and a root value, and the game targets ``targets`` asks for (the reply's moves and shares, the
    short-term value, the plies left), as the learner's window builds them for a preset that trains them."""
    import numpy as np

    from learner.batch import Batch

    def moves_and_shares() -> tuple[np.ndarray, np.ndarray]:
        moves = np.argsort(rng.random((size, NUM_MOVES)), axis=1)[:, :LEGAL_MOVES].reshape(-1).astype(np.int16)
        return moves, rng.dirichlet(np.full(LEGAL_MOVES, 0.3), size=size).astype(np.float32).reshape(-1)

    moves, shares = moves_and_shares()
    offsets = np.arange(size + 1, dtype=np.int64) * LEGAL_MOVES
    planes = rng.integers(0, np.iinfo(np.uint64).max, size=(size, 112), dtype=np.uint64, endpoint=True)
    scalars = rng.integers(0, 100, size=(size, 7)).astype(np.float32)
    results = rng.integers(-1, 2, size).astype(np.float32)
    batch = Batch(planes, scalars, offsets, moves, shares, results, rng.uniform(-1, 1, size).astype(np.float32))
    if targets is None:
        return batch
    extra: dict[str, np.ndarray] = {}
    if targets.reply:
        extra["reply_moves"], extra["reply_shares"] = moves_and_shares()
        extra["reply_offsets"] = offsets
    if targets.short_term_plies:
        extra["short_term"] = rng.uniform(-1, 1, size).astype(np.float32)
    if targets.moves_left:
        extra["moves_left"] = rng.integers(1, 200, size).astype(np.float32)
    return dataclasses.replace(batch, **extra)


def _fastest(run_once: Callable[[], object], seconds: float, sync: Callable[[], object], *,
             warmup: int = WARMUP_STEPS) -> float:
    """Times ``run_once``; returns the seconds per call of the fastest of at least MIN_ROUNDS rounds.

    The budget is split into rounds of several calls when one call is short;
    ``sync`` waits for the device at the end of each round.
    """
    for _ in range(warmup):
        run_once()
    sync()
    start = time.perf_counter()
    run_once()
    sync()
    one = time.perf_counter() - start
    per_round = max(1, round(seconds / MIN_ROUNDS / max(one, 1e-9)))
    best, rounds, start = one, 0, time.perf_counter()
    while rounds < MIN_ROUNDS or time.perf_counter() - start < seconds:
        round_start = time.perf_counter()
        for _ in range(per_round):
            run_once()
        sync()
        best = min(best, (time.perf_counter() - round_start) / per_round)
        rounds += 1
    return best


def _write_shards(directory: Path, batch: int) -> None:
    """Writes four synthetic shards of max(batch, 256) positions each into ``directory``."""
    import numpy as np

    from alphazero.store.shards import Shard, shard_name, write_shard

    rng = np.random.default_rng(1)
    n = max(batch, 256)  # positions per shard; four shards
    for _ in range(4):
        offsets = np.arange(n + 1, dtype=np.int64) * LEGAL_MOVES
        indices = np.tile(rng.choice(NUM_MOVES, LEGAL_MOVES, replace=False), n).astype(np.int16)
        probs = rng.dirichlet(np.full(LEGAL_MOVES, 0.3), size=n).astype(np.float32).reshape(-1)
        write_shard(directory / shard_name("bench"), Shard(
            planes=rng.integers(0, 2**63, size=(n, 112), dtype=np.uint64), scalars=np.zeros((n, 7), np.float32),
            policy_offsets=offsets, policy_indices=indices, policy_probs=probs,
            # One long game per shard, ply by ply: the reply and short-term targets have a next position.
            results=np.zeros(n, np.int8), game=np.zeros(n, np.int32), ply=np.arange(n, dtype=np.int16),
            root_values=np.zeros(n, np.float32), games=[{}]))


def _window(directory: Path, targets: GameTargets) -> Any:
    from learner.replay import ReplayWindow

    window = ReplayWindow(directory, window_positions=10**9, max_sample_reuse=0, targets=targets)
    window.refresh()
    return window


def _sampling_seconds(directory: Path, batch: int, seconds: float, targets: GameTargets) -> float:
    """Times ReplayWindow.sample(batch) over the window of the shards in ``directory``, building ``targets``."""
    window = _window(directory, targets)
    return _fastest(lambda: window.sample(batch), seconds / 2, lambda: None)


def _measure(preset: str, device: torch.device, precision: str, args: argparse.Namespace) -> Point:
    import numpy as np
    import torch

    config = apply_overrides(get_preset(preset), args.overrides)
    batch_size = _batch_size(preset, device, args.batch_size)
    from learner.game_targets import GameTargets

    targets = GameTargets.of(config.learner)  # the preset's training-only targets (tiny's reply, short-term)
    batch = synthetic_batch(batch_size, np.random.default_rng(0), targets)
    # The device the model lives on, not the current one (GPU 0 unless told): `--device cuda:1` waits for cuda:1.
    sync = functools.partial(torch.cuda.synchronize, device) if device.type == "cuda" else (lambda: None)
    # One model at a time: each is freed when its function returns.
    with tempfile.TemporaryDirectory() as directory:
        _write_shards(Path(directory), batch_size)
        trainer, train_s, parameters, chosen = _training_seconds(config, batch, device, precision, args, sync)
        paths = paths_seconds(trainer, Path(directory), batch_size, args.seconds, sync)
        del trainer
        infer_s = _inference_seconds(config, batch, device, precision, args, sync)
        sample_s = _sampling_seconds(Path(directory), batch_size, args.seconds, targets)
    name = _tower(preset, config.network) if args.overrides else preset
    return Point(name, parameters, _device_label(device, chosen), batch_size, train_s, infer_s, sample_s, *paths)


def _training_seconds(config: Any, batch: Any, device: torch.device, precision: str, args: argparse.Namespace,
                      sync: Callable[[], None]) -> tuple[Any, float, int, str]:
    """The trainer, the fastest training step's seconds on ``batch``, the model's trainable parameters and the
    precision the steps ran in ('bf16', 'float16' or 'float32')."""
    import torch

    from alphazero.nn.network import build_network, count_parameters
    from learner.trainer import Trainer

    torch.manual_seed(0)
    trainer = Trainer(build_network(config.network), config.learner, device, compile=args.compile,
                      precision=precision)
    steps = iter(range(10**9))
    seconds = _fastest(lambda: trainer.step(batch, next(steps)), args.seconds, sync)
    return trainer, seconds, count_parameters(trainer.model), trainer.precision_choice.name


def paths_seconds(trainer: Any, directory: Path, batch: int, seconds: float,
                  sync: Callable[[], object]) -> tuple[float, float, float, float]:
    """Times a training step with its batch from a window of the shards in ``directory``, the old way (sampled
    inline, dense host targets: learner.dense_batches) and the learner's (learner.feed), in blocks A B A B so
    that the machine's load weighs on both alike; then the batch alone (sampled and on the device, no step),
    each way on this thread. Returns the seconds per step of each, then per batch of each (fastest rounds)."""
    import itertools
    import threading

    from learner.batch_device import pins, stage
    from learner.dense_batches import dense_inputs
    from learner.feed import BatchFeed
    from learner.game_targets import GameTargets

    steps = itertools.count()
    targets = GameTargets.of(trainer.config)
    inline, prefetched = _window(directory, targets), _window(directory, targets)
    settings = dataclasses.replace(trainer.config, batch_size=batch)
    stop = threading.Event()

    def dense_step() -> None:
        trainer.step(dense_inputs(inline.sample(batch), trainer.device), next(steps))

    def fed_seconds() -> float:
        feed = BatchFeed(prefetched, None, settings, pin=pins(trainer.device), describe_wait=str)
        with feed.prefetching(0):
            def fed_step() -> None:
                staged, _ = feed.next(stop, lambda reason, text: None)
                assert staged is not None  # (no reuse cap: the window never waits)
                trainer.step(staged, next(steps))

            return _fastest(fed_step, seconds / 2, sync, warmup=1)

    dense_s = fed_s = float("inf")
    for _ in range(2):
        dense_s = min(dense_s, _fastest(dense_step, seconds / 2, sync, warmup=1))
        fed_s = min(fed_s, fed_seconds())
    pin = pins(trainer.device)
    dense_batch_s = _fastest(lambda: dense_inputs(inline.sample(batch), trainer.device), seconds / 2, sync)
    sparse_batch_s = _fastest(lambda: stage(inline.sample(batch), pin=pin).to(trainer.device), seconds / 2, sync)
    return dense_s, fed_s, dense_batch_s, sparse_batch_s


def _inference_seconds(config: Any, batch: Any, device: torch.device, precision: str, args: argparse.Namespace,
                       sync: Callable[[], None]) -> float:
    """The fastest inference pass's seconds on ``batch`` (evaluate: all 4672 logits)."""
    import torch

    from alphazero.nn.forward import Evaluator
    from alphazero.nn.network import build_network

    torch.manual_seed(0)
    evaluator = Evaluator(build_network(config.network), device, compile=args.compile, precision=precision)
    return _fastest(lambda: evaluator.evaluate(batch.planes, batch.scalars), args.seconds, sync)


def _speedup(before_s: float, after_s: float) -> str:
    return f"{before_s / after_s:.2f}x" if after_s > 0 else "-"


def _tower(preset: str, network: Any) -> str:
    """Names a preset whose network --set changed by its tower: 'small (8x96)'."""
    shape = f"{network.blocks}x{network.filters}" if network.kind == "resnet" else network.kind
    return f"{preset} ({shape})"


def _device_label(device: torch.device, precision: str) -> str:
    import torch

    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)}, {precision})"
    return f"cpu ({torch.get_num_threads()} threads, {precision})"


def run(args: argparse.Namespace) -> None:
    import torch
    from rich.console import Console
    from rich.table import Table

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    points = [_measure(name, device, precision, args) for name in args.preset for device in bench_devices(args.device)
              for precision in args.precision]
    table = Table(title="learner training samples/s (Trainer.step on numpy batches) vs inference at the same batch")
    for column in ("preset", "parameters", "device", "batch", "train samples/s", "ms/step",
                   "inference evals/s", "train vs inference", "window step ms: old / fed", "fed vs old"):
        table.add_column(column, justify="right")
    for p in points:
        table.add_row(p.preset, f"{p.parameters / 1e6:.2f}M", p.device, str(p.batch), rate(p.per_second(p.train_s)),
                      f"{p.train_s * 1e3:.1f}", rate(p.per_second(p.infer_s)),
                      ratio(p.per_second(p.train_s), p.per_second(p.infer_s)),
                      f"{p.dense_s * 1e3:.1f} / {p.fed_s * 1e3:.1f}", _speedup(p.dense_s, p.fed_s))
    console = Console(width=max(Console().width, 160))
    console.print(table)
    for p in points:
        print(f"{p.preset} on {p.device}: {rate(p.per_second(p.train_s))} training samples/s at batch {p.batch} = "
              f"{ratio(p.per_second(p.train_s), p.per_second(p.infer_s))} inference; replay batch assembly "
              f"{rate(p.per_second(p.sample_s))} samples/s = {ratio(p.per_second(p.sample_s), p.per_second(p.train_s))}"
              f" training")
        print(f"{p.preset} on {p.device}: a step with its batch from the replay window {p.fed_s * 1e3:.1f} ms "
              f"(sparse targets scattered on the device, prefetched) against {p.dense_s * 1e3:.1f} ms (dense host "
              f"targets, sampled inline) = {_speedup(p.dense_s, p.fed_s)} the old path's speed; the batch alone "
              f"{p.sparse_batch_s * 1e3:.2f} ms sparse against {p.dense_batch_s * 1e3:.2f} ms dense = "
              f"{_speedup(p.dense_batch_s, p.sparse_batch_s)}")
    if any(p.batch < get_preset(p.preset.split()[0]).learner.batch_size for p in points):
        print("on a CPU the alphazero preset runs a small batch (its 4096 would take minutes a step); "
              "--batch-size N measures another")
