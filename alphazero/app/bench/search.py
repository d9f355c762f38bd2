"""`alphazero bench search`: simulations per second of the Cython search vs plain Python.

Both sides run the same workload: G games at once, 800 simulations per move,
a uniform evaluator (so only the search is measured), leaves encoded for the
network and batched across games. The baseline is written the way most Python
AlphaZero ports search: a Node object per position, python-chess boards
pushed down the tree, legal moves and game ends from python-chess, and leaf
planes built from the board's piece map for the last 8 positions.

With `--algorithm gumbel` the Cython search is also timed with Gumbel
AlphaZero's selection (Sequential Halving at the root, the improved-policy
rule inside the tree) on the same workload, and printed beside PUCT.
"""

from __future__ import annotations

import argparse
import math
import time

import chess
import numpy as np

from alphazero.app.bench import rate, ratio
from alphazero.arguments import positive_float, positive_int
from alphazero.chess.moves import move_to_index
from mcts_ext.driver import uniform_evaluator


class _Node:
    __slots__ = ("prior", "visits", "value_sum", "children")

    def __init__(self, prior: float) -> None:
        self.prior = prior
        self.visits = 0
        self.value_sum = 0.0
        self.children: dict[chess.Move, _Node] = {}

    def q(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0


def _ucb(parent: _Node, child: _Node, c_base: float = 19652, c_init: float = 1.25) -> float:
    c = math.log((parent.visits + c_base + 1) / c_base) + c_init
    return child.q() + c * child.prior * math.sqrt(parent.visits) / (child.visits + 1)


def _encode(board: chess.Board) -> np.ndarray:
    """119 planes from python-chess: 8 steps of 12 piece planes (+2 repetition), 7 constants."""
    planes = np.zeros((119, 8, 8), dtype=np.float32)
    us = board.turn
    history = board.copy()
    for step in range(8):
        for square, piece in history.piece_map().items():
            row, col = divmod(square if us else square ^ 56, 8)
            planes[14 * step + (piece.piece_type - 1) + (0 if piece.color == us else 6), row, col] = 1.0
        if not history.move_stack:
            break
        history.pop()
    planes[112] = float(us)
    planes[113] = board.fullmove_number / 256
    planes[114] = board.has_kingside_castling_rights(us)
    planes[115] = board.has_queenside_castling_rights(us)
    planes[116] = board.has_kingside_castling_rights(not us)
    planes[117] = board.has_queenside_castling_rights(not us)
    planes[118] = board.halfmove_clock / 100
    return planes


class _PythonGame:
    """One game's search in plain Python."""

    def __init__(self) -> None:
        self.board = chess.Board()
        self.root = _Node(1.0)
        self.done = 0

    def select(self) -> tuple[list[_Node], chess.Board, float | None]:
        """Walks to a leaf; returns the path, the leaf board and its exact value if the game ended."""
        board = self.board.copy()
        node, path = self.root, [self.root]
        while node.children:
            move, node = max(node.children.items(), key=lambda item: _ucb(path[-1], item[1]))
            board.push(move)
            path.append(node)
        if board.is_game_over():
            return path, board, -1.0 if board.is_checkmate() else 0.0
        return path, board, None

    def expand_and_backup(self, path: list[_Node], board: chess.Board, logits: np.ndarray, value: float) -> None:
        legal = list(board.legal_moves)
        chosen = logits[[move_to_index(move, board.turn) for move in legal]]
        priors = np.exp(chosen - chosen.max())
        priors /= priors.sum()
        for move, prior in zip(legal, priors):
            path[-1].children[move] = _Node(float(prior))
        self.backup(path, value)

    def backup(self, path: list[_Node], value: float) -> None:
        for node in reversed(path):
            value = -value
            node.value_sum += value
            node.visits += 1
        self.done += 1

    def play_if_done(self, budget: int) -> None:
        if self.done >= budget:
            move = max(self.root.children.items(), key=lambda item: item[1].visits)[0]
            self.board.push(move)
            self.root, self.done = _Node(1.0), 0
            if self.board.is_game_over():
                self.board = chess.Board()


def python_search_rate(games: int, budget: int, seconds: float) -> tuple[int, float]:
    """Simulations completed by the plain-Python search in about `seconds`."""
    pool = [_PythonGame() for _ in range(games)]
    simulations, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        leaves = []
        for game in pool:
            path, board, exact = game.select()
            if exact is not None:
                game.backup(path, exact)
            else:
                leaves.append((game, path, board, _encode(board)))
            simulations += 1
        batch = np.stack([planes for *_, planes in leaves]) if leaves else np.zeros((0, 119, 8, 8), np.float32)
        logits, values = uniform_evaluator(batch, batch)
        for (game, path, board, _), row_logits, value in zip(leaves, logits, values):
            game.expand_and_backup(path, board, row_logits, float(value))
        for game in pool:
            game.play_if_done(budget)
    return simulations, time.perf_counter() - start


def cython_search_rate(games: int, budget: int, seconds: float, algorithm: str = "puct") -> tuple[int, float]:
    """Simulations completed by the Cython MultiGameSearch (self-play, `algorithm`) in about `seconds`."""
    from mcts_ext.params import SearchParams
    from mcts_ext.search import MultiGameSearch

    search = MultiGameSearch(games, SearchParams(simulations=budget, algorithm=algorithm), seed=0)
    batch = search.new_batch()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        rows = search.gather(*batch)
        logits, values = uniform_evaluator(batch[0][:rows], batch[1][:rows])
        search.backup(logits, values)
        for slot, _ in search.take_finished():
            search.start_game(slot)
    return search.total_simulations, time.perf_counter() - start


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--games", type=positive_int, default=64, help="games searched at once (default 64)")
    parser.add_argument("--simulations", type=positive_int, default=800, help="simulations per move (default 800)")
    parser.add_argument("--seconds", type=positive_float, default=8.0, help="time for each side (default 8)")
    parser.add_argument("--algorithm", choices=("puct", "gumbel"), default="puct",
                        help="gumbel: also time the Cython search with Gumbel AlphaZero, beside PUCT (default puct)")


def run(args: argparse.Namespace) -> None:
    fast, fast_time = cython_search_rate(args.games, args.simulations, args.seconds)
    if args.algorithm == "gumbel":
        gumbel, gumbel_time = cython_search_rate(args.games, args.simulations, args.seconds, "gumbel")
    slow, slow_time = python_search_rate(args.games, args.simulations, args.seconds)
    fast_rate, slow_rate = fast / fast_time, slow / slow_time
    print(f"search, uniform evaluator, {args.games} games at once, {args.simulations} simulations per move, "
          "leaf encoding included, one core:")
    print(f"  Cython MultiGameSearch, PUCT:   {rate(fast_rate):>8} simulations/s  ({fast} in {fast_time:.1f} s)")
    if args.algorithm == "gumbel":
        gumbel_rate = gumbel / gumbel_time
        print(f"  Cython MultiGameSearch, Gumbel: {rate(gumbel_rate):>8} simulations/s  ({gumbel} in "
              f"{gumbel_time:.1f} s) = {ratio(gumbel_rate, fast_rate)} PUCT")
    print(f"  plain-Python PUCT, python-chess: {rate(slow_rate):>8} simulations/s  ({slow} in {slow_time:.1f} s)")
    print(f"  Cython / plain Python: {ratio(fast_rate, slow_rate)}")
