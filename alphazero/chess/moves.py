"""Maps python-chess moves to and from the 4672 policy indices.

The policy is 8 x 8 x 73 logits, ``index = plane * 64 + from_o``, where squares
are seen from the side to move (``s ^ 56`` when Black moves: ranks mirrored,
files unchanged). With ``df``/``dr`` the file/rank step between the oriented
squares:

- planes 0-55, queen-like moves (king moves, castling as the king's two-square
  move, promotions to a queen): ``7 * direction + (distance - 1)``, directions
  N, NE, E, SE, S, SW, W, NW;
- planes 56-63, knight moves, in the order of ``_KNIGHT_STEPS``;
- planes 64-72, under-promotions: ``64 + 3 * piece + (df + 1)``, piece N 0,
  B 1, R 2, ``df`` -1 capture-left, 0 straight, +1 capture-right.

Decoding a queen-like index that brings a pawn to the last rank gives a queen
promotion. Only standard chess is supported (castling is ``e1g1``, not the
Chess960 king-takes-rook form).

>>> import chess
>>> move_to_index(chess.Move.from_uci("e2e4"), chess.WHITE)
76
>>> index_to_move(chess.Board(), 76)
Move.from_uci('e2e4')
"""

from __future__ import annotations

from typing import Final

import chess
import numpy as np

from mcts_ext import encode
from mcts_ext.errors import IllegalMoveError, MoveIndexError

__all__ = [
    "NUM_MOVES",
    "NUM_PLANES",
    "index_to_move",
    "legal_move_indices",
    "move_to_index",
    "policy_mask",
]

NUM_PLANES: Final = 73  # 56 queen-like + 8 knight + 9 under-promotion move planes
NUM_MOVES: Final = int(encode.NUM_MOVES)  # 4672 = NUM_PLANES x 64: the chess core's, the one definition
assert NUM_MOVES == NUM_PLANES * 64

_QUEEN_DIRECTIONS: Final = ((0, 1), (1, 1), (1, 0), (1, -1), (0, -1), (-1, -1), (-1, 0), (-1, 1))
_KNIGHT_STEPS: Final = ((1, 2), (2, 1), (2, -1), (1, -2), (-1, -2), (-2, -1), (-2, 1), (-1, 2))
_UNDER_PROMOTIONS: Final = (chess.KNIGHT, chess.BISHOP, chess.ROOK)

_KNIGHT_PLANE0: Final = 56
_UNDER_PLANE0: Final = 64
_NO_PLANE: Final = -1


def _orient(square: chess.Square, turn: chess.Color) -> chess.Square:
    """Returns the square as the side ``turn`` sees it (rank mirrored for Black)."""
    return square if turn == chess.WHITE else square ^ 56


def _sign(x: int) -> int:
    """Returns -1, 0 or 1, the sign of ``x``."""
    return (x > 0) - (x < 0)


def _plane_of_step(df: int, dr: int) -> int:
    """Returns the queen-like or knight plane of a step, or ``_NO_PLANE`` if it is neither."""
    if (df, dr) in _KNIGHT_STEPS:
        return _KNIGHT_PLANE0 + _KNIGHT_STEPS.index((df, dr))
    distance = max(abs(df), abs(dr))
    # Queen-like: a straight line (one of df, dr zero) or a diagonal (|df| == |dr|).
    if distance == 0 or (df != 0 and dr != 0 and abs(df) != abs(dr)):
        return _NO_PLANE
    return 7 * _QUEEN_DIRECTIONS.index((_sign(df), _sign(dr))) + distance - 1


def _step_of_plane(plane: int) -> tuple[int, int, chess.PieceType | None]:
    """Returns ``(df, dr, under-promotion piece or None)`` that a plane stands for."""
    if plane < _KNIGHT_PLANE0:
        direction, distance = divmod(plane, 7)
        sf, sr = _QUEEN_DIRECTIONS[direction]
        return sf * (distance + 1), sr * (distance + 1), None
    if plane < _UNDER_PLANE0:
        df, dr = _KNIGHT_STEPS[plane - _KNIGHT_PLANE0]
        return df, dr, None
    piece, df_plus_one = divmod(plane - _UNDER_PLANE0, 3)
    return df_plus_one - 1, 1, _UNDER_PROMOTIONS[piece]


def _build_step_table() -> np.ndarray:
    """Builds the [64 * 64] table of queen-like/knight planes by (from_o, to_o), -1 for none."""
    table = np.full(64 * 64, _NO_PLANE, dtype=np.int16)
    for from_o in range(64):
        for to_o in range(64):
            df = chess.square_file(to_o) - chess.square_file(from_o)
            dr = chess.square_rank(to_o) - chess.square_rank(from_o)
            table[from_o * 64 + to_o] = _plane_of_step(df, dr)
    return table


def _build_decode_tables() -> tuple[np.ndarray, tuple[chess.PieceType | None, ...]]:
    """Builds, per index, the oriented target square (-1 when off the board) and the
    under-promotion piece (None for queen-like and knight planes)."""
    targets = np.full(NUM_MOVES, -1, dtype=np.int16)
    promotions: list[chess.PieceType | None] = []
    for index in range(NUM_MOVES):
        plane, from_o = divmod(index, 64)
        df, dr, promotion = _step_of_plane(plane)
        file = chess.square_file(from_o) + df
        rank = chess.square_rank(from_o) + dr
        if 0 <= file < 8 and 0 <= rank < 8:
            targets[index] = chess.square(file, rank)
        promotions.append(promotion)
    return targets, tuple(promotions)


_STEP_PLANE: Final = _build_step_table().tolist()  # lists index faster than arrays
_DECODE_TARGET, _DECODE_PROMOTION = _build_decode_tables()
_DECODE_TARGET_LIST: Final = _DECODE_TARGET.tolist()


def _move_error(move: chess.Move, turn: chess.Color, why: str) -> IllegalMoveError:
    """Returns the error for a move that no index expresses."""
    side = "White" if turn == chess.WHITE else "Black"
    return IllegalMoveError(f"no policy index for move {move.uci()!r} by {side}: {why}")


def move_to_index(move: chess.Move, turn: chess.Color) -> int:
    """Gets the policy index (0..4671) of ``move`` played by the side ``turn``.

    Only the geometry is checked, not legality in any position. Castling must be
    given as the king's two-square move (``e1g1``), as python-chess does for
    standard chess.

    :raises mcts_ext.errors.IllegalMoveError: if no index can express the move:
        the null move, a move to its own square, a step that is neither
        queen-like nor a knight jump, a king "promotion", or an under-promotion
        that is not one step forward (straight or diagonal) for ``turn``.

    >>> move_to_index(chess.Move.from_uci("e7e5"), chess.BLACK)
    76
    """
    from_o = _orient(move.from_square, turn)
    to_o = _orient(move.to_square, turn)
    promotion = move.promotion
    if promotion in _UNDER_PROMOTIONS:
        df = chess.square_file(to_o) - chess.square_file(from_o)
        dr = chess.square_rank(to_o) - chess.square_rank(from_o)
        if dr != 1 or abs(df) > 1:
            raise _move_error(move, turn, "an under-promotion must be one step forward")
        plane = _UNDER_PLANE0 + 3 * _UNDER_PROMOTIONS.index(promotion) + df + 1
        return plane * 64 + from_o
    if promotion is not None and promotion != chess.QUEEN:
        raise _move_error(move, turn, f"cannot promote to {chess.piece_name(promotion)}")
    plane = _STEP_PLANE[from_o * 64 + to_o]
    if plane == _NO_PLANE:
        raise _move_error(move, turn, "not a queen-like move, knight jump or promotion")
    if promotion == chess.QUEEN and plane >= _KNIGHT_PLANE0:
        raise _move_error(move, turn, "a queen promotion must be a queen-like move")
    return plane * 64 + from_o


def _checked_index(index: object) -> int:
    """Returns ``index`` as an int, checking that it is an integer in 0..4671.

    :raises mcts_ext.errors.MoveIndexError: otherwise (bools are refused too:
        they are almost always a mask passed by mistake).
    """
    if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
        raise MoveIndexError(f"policy index must be an int in 0..{NUM_MOVES - 1}, got {index!r}")
    value = int(index)
    if not 0 <= value < NUM_MOVES:
        raise MoveIndexError(f"policy index out of range 0..{NUM_MOVES - 1}: {value}")
    return value


def index_to_move(board: chess.Board, index: int) -> chess.Move:
    """Gets the legal move of ``board`` that policy index ``index`` names.

    A queen-like index that brings a pawn to the last rank gives a queen
    promotion.

    :raises mcts_ext.errors.MoveIndexError: if ``index`` is not an integer in 0..4671.
    :raises mcts_ext.errors.IllegalMoveError: if it is, but names no legal move of
        ``board`` (the message quotes the index and the FEN).

    >>> index_to_move(chess.Board(), 1 * 64 + chess.E2)
    Move.from_uci('e2e4')
    """
    value = _checked_index(index)
    from_o = value & 63
    to_o = _DECODE_TARGET_LIST[value]
    if to_o >= 0:
        turn = board.turn
        from_square = _orient(from_o, turn)
        to_square = _orient(to_o, turn)
        promotion = _DECODE_PROMOTION[value]
        if (
            promotion is None
            and chess.square_rank(to_o) == 7
            and board.piece_type_at(from_square) == chess.PAWN
        ):
            promotion = chess.QUEEN
        move = chess.Move(from_square, to_square, promotion)
        if board.is_legal(move):
            return move
    raise IllegalMoveError(
        f"policy index {value} (plane {value // 64}, from {chess.square_name(from_o)} oriented)"
        f" names no legal move in {board.fen()!r}"
    )


def legal_move_indices(board: chess.Board) -> np.ndarray:
    """Gets the policy indices of the legal moves of ``board``, int64, in
    ``board.legal_moves`` order."""
    turn = board.turn
    indices = [move_to_index(move, turn) for move in board.legal_moves]
    return np.array(indices, dtype=np.int64)


def policy_mask(board: chess.Board) -> np.ndarray:
    """Gets a bool [4672] mask that is True exactly at the legal moves' indices."""
    mask = np.zeros(NUM_MOVES, dtype=bool)
    mask[legal_move_indices(board)] = True
    return mask
