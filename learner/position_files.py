"""Positions from files: what ``alphazero pretrain --positions-from`` labels, game by game.

The mainline positions of PGN games (with their history), the positions of
EPD lines, and the positions of Lichess puzzles (a CSV with ``FEN`` and
``Moves`` columns: the position before the opponent's move and each one after
it but the last, with their history; with ``pretrain.puzzle_alternatives`` K
> 0, after a puzzle's own positions, the positions after up to K other legal
moves of the solver in each of its positions, drawn by a generator seeded by
the puzzle's id and ply), in file order. Puzzles of the ``held_out`` CSVs
(the puzzle yardstick, by default) are left out, matched by ``PuzzleId`` and
by every position, so a network trained on the labels is still tested on
puzzles it never saw.

``file_positions`` yields the positions one by one; ``segments_of`` groups a
chunk's consecutive positions of one game into the Segments that
learner.label_games labels.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import chess

from alphazero.chess.pgn_reader import READ_ERRORS, PgnGame, open_text, read_games
from alphazero.chess.puzzles import puzzle_rows, solution_boards
from alphazero.errors import UserError
from mcts_ext import Board, ChessError

__all__ = ["Segment", "file_positions", "puzzle_keys", "segments_of"]

@dataclass(frozen=True)
class Segment:
    """Consecutive positions of one source game: after ``history``, then after each of ``moves`` but the last."""

    game_id: str
    start_fen: str
    history: list[str]
    moves: list[str]  # the moves played from the first labelled position; len(moves) positions


def file_positions(paths: Sequence[str], skipped: Counter[str], held_out: frozenset[str] = frozenset(),
                    alternatives: int = 0) -> Iterator[tuple[str, str, list[str], str]]:
    """Yields (game id, start FEN, moves before the position, next move or '') for every position of the files.

    PGN games give each position before a mainline move; EPD lines (files
    named .epd, optionally compressed; a whole FEN on a line is read too)
    one position each; puzzle CSVs (named .csv) each puzzle's positions but
    those of ``held_out`` (puzzle_keys), each followed by the positions after
    up to ``alternatives`` other moves of the solver. Skipped games, lines and puzzles are
    counted in ``skipped``; a damaged file is reported and left.
    """
    for path in paths:
        name = Path(path).name
        suffixes = Path(path).suffixes
        try:
            with open_text(path) as handle:
                if ".csv" in suffixes:
                    yield from _puzzle_file_positions(handle, name, skipped, held_out, alternatives)
                elif ".epd" in suffixes:
                    yield from _epd_file_positions(handle, name, skipped)
                else:
                    for item in read_games(handle):
                        if not isinstance(item, PgnGame):
                            skipped[item] += 1
                            continue
                        try:
                            Board(item.start_fen)
                        except ChessError:
                            skipped["unsupported start position"] += 1
                            continue
                        for ply, move in enumerate(item.moves):
                            yield f"{name}:{item.number}", item.start_fen, item.moves[:ply], move
        except READ_ERRORS as error:
            skipped["damaged file"] += 1
            print(f"warning: stopped reading {path}: {error}", flush=True)


def _epd_file_positions(handle: TextIO, name: str, skipped: Counter[str]) -> Iterator[tuple[str, str, list[str], str]]:
    """Yields each readable EPD line's position (file_positions' items)."""
    for number, line in enumerate(handle, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            board = _epd_board(text)
            Board(board.fen())
        except (ValueError, ChessError):
            skipped["unreadable EPD line"] += 1
            continue
        if not any(board.legal_moves) or board.chess960:
            skipped["EPD position without a move to label"] += 1
            continue
        yield f"{name}:{number}", board.fen(), [], ""


def _puzzle_position_keys(boards: Sequence[chess.Board]) -> list[str]:
    """The positions of a puzzle before each of its moves (solution_boards), without clocks (``board.epd()``):
    what a held-out puzzle is recognised by, whatever its id."""
    return ["position " + board.epd() for board in boards]


def puzzle_keys(paths: Sequence[str | os.PathLike[str]]) -> frozenset[str]:
    """Reads the ids and positions of the puzzles in these CSVs: the keys that leave a puzzle out of labelling.

    Raises:
        UserError: a file cannot be read or is not a puzzle CSV.
    """
    keys: set[str] = set()
    for path in paths:
        try:
            with open_text(path) as handle:
                for puzzle_id, _, row in puzzle_rows(handle, Path(path).name):
                    keys.add("id " + puzzle_id)
                    with contextlib.suppress(ValueError):
                        boards = solution_boards(row["FEN"] or "", (row["Moves"] or "").split(), standard=True)
                        keys.update(_puzzle_position_keys(boards))
        except READ_ERRORS as error:
            raise UserError(f"cannot read the held-out puzzles {path}: {error}") from None
    return frozenset(keys)


def _puzzle_file_positions(handle: TextIO, name: str, skipped: Counter[str], held_out: frozenset[str],
                           alternatives: int = 0) -> Iterator[tuple[str, str, list[str], str]]:
    """Yields the positions of each puzzle (before each of its moves) not held out, then those after up to
    ``alternatives`` other moves of the solver in each of its positions (file_positions' items)."""
    for puzzle_id, _, row in puzzle_rows(handle, name):
        fen, moves = (row["FEN"] or "").strip(), (row["Moves"] or "").split()
        try:
            if not moves:
                raise ValueError("no moves")
            boards = solution_boards(fen, moves, standard=True)
            Board(fen)
        except (ValueError, ChessError):
            skipped["unreadable puzzle"] += 1
            continue
        if "id " + puzzle_id in held_out or any(key in held_out for key in _puzzle_position_keys(boards)):
            skipped["held-out puzzle"] += 1
            continue
        for ply, move in enumerate(moves):
            yield f"{name}:{puzzle_id}", fen, moves[:ply], move
        for ply in range(1, len(moves), 2) if alternatives > 0 else ():  # the solver moves at odd plies
            for other in _other_moves(boards[ply], moves[ply], alternatives, f"{puzzle_id}:{ply}"):
                yield f"{name}:{puzzle_id}", fen, [*moves[:ply], other], ""


def _other_moves(board: chess.Board, played: str, count: int, seed: str) -> list[str]:
    """Up to ``count`` legal moves of ``board`` other than ``played``, drawn at random by a generator seeded
    by ``seed``, that do not end the game (a position without a move has nothing to label)."""
    others = sorted(move.uci() for move in board.legal_moves if move.uci() != played)
    random.Random(seed).shuffle(others)
    chosen: list[str] = []
    for uci in others:
        if len(chosen) == count:
            break
        board.push_uci(uci)
        if any(board.legal_moves):
            chosen.append(uci)
        board.pop()
    return chosen


def _epd_board(text: str) -> chess.Board:
    """Reads an EPD line, or a whole FEN on the line: the official-stockfish books' endgames.epd and UHO_*
    files write the halfmove clock and move number where EPD puts its operations.

    Raises:
        ValueError: neither.
    """
    fields = text.split()
    if len(fields) == 6 and fields[4].isdigit() and fields[5].isdigit():
        return chess.Board(text)
    return chess.Board.from_epd(text)[0]


def segments_of(items: list[tuple[str, str, list[str], str]]) -> list[Segment]:
    """Groups consecutive positions of the same game into segments."""
    segments: list[Segment] = []
    for game_id, fen, history, move in items:
        last = segments[-1] if segments else None
        if last is not None and last.game_id == game_id and last.start_fen == fen \
                and history == last.history + last.moves:
            last.moves.append(move)
            continue
        segments.append(Segment(game_id, fen, list(history), [move]))
    return segments
