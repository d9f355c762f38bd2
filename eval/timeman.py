"""The engine's time manager: how long a move under a clock may search, and when it may stop early.

Two managers, chosen by the engine's ``TimeManager`` option:

- ``simple`` (the engine's first): ``min(t / MovesToGo + 0.75 inc, t / 2) -
  MoveOverhead`` each move, whatever the game's length. Against Stockfish at
  10+0.1 it ended its games with more than half of its clock unused
  (EXPERIMENTS.md, "Issue 24").
- ``smart`` (the default): the clock is shared over the moves the game is
  expected still to last, estimated from the ply as lc0's legacy manager
  does (game lengths follow a log-logistic distribution; its median residual
  life, with a midpoint of 51.5 moves and a steepness of 7), the increments
  of those moves counted and each move's overhead taken off;
  ``OPENING_FACTOR`` more on the engine's first ``OPENING_MOVES`` searched
  moves of a game (its first moves out of book, where a game is often
  decided); time banked by moves that stopped early spent later
  (``BANK_SHARE`` of the bank a move); never more than ``HARD_FRACTION`` of
  the clock left. A search under it stops early once the best move cannot
  be overtaken in the time left (lc0's smart pruning: the runner-up's visits
  plus all the visits the time left could add, over ``PRUNING_FACTOR``, stay
  below the best's).

``movestogo`` from the GUI replaces the estimate in both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MANAGERS = ("smart", "simple")

# The simple manager's constants (the engine's first).
SIMPLE_INCREMENT_SHARE = 0.75
SIMPLE_MAX_FRACTION = 0.5

# The smart manager's constants.
MOVES_LEFT_MIDPOINT = 51.5
MOVES_LEFT_STEEPNESS = 7.0
OPENING_MOVES = 4
OPENING_FACTOR = 1.5
BANK_SHARE = 0.25
HARD_FRACTION = 0.35
PRUNING_FACTOR = 1.33
MIN_BUDGET_MS = 1.0
"""The least budget: the search always expands the root and plays something."""


def estimated_moves_left(ply: int, midpoint: float = MOVES_LEFT_MIDPOINT,
                         steepness: float = MOVES_LEFT_STEEPNESS) -> float:
    """The moves the side to move is expected still to play, from the game's ply (lc0's legacy estimate:
    the median residual life of a log-logistic game length).

    >>> round(estimated_moves_left(0), 1), round(estimated_moves_left(60), 1), round(estimated_moves_left(120), 1)
    (51.5, 21.8, 7.8)
    """
    move = max(ply, 0) / 2.0
    return midpoint * (1.0 + 2.0 * (move / midpoint) ** steepness) ** (1.0 / steepness) - move


@dataclass(frozen=True)
class MovePlan:
    """A move's time: ``budget_ms`` to search (the search stops at the first network call that would end
    past it), and whether it may stop earlier when its best move is settled (smart pruning)."""

    budget_ms: float
    may_stop_early: bool


def simple_budget_ms(remaining_ms: float, increment_ms: float, *, movestogo: int, overhead_ms: float) -> float:
    """The simple manager's budget: min(t / movestogo + 0.75 inc, t / 2) - overhead, at least MIN_BUDGET_MS."""
    budget = min(remaining_ms / movestogo + SIMPLE_INCREMENT_SHARE * increment_ms, SIMPLE_MAX_FRACTION * remaining_ms)
    return max(budget - overhead_ms, MIN_BUDGET_MS)


class TimeManager:
    """The smart manager of one engine: plans each move under a clock and keeps the bank of time saved.

    ``new_game()`` on ``ucinewgame``; ``plan(...)`` before a timed search;
    ``spent(plan, seconds)`` after it, with the seconds the search took.
    """

    def __init__(self) -> None:
        self.bank_ms = 0.0
        self.moves = 0  # timed searches this game

    def new_game(self) -> None:
        self.bank_ms = 0.0
        self.moves = 0

    def plan(self, remaining_ms: float, increment_ms: float, ply: int, *, overhead_ms: float,
             movestogo: int | None = None) -> MovePlan:
        """Plans a move with ``remaining_ms`` on the clock at ``ply`` (see the module docstring)."""
        moves_left = float(movestogo) if movestogo else max(estimated_moves_left(ply), 1.0)
        pool = remaining_ms + increment_ms * (moves_left - 1.0) - overhead_ms * moves_left
        share = max(pool, 0.0) / moves_left
        if self.moves < OPENING_MOVES:
            share *= OPENING_FACTOR
        budget = share + BANK_SHARE * self.bank_ms
        cap = HARD_FRACTION * (remaining_ms - overhead_ms)
        return MovePlan(max(min(budget, cap), MIN_BUDGET_MS), may_stop_early=True)

    def spent(self, plan: MovePlan, seconds: float) -> None:
        """Books a finished search: what it left of its budget goes to the bank, what it overran comes out."""
        self.moves += 1
        self.bank_ms = max(self.bank_ms + plan.budget_ms - 1000.0 * seconds, 0.0)


def best_is_settled(visits: Sequence[int], nodes_per_second: float, seconds_left: float,
                    factor: float = PRUNING_FACTOR) -> bool:
    """Whether no other root move could overtake the most visited one in the time left (lc0's smart
    pruning): the runner-up plus every visit the time left could add, over ``factor``, stays below the best.

    >>> best_is_settled([900, 100, 5], nodes_per_second=2000, seconds_left=0.5)
    True
    >>> best_is_settled([900, 100, 5], nodes_per_second=2000, seconds_left=1.0)
    False
    """
    if len(visits) < 2:
        return True  # one legal move: nothing to decide
    ranked = sorted(visits, reverse=True)
    return ranked[1] + nodes_per_second * max(seconds_left, 0.0) / factor < ranked[0]
