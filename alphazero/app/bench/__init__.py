"""`alphazero bench`: speed figures, each printed beside a baseline measured in the same run.

One module per benchmark; each exposes `add_arguments(parser)` and `run(args)`.
"""

from __future__ import annotations

import argparse
import importlib
from typing import TYPE_CHECKING

from alphazero.arguments import thread_count
from alphazero.console import compact_number

if TYPE_CHECKING:
    import torch

BENCHES = {
    "movegen": "perft nodes/s of the Cython core vs python-chess and Stockfish",
    "search": "simulations/s of the Cython search vs a plain-Python PUCT over python-chess",
    "network": "network evaluations/s by batch size for each preset (CPU, and CUDA when present), beside the "
               "FLOPs of the search's pass (an action-value head's features, no move scored)",
    "selfplay": "self-play positions/s and the share of time spent in the network",
    "learner": "training samples/s per preset (CPU, and CUDA when present) vs inference-only evals/s at the same batch",
    "uci": "the UCI engine's nodes/s at each LeavesPerBatch beside the network's evals/s at that batch",
    "beside": "the UCI engine's nodes/s at its defaults alone and beside busy processes, engines of several "
              "checkouts side by side",
}


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    for name, help_text in BENCHES.items():
        module = importlib.import_module(f"alphazero.app.bench.{name}")
        module.add_arguments(sub.add_parser(name, help=help_text))


def run_bench(args: argparse.Namespace) -> None:
    importlib.import_module(f"alphazero.app.bench.{args.bench}").run(args)


def ratio(numerator: float, denominator: float) -> str:
    """A speed ratio printed as a number followed by x ('31.5x'); '-' when undefined."""
    if denominator <= 0 or numerator <= 0:
        return "-"
    return f"{numerator / denominator:.1f}x"


def rate(value: float) -> str:
    """A rate in a few characters, with a k, M or G suffix from 1,000 up ('12.3M'; alphazero.console's formatter)."""
    return compact_number(value, exact_below=1_000)


def precision_list(text: str) -> list[str]:
    """Parses a --precision value: comma-separated precisions, each auto, bf16 or float32 (argparse type)."""
    from alphazero.config import PRECISIONS

    names = [part.lower() for part in text.replace(" ", ",").split(",") if part]
    if not names or any(name not in PRECISIONS for name in names):
        raise argparse.ArgumentTypeError(f"precisions are {', '.join(PRECISIONS)}, comma-separated; got {text!r}")
    return names


def add_threads_and_precision_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --threads and --precision, which the network's and the learner's benchmarks take alike."""
    parser.add_argument("--threads", type=thread_count, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--precision", type=precision_list, default=precision_list("auto"), metavar="LIST",
                        help="comma-separated precisions to measure each in: auto (on CUDA bf16 from compute "
                             "capability 8.0, float16 from 7.0; on a CPU bf16 where native and faster), bf16, "
                             "float16 (CUDA), float32; e.g. float32,auto (default: auto)")


def int_list(text: str, *, what: str, most: int | None = None) -> list[int]:
    """Parses comma-separated positive integers (at most ``most``), sorted and each once; ``what`` names them in
    the error (an argparse type, through functools.partial).

    >>> int_list("256, 64,64", what="batch sizes")
    [64, 256]
    """
    try:
        values = [int(part) for part in text.replace(" ", ",").split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1 or (most is not None and max(values) > most):
        bound = f"1..{most}" if most is not None else "positive integers"
        raise argparse.ArgumentTypeError(f"{what} must be {bound}, got {text!r}")
    return sorted(set(values))


def preset_list(text: str) -> list[str]:
    """Parses a --preset value: comma-separated preset names (argparse type)."""
    from alphazero.presets import PRESET_NAMES

    names = [part for part in text.replace(" ", ",").split(",") if part]
    for name in names:
        if name not in PRESET_NAMES:
            raise argparse.ArgumentTypeError(f"unknown preset {name!r}; the presets are: {', '.join(PRESET_NAMES)}")
    return names


def bench_devices(spec: str) -> list[torch.device]:
    """The devices a bench measures: 'auto' is the CPU, plus CUDA when present; else the one named."""
    import torch

    from alphazero.nn.network import pick_device

    if spec.strip().lower() == "auto":
        return [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    return [pick_device(spec)]

