"""Reads perft cases (EPD-like files) and explains a mismatch move by move."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import chess

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class PerftCase:
    fen: str
    counts: dict[int, int]  # depth -> leaf count

    def __str__(self) -> str:
        return self.fen


def load_cases(name: str) -> list[PerftCase]:
    """Parses `FEN ;D1 n ;D2 n ...` lines of tests/data/NAME, skipping comments."""
    cases = []
    for line in (DATA / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fen, *fields = (part.strip() for part in line.split(";"))
        counts = {int(field.split()[0][1:]): int(field.split()[1]) for field in fields}
        cases.append(PerftCase(fen, counts))
    return cases


def python_chess_divide(fen: str, depth: int) -> dict[str, int]:
    board = chess.Board(fen)
    result = {}
    for move in board.legal_moves:
        board.push(move)
        result[move.uci()] = _python_chess_perft(board, depth - 1)
        board.pop()
    return result


def _python_chess_perft(board: chess.Board, depth: int) -> int:
    if depth == 0:
        return 1
    if depth == 1:
        return board.legal_moves.count()
    total = 0
    for move in board.legal_moves:
        board.push(move)
        total += _python_chess_perft(board, depth - 1)
        board.pop()
    return total


def python_chess_perft(fen: str, depth: int) -> int:
    return _python_chess_perft(chess.Board(fen), depth)


def explain_mismatch(fen: str, depth: int) -> str:
    """The moves whose subtree counts differ from python-chess's, one per line."""
    from mcts_ext import Board

    ours = dict(Board(fen).perft_divide(depth))
    theirs = python_chess_divide(fen, min(depth, 3)) if depth <= 3 else {m: -1 for m in ours}
    lines = [f"perft divide of {fen} at depth {depth}:"]
    for move in sorted(set(ours) | set(theirs)):
        if ours.get(move) != theirs.get(move):
            lines.append(f"  {move}: ours {ours.get(move)}, python-chess {theirs.get(move)}")
    return "\n".join(lines)
