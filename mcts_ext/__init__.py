"""The chess core and search of alphazero, in Cython (numpy is its only dependency)."""

from mcts_ext.errors import ChessError, IllegalMoveError, InvalidFenError, MoveIndexError
from mcts_ext.position import SQUARE_NAMES, STARTING_FEN, TERMINATIONS, Board, move_to_uci

__all__ = [
    "STARTING_FEN",
    "SQUARE_NAMES",
    "TERMINATIONS",
    "Board",
    "ChessError",
    "IllegalMoveError",
    "InvalidFenError",
    "MoveIndexError",
    "move_to_uci",
]
