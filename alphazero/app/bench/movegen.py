"""`alphazero bench movegen`: perft speed of the Cython core, python-chess and Stockfish.

All three count the same positions (the six standard perft positions). The
Cython core and Stockfish run the same depths; python-chess, about 400 times
slower, runs shallower ones. Nodes per second are comparable across depths
because every count is dominated by its last ply.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import chess
from rich.console import Console
from rich.table import Table

from alphazero.app.bench import rate, ratio
from alphazero.chess.stockfish import find_stockfish

# (name, FEN, depth for the Cython core and Stockfish, depth for python-chess)
POSITIONS = [
    ("startpos", chess.STARTING_FEN, 6, 4),
    ("kiwipete", "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1", 5, 3),
    ("endgame", "8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1", 6, 4),
    ("promotions", "r3k2r/Pppp1ppp/1b3nbN/nP6/BBP1P3/q4N2/Pp1P2PP/R2Q1RK1 w kq - 0 1", 5, 3),
    ("talkchess", "rnbq1k1r/pp1Pbppp/2p5/8/2B5/8/PPP1NnPP/RNBQK2R w KQ - 1 8", 5, 3),
    ("middlegame", "r4rk1/1pp1qppp/p1np1n2/2b1p1B1/2B1P1b1/P1NP1N2/1PP1QPPP/R4RK1 w - - 0 10", 5, 3),
]


@dataclass
class Count:
    nodes: int = 0
    seconds: float = 0.0

    def add(self, nodes: int, seconds: float) -> None:
        self.nodes += nodes
        self.seconds += seconds

    @property
    def nps(self) -> float:
        return self.nodes / self.seconds if self.seconds > 0 else 0.0


def python_chess_perft(board: chess.Board, depth: int, bulk: bool) -> int:
    if depth == 0:
        return 1
    if bulk and depth == 1:
        return board.legal_moves.count()
    nodes = 0
    for move in board.legal_moves:
        board.push(move)
        nodes += python_chess_perft(board, depth - 1, bulk)
        board.pop()
    return nodes


def timed(function: Callable[..., int], *args: Any) -> tuple[int, float]:
    start = time.perf_counter()
    nodes = function(*args)
    return nodes, time.perf_counter() - start


class StockfishPerft:
    """Stockfish's `go perft` over UCI, timed from the command to its node count."""

    def __init__(self, path: str) -> None:
        self.process = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._send("uci")
        self._read_until("uciok")
        self._send("isready")
        self._read_until("readyok")

    def _send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def _read_until(self, prefix: str) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(prefix):
                return line
        raise RuntimeError(f"Stockfish exited before printing {prefix!r}")

    def perft(self, fen: str, depth: int) -> int:
        self._send(f"position fen {fen}")
        self._send(f"go perft {depth}")
        return int(self._read_until("Nodes searched").split(":")[1])

    def close(self) -> None:
        self._send("quit")
        self.process.wait(timeout=10)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="one ply shallower everywhere (for a smoke test)")
    parser.add_argument("--no-stockfish", action="store_true", help="skip Stockfish even when it is installed")


def run(args: argparse.Namespace) -> None:
    from mcts_ext import Board

    shallower = 1 if args.quick else 0
    stockfish_path = None if args.no_stockfish else find_stockfish()
    stockfish = StockfishPerft(stockfish_path) if stockfish_path else None
    totals = {key: Count() for key in ("core_bulk", "core_full", "pc_bulk", "pc_full", "stockfish")}
    table = Table(title="perft nodes per second, one core")
    for column in ("position", "depth", "Cython bulk", "Cython make-move", "python-chess bulk",
                   "python-chess make-move", "Stockfish"):
        table.add_column(column, justify="right")
    try:
        for name, fen, depth, pc_depth in POSITIONS:
            depth, pc_depth = depth - shallower, max(1, pc_depth - shallower)
            board = Board(fen)
            row = {
                "core_bulk": timed(board.perft, depth),
                "core_full": timed(functools.partial(board.perft, bulk=False), depth - 1),
                "pc_bulk": timed(python_chess_perft, chess.Board(fen), pc_depth, True),
                "pc_full": timed(python_chess_perft, chess.Board(fen), pc_depth - 1, False),
            }
            if stockfish is not None:
                row["stockfish"] = timed(stockfish.perft, fen, depth)
            for key, (nodes, seconds) in row.items():
                totals[key].add(nodes, seconds)
            cells = [rate(nodes / seconds) if seconds > 0 else "-" for nodes, seconds in row.values()]
            table.add_row(name, f"{depth} / {pc_depth}", *cells, *(["-"] if stockfish is None else []))
    finally:
        if stockfish is not None:
            stockfish.close()

    table.add_row("all", "", *(rate(totals[key].nps) for key in totals), end_section=True)
    console = Console(width=max(Console().width, 110))
    console.print(table)
    print(f"bulk-counted perft: Cython {rate(totals['core_bulk'].nps)} nodes/s, "
          f"{ratio(totals['core_bulk'].nps, totals['pc_bulk'].nps)} python-chess")
    print(f"make-move at every node: Cython {rate(totals['core_full'].nps)} nodes/s, "
          f"{ratio(totals['core_full'].nps, totals['pc_full'].nps)} python-chess")
    if stockfish is None:
        print("Stockfish: not measured (not installed or --no-stockfish)")
    else:
        print(f"Stockfish go perft: {rate(totals['stockfish'].nps)} nodes/s; "
              f"Cython bulk is {ratio(totals['core_bulk'].nps, totals['stockfish'].nps)} Stockfish "
              f"(Stockfish is {ratio(totals['stockfish'].nps, totals['core_bulk'].nps)} the Cython core)")
