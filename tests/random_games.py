"""Seeded, biased random games over python-chess for differential tests.

Pure random play rarely castles, takes en passant, under-promotes, repeats a
position three times or stalemates, so the mover is nudged. Per ply, with
probabilities that each game draws from its seed, it:

- plays a move that leaves the opponent no legal move (mate; in bare
  endgames also stalemate) when it finds one;
- castles, takes en passant or promotes (to a random piece, capturing if it
  can) when it can;
- plays its own previous move back (repetitions);
- in some games, once few pieces are left, avoids captures and pawn moves
  (the fifty-move rule);
- prefers captures (endgames, insufficient material).

So one corpus holds short decisive games and long shuffling draws.
``tests/test_moves.py`` checks that ``CORPUS_SEEDS`` reaches every rule; if
you change the generator, that test tells you whether the corpus still does.

A game ends as ``mcts_ext.Board.termination()`` would end it: checkmate,
insufficient material, stalemate, the fifty-move rule, threefold repetition
(both without a claim), or the ply limit, checked in that order.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Iterable, Iterator
from typing import Final

import chess

CORPUS_SEEDS: Final = range(60)  # the smallest prefix that covers every rule
DEFAULT_MAX_PLIES: Final = 600
_STALEMATE_HUNT_PIECES: Final = 6  # look for stalemates with at most this many pieces


@dataclasses.dataclass(frozen=True)
class _Style:
    """How strongly one game's mover follows each nudge (probabilities per ply)."""

    capture: float  # take something when a capture is legal
    back: float  # play the mover's previous move reversed when legal
    mate: float  # look for a mate in one (costly: pushes every move)
    special: float  # castle / take en passant / promote when possible
    quiet_below: int  # with fewer pieces than this, avoid captures and pawn moves (fifty-move rule)


@dataclasses.dataclass(frozen=True)
class Game:
    """One finished random game: its seed, moves, final board and how it ended."""

    seed: int
    moves: list[chess.Move]
    board: chess.Board  # the final position, with the whole move stack
    termination: str  # a name from mcts_ext.TERMINATIONS


def termination(board: chess.Board, *, max_plies: int = DEFAULT_MAX_PLIES) -> str | None:
    """Gets how the game on ``board`` has ended, or None if it goes on.

    The names and their order are those of ``mcts_ext.Board.termination()``.
    """
    if not any(board.generate_legal_moves()):
        return "checkmate" if board.is_check() else "stalemate"
    if board.is_insufficient_material():
        return "insufficient_material"
    if board.is_fifty_moves():
        return "fifty_moves"
    if board.is_repetition(3):
        return "threefold_repetition"
    if board.ply() >= max_plies:
        return "ply_limit"
    return None


def _draw_style(rng: random.Random) -> _Style:
    """Draws one game's biases: a third of games never play a move back, two thirds never
    go quiet."""
    return _Style(
        capture=rng.uniform(0.1, 0.9),
        back=rng.choice((0.0, 0.05, 0.2)),
        mate=rng.uniform(0.0, 0.5),
        special=rng.uniform(0.2, 0.8),
        quiet_below=rng.choice((0, 0, 12)),
    )


def _final_move(board: chess.Board, moves: list[chess.Move]) -> chess.Move | None:
    """Returns a move of ``moves`` that leaves the opponent no legal move, or None.

    Checks only checking moves (mates) unless few pieces are left, where
    stalemates happen and trying every move is cheap.
    """
    endgame = chess.popcount(board.occupied) <= _STALEMATE_HUNT_PIECES
    for move in moves:
        if endgame or board.gives_check(move):
            board.push(move)
            final = not any(board.generate_legal_moves())
            board.pop()
            if final:
                return move
    return None


def _move_back(board: chess.Board) -> chess.Move | None:
    """Returns the mover's previous move reversed, if that is legal now."""
    if len(board.move_stack) < 2:
        return None
    previous = board.move_stack[-2]
    if previous.promotion is not None:
        return None
    back = chess.Move(previous.to_square, previous.from_square)
    return back if board.is_legal(back) else None


def _special(board: chess.Board, moves: list[chess.Move], rng: random.Random) -> chess.Move | None:
    """Returns a random castling, en passant or promotion move of ``moves``, or None."""
    # Capture-promotions first: they are rare and exercise the diagonal promotion planes.
    capture_promotions = [m for m in moves if m.promotion and board.is_capture(m)]
    if capture_promotions:
        return rng.choice(capture_promotions)
    specials = [m for m in moves if m.promotion or board.is_castling(m) or board.is_en_passant(m)]
    return rng.choice(specials) if specials else None


def _choose(board: chess.Board, style: _Style, rng: random.Random) -> chess.Move:
    """Chooses the next move by the game's style; ``board`` is left unchanged."""
    moves = list(board.legal_moves)
    if rng.random() < style.mate and (mate := _final_move(board, moves)):
        return mate
    if rng.random() < style.special and (special := _special(board, moves, rng)):
        return special
    if rng.random() < style.back and (back := _move_back(board)):
        return back
    if chess.popcount(board.occupied) < style.quiet_below:
        quiet = [m for m in moves if not board.is_zeroing(m)]
        return rng.choice(quiet or moves)
    if rng.random() < style.capture:
        captures = [m for m in moves if board.is_capture(m)]
        if captures:
            return rng.choice(captures)
    return rng.choice(moves)


def random_game(seed: int, *, max_plies: int = DEFAULT_MAX_PLIES) -> Game:
    """Plays one biased random game from the start position, reproducibly from ``seed``.

    >>> random_game(0).moves == random_game(0).moves
    True
    """
    rng = random.Random(seed)
    style = _draw_style(rng)
    board = chess.Board()
    while (ended := termination(board, max_plies=max_plies)) is None:
        board.push(_choose(board, style, rng))
    return Game(seed=seed, moves=list(board.move_stack), board=board, termination=ended)


@functools.cache
def corpus(seeds: tuple[int, ...] = tuple(CORPUS_SEEDS)) -> tuple[Game, ...]:
    """Gets the games of ``seeds`` (the corpus by default), computed once per process.

    Callers must not mutate the returned boards; copy them first.
    """
    return tuple(random_game(seed) for seed in seeds)


def iter_positions(seeds: Iterable[int] = CORPUS_SEEDS) -> Iterator[chess.Board]:
    """Yields every position of the games of ``seeds``, start and final ones included.

    Each is a fresh board with its move stack (so history and repetitions can
    be read from it); the caller may mutate it.
    """
    for game in corpus(tuple(seeds)):
        board = chess.Board()
        yield board.copy()
        for move in game.moves:
            board.push(move)
            yield board.copy()
