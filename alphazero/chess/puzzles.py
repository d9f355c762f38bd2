"""Lichess puzzle CSVs, read and replayed with python-chess: one reader for the puzzle yardstick
(eval.puzzles) and for labelling puzzle positions (learner.labels).

The Lichess puzzle database (https://database.lichess.org/#puzzles, CC0) has a
header naming ``PuzzleId``, ``FEN``, ``Moves``, ``Rating`` and more, then one
puzzle a row. ``FEN`` is the position before the opponent's move; ``Moves``
is the solution in UCI, its first move the opponent's, then the solver's and
the opponent's replies in turn. A puzzle without a ``PuzzleId`` is named by
its row, counted from 0 (as ChessBench's ``puzzles.csv``, which has none,
is indexed).

Example::

    >>> import io
    >>> rows = puzzle_rows(io.StringIO("PuzzleId,FEN,Moves\\n00008,"
    ...     "r6k/pp2r2p/4Rp1Q/3p4/8/1N1P2R1/PqP2bPP/7K b - - 0 24,f2g3 e6e7 b2b1 b3c1 b1c1 h6c1\\n"), "x.csv")
    >>> [(puzzle_id, len(solution_boards(row["FEN"], row["Moves"].split()))) for puzzle_id, _, row in rows]
    [('00008', 6)]
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from typing import TextIO

import chess

__all__ = ["HEADER_EXAMPLE", "puzzle_rows", "solution_boards"]

HEADER_EXAMPLE = "PuzzleId,FEN,Moves,Rating,..."
"""How a Lichess puzzle CSV starts, for error messages."""


def puzzle_rows(handle: TextIO, name: str, required: Sequence[str] = ("FEN", "Moves"), *,
                any_of: Sequence[str] = ()) -> Iterator[tuple[str, int, dict[str, str]]]:
    """Reads the header of a puzzle CSV, then yields (puzzle id, line, row) for each row, ``line`` the row's
    last line in the file.

    Raises:
        ValueError: the header lacks a ``required`` column, or all of
            ``any_of`` (when given), at once; the message names the file.
    """
    reader = csv.DictReader(handle)
    columns = reader.fieldnames or []
    missing = [column for column in required if column not in columns]
    if any_of and not any(column in columns for column in any_of):
        missing.append(" or ".join(any_of))
    if missing:
        raise ValueError(f"{name}: the header lacks {', '.join(missing)}; a Lichess puzzle CSV starts with "
                         f"{HEADER_EXAMPLE!r} (got {','.join(columns)!r})")
    return _rows(reader)


def _rows(reader: csv.DictReader[str]) -> Iterator[tuple[str, int, dict[str, str]]]:
    for number, row in enumerate(reader):
        yield (row.get("PuzzleId") or "").strip() or str(number), reader.line_num, row


def solution_boards(fen: str, moves: Sequence[str], *, standard: bool = False) -> list[chess.Board]:
    """The boards before each move of a puzzle's solution, every move checked legal by python-chess.

    ``standard`` also refuses a position that is not valid standard chess
    (python-chess's ``is_valid``: kings, pawns on the back rank, ...) or
    has Chess960 castling rights.

    Raises:
        ValueError: a bad FEN, a move that is not UCI or is illegal where it
            is played; the message names the move by its number from 1.
    """
    try:
        board = chess.Board(fen)
    except ValueError as error:
        raise ValueError(f"bad FEN {fen!r} ({error})") from None
    if standard and (board.chess960 or not board.is_valid()):
        raise ValueError(f"not a standard chess position: {fen!r}")
    boards = []
    for ply, uci in enumerate(moves, start=1):
        try:
            move = chess.Move.from_uci(uci)
        except ValueError:
            raise ValueError(f"move {ply} {uci!r} is not a UCI move") from None
        if not board.is_legal(move):
            raise ValueError(f"move {ply} {uci!r} is illegal in {board.fen()}")
        boards.append(board.copy(stack=False))
        board.push(move)
    return boards
