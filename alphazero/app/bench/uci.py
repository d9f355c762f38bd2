"""`alphazero bench uci`: the UCI engine's nodes/s at each LeavesPerBatch beside the network's evals/s at that batch.

The engine is the one `alphazero uci` runs (eval.uci.UciEngine, in this
process, driven by the same commands a GUI sends): for each LeavesPerBatch it
searches a few positions with `go movetime`, from an empty tree each, and its
nodes/s is what `info nps` reports (the nodes of the searches over the
seconds they ran). Beside it, the network alone at a batch of that size,
timed as `alphazero bench network` times it (random positions, the legal
moves' logits out, the fastest of several rounds) but run as the engine
runs it (batch norms folded into the convolutions), and the ratios: the
engine over the network at that batch, and over the network's best batch of
the run. With the engine's defaults, the last lines say how close the engine
comes to the network's best throughput: from an empty tree, and in a game,
where the engine plays itself with `go movetime` and keeps the tree of the
moves played between moves, as it does under a clock (the nodes counted are
each move's new simulations; the kept ones are not counted again). Last, the
precision the engine's network runs in (the UCI option Precision, 'auto': on
a CPU bf16 where native and faster) against Precision float32 at the default
LeavesPerBatch, measured one after the other in the same run. On CUDA, where
the engine replays a CUDA graph per batch size (eval.uci.ENGINE_FORWARD), a
second engine with eager passes is the baseline, in bf16 and in float32.
"""

from __future__ import annotations

import argparse
import functools
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from alphazero.app.bench import int_list, rate, ratio
from alphazero.arguments import nonnegative_int, positive_float, positive_int, thread_count
from alphazero.errors import UserError

if TYPE_CHECKING:
    from eval.uci import UciEngine

# torch, numpy, rich and the engine are imported inside the functions that use them:
# the CLI imports every bench module to build its parser.

DEFAULT_LEAVES = "1,8,16,32,64,128"
POSITIONS = (
    "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
    "r1bq1rk1/pp2bppp/2n1pn2/3p4/2PP4/2N1PN2/PP3PPP/R2QKB1R w KQ - 0 9",
    "8/5pk1/6p1/3R4/1r5P/6P1/5PK1/8 b - - 0 40",
)
"""Positions each point searches, one after another: an opening, a middlegame and a rook endgame."""

GAME_PLIES = 24
GAME_MOVETIME_MS = 300


@dataclass
class Row:
    leaves: int
    nodes: int
    seconds: float
    batches: int
    evaluated: int
    network: float  # evals/s of the network alone at batch `leaves`

    @property
    def nodes_per_second(self) -> float:
        return self.nodes / self.seconds if self.seconds > 0 else 0.0


_int_list = functools.partial(int_list, what="LeavesPerBatch values", most=256)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--leaves", type=_int_list, default=_int_list(DEFAULT_LEAVES), metavar="SIZES",
                        help=f"comma-separated LeavesPerBatch values (default {DEFAULT_LEAVES}; the engine's "
                             "default is always added)")
    parser.add_argument("--weights", default="builtin",
                        help="the network: a model file, a checkpoint, or builtin (default)")
    parser.add_argument("--device", default="cpu", help="cpu (default), auto, cuda or cuda:N")
    parser.add_argument("--threads", type=thread_count, default=0,
                        help="torch CPU threads, the engine's Threads option (default 0: torch's default)")
    parser.add_argument("--game-plies", type=nonnegative_int, default=GAME_PLIES,
                        help=f"plies of the game the engine plays itself with its defaults (default {GAME_PLIES}; "
                             "0: none)")
    parser.add_argument("--game-movetime", type=positive_int, default=GAME_MOVETIME_MS, metavar="MS",
                        help=f"movetime of each of those moves in milliseconds (default {GAME_MOVETIME_MS}, about "
                             "a move's time at 10+0.1 s)")
    parser.add_argument("--visits-per-leaf", type=nonnegative_int, default=None, metavar="V",
                        help="the engine's VisitsPerLeaf (its batch grows as root visits / V; 0: full batches "
                             "from the first call; default: the engine's)")
    parser.add_argument("--seconds", type=positive_float, default=3.0,
                        help=f"engine seconds per point, split over {len(POSITIONS)} positions; as long again "
                             "for the network alone (default 3)")


def _engine_point(engine: object, out: io.StringIO, leaves: int, seconds: float) -> tuple[int, float, int, int]:
    """Searches POSITIONS with `go movetime` at LeavesPerBatch `leaves`; returns nodes, seconds, calls, leaves."""
    from eval.uci import UciEngine

    assert isinstance(engine, UciEngine)
    engine.handle(f"setoption name LeavesPerBatch value {leaves}")
    engine.handle("position startpos")
    engine.handle(f"go nodes {2 * leaves}")  # warm-up: the new batch size's first passes
    engine.wait()
    movetime = max(1, round(1000 * seconds / len(POSITIONS)))
    total = [0, 0.0, 0, 0]
    for fen in POSITIONS:
        engine.handle("ucinewgame")
        engine.handle(f"position fen {fen}")
        engine.handle(f"go movetime {movetime}")
        engine.wait()
        report = engine.last_report
        if report is None or "search failed" in out.getvalue():
            raise UserError(f"the engine's search failed: {out.getvalue().strip().splitlines()[-2:]}")
        for i, value in enumerate((report.nodes, report.seconds, report.batches, report.leaves)):
            total[i] += value
    return int(total[0]), float(total[1]), int(total[2]), int(total[3])


def _float32_point(engine: object, out: io.StringIO, leaves: int, seconds: float) -> float:
    """The engine's nodes/s at ``leaves`` with Precision float32 (its network reloaded), then Precision back to
    what it was."""
    from eval.uci import UciEngine

    assert isinstance(engine, UciEngine)
    before = engine.values["Precision"]
    engine.handle("setoption name Precision value float32")
    nodes, elapsed, _, _ = _engine_point(engine, out, leaves, seconds)
    engine.handle(f"setoption name Precision value {before}")
    return nodes / elapsed if elapsed > 0 else 0.0


def _game_point(engine: object, out: io.StringIO, plies: int, movetime_ms: int) -> tuple[int, float, int, int]:
    """Lets the engine (at its defaults) play itself from the start for ``plies`` plies of ``movetime_ms``,
    keeping its tree between moves; returns nodes, seconds, calls and leaves over the moves."""
    from eval.uci import UciEngine

    assert isinstance(engine, UciEngine)
    engine.handle("ucinewgame")
    moves: list[str] = []
    total = [0, 0.0, 0, 0]
    for _ in range(plies):
        engine.handle("position startpos" + (" moves " + " ".join(moves) if moves else ""))
        engine.handle(f"go movetime {movetime_ms}")
        engine.wait()
        report = engine.last_report
        best = out.getvalue().rstrip().rsplit("bestmove ", 1)[-1].split()[0]
        if report is None or best == "0000":
            break  # the game ended
        for i, value in enumerate((report.nodes, report.seconds, report.batches, report.leaves)):
            total[i] += value
        moves.append(best)
    return int(total[0]), float(total[1]), int(total[2]), int(total[3])


def _started_engine(args: argparse.Namespace, out: io.StringIO, forward: str) -> UciEngine:
    """A UCI engine on the bench's network, its CUDA passes run as ``forward``, ready (``isready`` answered)."""
    from eval.uci import UciEngine

    engine = UciEngine(None, args.weights, args.device, stdin=io.StringIO(""), stdout=out, stderr=sys.stderr,
                       threads=args.threads, forward=forward)
    engine.handle("setoption name Move Overhead value 0")
    if args.visits_per_leaf is not None:
        engine.handle(f"setoption name VisitsPerLeaf value {args.visits_per_leaf}")
    engine.handle("isready")
    if "info string error" in out.getvalue() or "info string ignored" in out.getvalue():
        raise UserError(out.getvalue().strip())
    return engine


def _eager_points(args: argparse.Namespace, leaves: int) -> tuple[float, float]:
    """The baseline on CUDA: nodes/s of an engine whose passes run eagerly (as before CUDA graphs), at
    ``leaves``, in bf16 and then in float32."""
    out = io.StringIO()
    engine = _started_engine(args, out, "eager")
    try:
        nodes, elapsed, _, _ = _engine_point(engine, out, leaves, args.seconds)
        float32 = _float32_point(engine, out, leaves, args.seconds)
    finally:
        engine.stop_search()
    return (nodes / elapsed if elapsed > 0 else 0.0), float32


def run(args: argparse.Namespace) -> None:
    import numpy as np
    import torch
    from rich.console import Console
    from rich.table import Table

    from alphazero.app.bench.network import measure_batch
    from alphazero.store.sources import Network, NetworkSource, load_network
    from eval.uci import ENGINE_FORWARD, OPTIONS

    default = next(int(option.default) for option in OPTIONS if option.name == "LeavesPerBatch")
    leaves = sorted(set(args.leaves) | {default})
    out = io.StringIO()
    engine = _started_engine(args, out, ENGINE_FORWARD)

    def load_folded() -> Network:
        loaded = load_network(NetworkSource(Path("."), weights=Path(args.weights)), device=args.device,
                              warn=sys.stderr, forward=ENGINE_FORWARD, max_batch=default)
        loaded.evaluator.fold_batch_norm()  # as the engine runs it (on a CPU)
        loaded.evaluator.warm_up()  # (on CUDA)
        return loaded

    # The network alone runs on the engine's network thread, as the engine runs it (eval.uci_search.NetworkThread).
    network = engine.on_network_thread(load_folded)
    rng = np.random.default_rng(0)
    rows = []
    for size in leaves:
        nodes, seconds, batches, evaluated = _engine_point(engine, out, size, args.seconds)
        point = engine.on_network_thread(measure_batch, network.evaluator, size, args.seconds, rng)
        rows.append(Row(size, nodes, seconds, batches, evaluated, point.evals_per_second))
    engine.handle(f"setoption name LeavesPerBatch value {default}")
    game = _game_point(engine, out, args.game_plies, args.game_movetime) if args.game_plies else None
    chosen_precision = network.evaluator.precision_text()
    float32 = _float32_point(engine, out, default, args.seconds)
    engine.stop_search()
    eager = _eager_points(args, default) if network.evaluator.use_cuda else None
    best = max(rows, key=lambda row: row.network)
    device = network.evaluator.device
    threads = torch.get_num_threads()
    where = f"{device}, {threads} thread{'s' if threads != 1 else ''}" if device.type == "cpu" else str(device)
    table = Table(title=f"the UCI engine's nodes/s by LeavesPerBatch beside the network alone at that batch "
                        f"({network.label} on {where})")
    for column in ("LeavesPerBatch", "engine nodes/s", "leaves/call", "network evals/s", "engine / network",
                   "engine / network's best", "vs LeavesPerBatch 1"):
        table.add_column(column, justify="right")
    baseline = rows[0].nodes_per_second
    for row in rows:
        table.add_row(f"{row.leaves}{' (default)' if row.leaves == default else ''}", rate(row.nodes_per_second),
                      f"{row.evaluated / row.batches:.1f}" if row.batches else "-", rate(row.network),
                      ratio(row.nodes_per_second, row.network), ratio(row.nodes_per_second, best.network),
                      ratio(row.nodes_per_second, baseline))
    Console(width=max(Console().width, 150)).print(table)
    chosen = next(row for row in rows if row.leaves == default)
    share = chosen.nodes_per_second / best.network if best.network > 0 else 0.0
    growth = engine.values["VisitsPerLeaf"]
    print(f"network's best: {rate(best.network)} evals/s at batch {best.leaves}; the engine's default "
          f"(LeavesPerBatch {default}, VisitsPerLeaf {growth}): {rate(chosen.nodes_per_second)} nodes/s = "
          f"{100 * share:.0f}% of it")
    if game is not None and game[1] > 0:
        game_nodes, game_seconds, game_calls, game_leaves = game
        speed = game_nodes / game_seconds
        print(f"in a game (the engine against itself, {args.game_plies} plies at movetime {args.game_movetime} ms, "
              f"the tree kept between moves): {rate(speed)} nodes/s at {game_leaves / max(game_calls, 1):.1f} "
              f"leaves a call "
              f"= {100 * speed / best.network:.0f}% of the network's best")
    print(f"precision: the engine's default runs {chosen_precision}: {rate(chosen.nodes_per_second)} nodes/s; with "
          f"Precision float32, measured after it: {rate(float32)} nodes/s; the default is "
          f"{ratio(chosen.nodes_per_second, float32)} float32")
    if eager is not None:
        print(f"CUDA graphs: the engine's default runs {network.evaluator.describe_pass()}: "
              f"{rate(chosen.nodes_per_second)} nodes/s; the engine with eager passes, measured after it: "
              f"{rate(eager[0])} in bf16, {rate(eager[1])} in float32; the default is "
              f"{ratio(chosen.nodes_per_second, eager[0])} eager bf16, {ratio(chosen.nodes_per_second, eager[1])} "
              f"eager float32")
