"""A deliberately plain reference of the network input, over python-chess.

This is the oracle the fast encoders are tested against, written straight from
``docs/encodings.md``: loops over squares and history steps, no bit tricks, no
code shared with ``mcts_ext`` or ``alphazero.nn.planes``. Slow on purpose.

Layout (SPEC.md, "Compact input"): for history step t = 0..7 (t = 0 now), planes
``14 * t + k``: k = 0..5 the pieces P N B R Q K of the side to move *now*,
k = 6..11 the other side's, k = 12 "stood at least once before", k = 13 "at
least twice before"; all zero before the game's first position. Squares are
mirrored (``s ^ 56``) when Black is to move now, at every step. Then 7 scalars:
colour, full-move number, our K/Q castling, their K/Q castling, half-move clock.
"""

from __future__ import annotations

from typing import Final

import chess
import numpy as np

HISTORY: Final = 8
PLANES_PER_STEP: Final = 14
NUM_BIT_PLANES: Final = HISTORY * PLANES_PER_STEP  # 112
NUM_SCALARS: Final = 7
NUM_PLANES: Final = NUM_BIT_PLANES + NUM_SCALARS  # 119
# The reference copy of the scale; the production constant is alphazero.nn.planes.SCALAR_SCALE.
SCALAR_SCALE: Final = (1.0, 1 / 256, 1.0, 1.0, 1.0, 1.0, 1 / 100)

_ALL_ONES: Final = (1 << 64) - 1
_PIECE_TYPES: Final = (chess.PAWN, chess.KNIGHT, chess.BISHOP, chess.ROOK, chess.QUEEN, chess.KING)


def _history(board: chess.Board) -> list[tuple[chess.Board, int] | None]:
    """Returns, for steps t = 0..7, the position at step t and how many times it had
    stood before in the game, or None for steps before the game's start.

    The game starts at the position before the first move of ``board.move_stack``.
    """
    # Walk back through the whole game once: keys[i] is the key i plies ago.
    walker = board.copy()
    recent = [walker.copy(stack=False)]
    keys = [walker._transposition_key()]
    while walker.move_stack:
        walker.pop()
        keys.append(walker._transposition_key())
        if len(recent) < HISTORY:
            recent.append(walker.copy(stack=False))
    steps: list[tuple[chess.Board, int] | None] = []
    for t in range(HISTORY):
        if t >= len(recent):
            steps.append(None)
            continue
        # Earlier positions of the game are those more than t plies ago.
        earlier = sum(1 for key in keys[t + 1 :] if key == keys[t])
        steps.append((recent[t], earlier))
    return steps


def _piece_plane(piece: chess.Piece, us: chess.Color) -> int:
    """Returns k in 0..11: the plane within a step of ``piece`` seen by ``us``."""
    k = _PIECE_TYPES.index(piece.piece_type)
    return k if piece.color == us else k + 6


def _oriented(square: chess.Square, us: chess.Color) -> chess.Square:
    """Returns ``square`` seen from ``us`` (ranks mirrored for Black)."""
    return square if us == chess.WHITE else chess.square_mirror(square)


def _raw_scalars(board: chess.Board) -> list[float]:
    """Returns the 7 unscaled scalars of ``board``."""
    us, them = board.turn, not board.turn
    return [
        1.0 if us == chess.WHITE else 0.0,
        float(board.fullmove_number),
        float(board.has_kingside_castling_rights(us)),
        float(board.has_queenside_castling_rights(us)),
        float(board.has_kingside_castling_rights(them)),
        float(board.has_queenside_castling_rights(them)),
        float(board.halfmove_clock),
    ]


def reference_compact(board: chess.Board) -> tuple[np.ndarray, np.ndarray]:
    """Encodes ``board`` (with its move stack as history) into the compact form.

    Returns ``(planes, scalars)``: uint64 [112] bitboards and float32 [7] raw
    scalars, as SPEC.md defines them.
    """
    us = board.turn
    bitboards = [0] * NUM_BIT_PLANES
    for t, step in enumerate(_history(board)):
        if step is None:
            continue
        position, earlier = step
        base = PLANES_PER_STEP * t
        for square in range(64):
            piece = position.piece_at(square)
            if piece is not None:
                bitboards[base + _piece_plane(piece, us)] |= 1 << _oriented(square, us)
        if earlier >= 1:
            bitboards[base + 12] = _ALL_ONES
        if earlier >= 2:
            bitboards[base + 13] = _ALL_ONES
    planes = np.array(bitboards, dtype=np.uint64)
    scalars = np.array(_raw_scalars(board), dtype=np.float32)
    return planes, scalars


def reference_planes(board: chess.Board) -> np.ndarray:
    """Encodes ``board`` directly into the network input, float32 [119, 8, 8].

    Bit planes hold 0/1 at [oriented rank, file]; plane 112 + j holds scalar j
    times ``SCALAR_SCALE[j]`` everywhere (scaled in float64, then rounded once
    to float32).
    """
    us = board.turn
    out = np.zeros((NUM_PLANES, 8, 8), dtype=np.float32)
    for t, step in enumerate(_history(board)):
        if step is None:
            continue
        position, earlier = step
        base = PLANES_PER_STEP * t
        for square in range(64):
            piece = position.piece_at(square)
            if piece is not None:
                o = _oriented(square, us)
                row, column = chess.square_rank(o), chess.square_file(o)
                out[base + _piece_plane(piece, us), row, column] = 1.0
        if earlier >= 1:
            out[base + 12] = 1.0
        if earlier >= 2:
            out[base + 13] = 1.0
    for j, (value, scale) in enumerate(zip(_raw_scalars(board), SCALAR_SCALE)):
        out[NUM_BIT_PLANES + j] = value * scale
    return out
