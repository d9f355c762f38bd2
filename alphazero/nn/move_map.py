"""Where each of the 4672 policy indices moves: its from and to squares and its under-promotion piece.

The move index (docs/encodings.md) is plane * 64 + from, over the oriented
board (square 8 * rank + file, the side to move at the bottom); the 73
planes are 56 queen-like steps, 8 knight steps and 9 under-promotions. The
heads that score a move from its two squares read these maps: the
Chessformer's attention policy (alphazero.nn.chessformer) and the
action-value head (alphazero.nn.action_values).

>>> source, target, piece = move_squares()
>>> int(source[8]), int(target[8]), int(piece[8])     # plane 0 (one step north) from a2 (square 8)
(8, 16, 3)
"""

from __future__ import annotations

import functools

import numpy as np

from alphazero.chess.moves import NUM_MOVES

__all__ = ["NO_PIECE", "SQUARES", "UNDER_PROMOTION_PIECES", "move_squares", "policy_index_map"]

SQUARES = 64
UNDER_PROMOTION_PIECES = 3  # knight, bishop, rook: the move index's order
NO_PIECE = UNDER_PROMOTION_PIECES  # move_squares' piece of every move that is not an under-promotion

_QUEEN_DIRECTIONS = ((0, 1), (1, 1), (1, 0), (1, -1), (0, -1), (-1, -1), (-1, 0), (-1, 1))  # (file, rank) steps
_KNIGHT_STEPS = ((1, 2), (2, 1), (2, -1), (1, -2), (-1, -2), (-2, -1), (-2, 1), (-1, 2))


def _move_plane_step(plane: int) -> tuple[int, int, int | None]:
    """Gets (file step, rank step, under-promotion piece 0..2 or None) of a move plane (0..72)."""
    if plane < 56:
        direction, distance = divmod(plane, 7)
        file_step, rank_step = _QUEEN_DIRECTIONS[direction]
        return file_step * (distance + 1), rank_step * (distance + 1), None
    if plane < 64:
        file_step, rank_step = _KNIGHT_STEPS[plane - 56]
        return file_step, rank_step, None
    piece, file_step_plus_one = divmod(plane - 64, 3)
    return file_step_plus_one - 1, 1, piece


@functools.cache
def policy_index_map() -> tuple[np.ndarray, np.ndarray]:
    """Gets, for each of the 4672 policy indices, where its logit comes from (built once).

    Returns ``(pair, bias)``, both int64 [4672]:

    - ``pair``: from * 64 + to, the entry of the flattened 64 x 64 move matrix
      (oriented squares), or 4096 when the index can never be a legal move
      (its target lies off the board, or it under-promotes short of the last
      rank): it reads a constant 0.
    - ``bias``: 4097 + to_file * 3 + piece for an under-promotion (piece 0, 1,
      2 = knight, bishop, rook), else 4096 (the constant 0).

    Slots 4096 (zero) and 4097.. (the 24 promotion biases) follow the matrix
    in the row the policy head gathers from.
    """
    zero = SQUARES * SQUARES
    pair = np.full(NUM_MOVES, zero, dtype=np.int64)
    bias = np.full(NUM_MOVES, zero, dtype=np.int64)
    for index in range(NUM_MOVES):
        plane, source = divmod(index, SQUARES)
        file_step, rank_step, piece = _move_plane_step(plane)
        file, rank = source % 8 + file_step, source // 8 + rank_step
        if not (0 <= file < 8 and 0 <= rank < 8) or (piece is not None and rank != 7):
            continue
        pair[index] = source * SQUARES + rank * 8 + file
        if piece is not None:
            bias[index] = zero + 1 + file * UNDER_PROMOTION_PIECES + piece
    pair.setflags(write=False)
    bias.setflags(write=False)
    return pair, bias


@functools.cache
def move_squares() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gets (from square, to square, under-promotion piece) of each policy index, int64 [4672] each (built once).

    Squares are oriented (8 * rank + file). The piece is 0, 1, 2 (knight,
    bishop, rook) for an under-promotion, NO_PIECE otherwise (a queen
    promotion is the plain move to the last rank). An index that can never be
    a legal move (policy_index_map's 4096) gets its from square as both.
    """
    pair, bias = policy_index_map()
    zero = SQUARES * SQUARES
    source = np.arange(NUM_MOVES, dtype=np.int64) % SQUARES
    target = np.where(pair < zero, pair % SQUARES, source)
    piece = np.where(bias > zero, (bias - zero - 1) % UNDER_PROMOTION_PIECES, NO_PIECE)
    for array in (source, target, piece):
        array.setflags(write=False)
    return source, target, piece
