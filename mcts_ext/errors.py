"""Errors raised at the Python edge of the chess core.

Each is a subclass of a built-in, so callers that only know ValueError or
IndexError still catch them.
"""


class ChessError(Exception):
    """Base class of every error the chess core raises."""


class InvalidFenError(ChessError, ValueError):
    """A FEN that cannot be read or describes an impossible position; the message says why."""


class IllegalMoveError(ChessError, ValueError):
    """A move that is malformed or not legal in the position; the message quotes the FEN."""


class MoveIndexError(ChessError, IndexError):
    """A policy index outside 0..4671, or one that names no move on the board."""
