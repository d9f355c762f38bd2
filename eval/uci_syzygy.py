"""The UCI engine's Syzygy tablebases (the SyzygyPath option): opened when the option is set, probed at the
root to keep the moves that hold the tables' result, and at the search's leaves for their WDL.

At a root the tables hold (Tables.root), the moves are ranked as Stockfish
ranks them (Tablebases::root_probe, by DTZ): the search runs as usual, and
its answer is its most visited move among those of the best rank. From a
root they do not hold, each leaf of a network batch that they hold
(probe_leaves) takes the tables' result as its value in place of the
network's: +1 a win, 0 a draw (the fifty-move rule's cursed wins and blessed
losses included), -1 a loss, for the leaf's side to move. (Probing every
leaf below a ranked root would cost about a fifth of the search's speed, in
python-chess's pure-Python probing, for nothing but a tie break.) The leaf's position is read back from its
compact input (mcts_ext.encode): history step 0 holds the side to move's
pieces as White's, ranks mirrored when Black moves, which the tables score
alike (they are colour-symmetric); an en passant capture is seen from the
step before (a pawn's double step), except at a root given as a bare FEN,
whose history the planes do not hold.
"""

from __future__ import annotations

import chess
import numpy as np

from alphazero.chess.syzygy import RootProbe, SyzygyPathError, Tables
from eval.scores import value_to_centipawns
from eval.uci_search import SearchJob, line_for
from mcts_ext.search import MultiGameSearch

PLANES_PER_STEP = 14
"""Compact planes per history step: the side to move's P N B R Q K, the opponent's, two repetition planes."""

_PIECE_TYPES = (chess.PAWN, chess.KNIGHT, chess.BISHOP, chess.ROOK, chess.QUEEN, chess.KING)

_THEIR_PAWNS = 6
"""The opponent's pawns' plane in a step."""

_FOURTH_RANK = chess.BB_RANK_5
"""Where an opponent's pawn lands after a double step, from the side to move's view (the board is oriented)."""

CASTLING_SCALARS = slice(2, 6)
"""The compact scalars of the castling rights: the tables hold no position with one."""


def open_tables(path: str) -> tuple[Tables | None, str]:
    """Opens a SyzygyPath for the engine; returns the tables (None for an empty path or one that fails) and the
    `info string` text that says what happened."""
    if not path.strip():
        return None, "SyzygyPath empty: no tablebases"
    try:
        tables = Tables.open(path)
    except SyzygyPathError as error:
        return None, f"SyzygyPath {path!r} not used: {error}; playing without tablebases"
    return tables, f"tablebases: {tables.describe()}"


def leaf_board(planes: np.ndarray) -> chess.Board:
    """The position of one leaf's compact input (uint64 [112]) as a python-chess board, oriented: the side to
    move plays White. Castling rights are not set (the caller skips leaves that have them)."""
    board = chess.Board.empty()
    for index, piece_type in enumerate(_PIECE_TYPES):
        for colour, plane in ((chess.WHITE, index), (chess.BLACK, 6 + index)):
            bits = int(planes[plane])
            for square in chess.scan_forward(bits):
                board.set_piece_at(square, chess.Piece(piece_type, colour))
    board.ep_square = _double_step_square(int(planes[_THEIR_PAWNS]), int(planes[PLANES_PER_STEP + _THEIR_PAWNS]))
    return board


def _double_step_square(their_pawns: int, their_pawns_before: int) -> int | None:
    """The square an opponent's pawn skipped on its last move, if that move was a double step (from the side to
    move's view: from the seventh rank to the fifth), else None."""
    arrived = their_pawns & ~their_pawns_before & _FOURTH_RANK
    left = their_pawns_before & ~their_pawns
    if chess.popcount(arrived) != 1 or left != arrived << 16:
        return None
    return chess.lsb(arrived) + 8


def probe_leaves(tables: Tables, planes: np.ndarray, scalars: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Gets the leaves' values with the tables' results in place of the network's where the tables hold the
    leaf: +1 a win, 0 a draw, -1 a loss for the leaf's side to move (a cursed win is a draw, as under
    Stockfish's Syzygy50MoveRule). ``planes`` uint64 [B, 112] and ``scalars`` float32 [B, 7] are the batch's
    compact input, ``values`` float32 [B] the network's; returns ``values`` itself when no leaf is held.
    """
    rows = len(values)
    pieces = np.bitwise_count(np.bitwise_or.reduce(planes[:rows, :12], axis=1))
    held = np.flatnonzero((pieces <= tables.max_pieces) & ~scalars[:rows, CASTLING_SCALARS].any(axis=1))
    if len(held) == 0:
        return values
    probed = np.array(values, dtype=np.float32)
    for row in held:
        wdl = tables.wdl(leaf_board(planes[row]))
        if wdl is not None:
            probed[row] = 1.0 if wdl == 2 else -1.0 if wdl == -2 else 0.0
    return probed


def root_probe(tables: Tables | None, board: chess.Board) -> RootProbe | None:
    """What the tables say of the root (Tables.root), or None without tables or where they do not hold it."""
    if tables is None or not tables.covers(board):
        return None
    return tables.root(board)


def chosen_move(search: MultiGameSearch, probe: RootProbe) -> str:
    """The search's most visited move among the moves the tables keep."""
    kept = set(probe.moves)
    return next((move for move in search.ranked_moves(0) if move in kept), probe.moves[0])


def tablebase_info_line(search: MultiGameSearch, job: SearchJob, move: str, probe: RootProbe, tbhits: int, *,
                        wdl: bool) -> str:
    """The `info` line sent with a bestmove the tables chose: the move's line from the search, scored by the
    tables (a win as the search's +1, less the plies to zeroing; a mate the search proved keeps its score)."""
    line = line_for(search, move, None, None)
    if line.mate is None:
        line = line.scored(round(value_to_centipawns(float(probe.result))) - probe.dtz * (probe.result != 0),
                           (1000, 0, 0) if probe.result > 0 else (0, 0, 1000) if probe.result < 0 else (0, 1000, 0))
    now = job.clock()
    nodes = search.simulations(0)
    nps = int(nodes / max(now - job.searching_since, 1e-6))
    shown_wdl = f" wdl {line.wdl[0]} {line.wdl[1]} {line.wdl[2]}" if wdl else ""
    return (f"info depth {len(line.pv)} seldepth {len(line.pv)} multipv 1 {line.score()}{shown_wdl} nodes {nodes} "
            f"nps {nps} tbhits {tbhits} time {int(max(now - job.started, 0.0) * 1000)} pv {' '.join(line.pv)}")


__all__ = ["chosen_move", "leaf_board", "open_tables", "probe_leaves", "root_probe", "tablebase_info_line"]
