"""The engine's time manager: how long a move under a clock may search, and when it may stop early.

Two managers, chosen by the engine's ``TimeManager`` option:

- ``simple`` (the engine's first): ``min(t / MovesToGo + 0.75 inc, t / 2) -
  MoveOverhead`` each move, whatever the game's length, which leaves much of
  the clock unused at the game's end (EXPERIMENTS.md, "The UCI
  engine's batches at equal time").
- ``smart`` (the default): the clock is shared over the moves the game is
  expected still to last, estimated from the ply as lc0's legacy manager
  does (game lengths follow a log-logistic distribution; its median residual
  life, ``estimated_moves_left``), the increments of those moves counted
  and each move's overhead taken off;
  ``OPENING_FACTOR`` more on the engine's first ``OPENING_MOVES`` searched
  moves of a game (its first moves out of book, where a game is often
  decided); time banked by moves that stopped early spent later
  (``BANK_SHARE`` of the bank a move, never more than the move's own
  share); never more than ``HARD_FRACTION`` of the clock left. A search
  under it stops early once the best move cannot be overtaken in the time
  left (lc0's smart pruning: the runner-up's visits plus all the visits the
  time left could add, over ``PRUNING_FACTOR``, stay below the best's).

  Smart pruning ends most searches before their budgets, and with a network
  whose policy is sharp, most well before (EXPERIMENTS.md, "The
  engine keeps its clock again"); the bank gives back at most a share a
  move, so the time they save stayed on the clock to the game's end. So the
  manager learns the share of its budgets that searches use (a moving
  average over the game, ``TIME_USE_WEIGHT`` for the latest move, from 1)
  and plans each share over it, never over less than ``MIN_TIME_USE``, as
  lc0's smooth manager does.

  A reserve is never shared out: ``RESERVE_FRACTION`` of the game's first
  clock, or ``RESERVE_OVERHEADS`` moves' overhead if more, or, where a
  move's least cost is more than the increment, ``RESERVE_DRAIN_MOVES`` of
  that difference (games outlive the estimate), or ``RESERVE_OVERRUNS``
  times the most a move of this game has cost the clock beyond its plan
  (a machine that stalled once may stall again); these last three at most
  ``RESERVE_MAX_FRACTION`` of the first clock. At the reserve a move gets at
  most ``RESERVE_INCREMENT_SHARE`` of the increment, so the clock grows
  back. Without a reserve, games at the fastest clocks live on the
  increment alone and one slow move loses on time (EXPERIMENTS.md, "The
  engine under a clock"). A move's overhead is the larger of MoveOverhead
  and the lag the clocks show: what the GUI's clock lost over
  a move beyond the engine's own search, or beyond its budget when the
  search overran it (pipes, the GUI, a server; a least search longer than a
  tiny budget), averaged over the game.

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
RESERVE_FRACTION = 0.05
RESERVE_OVERHEADS = 10
RESERVE_DRAIN_MOVES = 100
RESERVE_OVERRUNS = 5
RESERVE_MAX_FRACTION = 0.25
RESERVE_INCREMENT_SHARE = 0.5
LAG_AVERAGE_WEIGHT = 0.2
"""The weight of the latest move in the moving average of the lag the clocks show."""
TIME_USE_WEIGHT = 0.2
"""The weight of the latest move in the moving average of the share of its budget a search used."""
MIN_TIME_USE = 0.4
"""The least share of its budgets the manager assumes searches use: a share is planned at most 1 / this larger."""
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
    from_bank_ms: float = 0.0
    """The part of the budget lent by the bank (time earlier moves saved): spent, it leaves the bank."""


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
        self.new_game()

    def new_game(self) -> None:
        """Forgets the last game: its bank, its reserve, its lag, its worst overrun, its searches' time use."""
        self.bank_ms = 0.0
        self.moves = 0  # timed searches this game
        self.first_clock_ms: float | None = None  # the clock of the game's first timed search
        self.lag_ms = 0.0  # the moving average of what the clock lost beyond the engine's search time
        self.worst_overrun_ms = 0.0  # the most the clock lost over a move beyond that move's budget
        self.time_use = 1.0  # the moving average of the share of its budget a search used (at most 1 a move)
        self._last_move: tuple[float, float, float] | None = None  # the last plan's clock, increment, budget
        self._last_search_ms: float | None = None  # its search time, once spent

    def plan(self, remaining_ms: float, increment_ms: float, ply: int, *, overhead_ms: float,
             movestogo: int | None = None) -> MovePlan:
        """Plans a move with ``remaining_ms`` on the clock at ``ply`` (see the module docstring)."""
        if self.first_clock_ms is None:
            self.first_clock_ms = max(remaining_ms, 0.0)
        self._observe_lag(remaining_ms)
        overhead_ms = max(overhead_ms, self.lag_ms)
        drain = max(overhead_ms + MIN_BUDGET_MS - increment_ms, 0.0)  # what a least move costs the clock
        reserve = max(RESERVE_FRACTION * self.first_clock_ms,
                      min(max(RESERVE_OVERHEADS * overhead_ms, RESERVE_DRAIN_MOVES * drain,
                              RESERVE_OVERRUNS * self.worst_overrun_ms),
                          RESERVE_MAX_FRACTION * self.first_clock_ms))
        usable = remaining_ms - reserve
        moves_left = float(movestogo) if movestogo else max(estimated_moves_left(ply), 1.0)
        pool = usable + increment_ms * (moves_left - 1.0) - overhead_ms * moves_left
        share = max(pool, 0.0) / moves_left / max(self.time_use, MIN_TIME_USE)
        if self.moves < OPENING_MOVES:
            share *= OPENING_FACTOR
        lent = min(BANK_SHARE * self.bank_ms, share)
        budget = share + lent
        # Above the reserve a share of what is above it; at or below it, less than the increment (the clock
        # grows back); never a share of the clock itself past HARD_FRACTION (the increment comes after the move).
        cap = min(max(HARD_FRACTION * (usable - overhead_ms), RESERVE_INCREMENT_SHARE * increment_ms - overhead_ms),
                  HARD_FRACTION * (remaining_ms - overhead_ms))
        final = max(min(budget, cap), MIN_BUDGET_MS)
        # The loan is what the budget kept of it above the move's own share (a cap takes it off first).
        plan = MovePlan(final, may_stop_early=True, from_bank_ms=min(max(final - share, 0.0), lent))
        self._last_move, self._last_search_ms = (remaining_ms, increment_ms, plan.budget_ms), None
        return plan

    def _observe_lag(self, remaining_ms: float) -> None:
        """Averages in what the clock lost over the last move beyond its search, or beyond its budget when
        the search overran it (the least search, one network call, can outlast a budget of a millisecond),
        and keeps the most it lost beyond its budget (a stall: the search and the pipes both slow).
        Never below 0: a clock that grew more than the increment (a new time period, a server's lag
        compensation) shows no lag."""
        if self._last_move is None or self._last_search_ms is None:
            return
        last_remaining, last_increment, last_budget = self._last_move
        lost = last_remaining + last_increment - remaining_ms
        lag = max(lost - min(self._last_search_ms, last_budget), 0.0)
        self.lag_ms += LAG_AVERAGE_WEIGHT * (lag - self.lag_ms)
        self.worst_overrun_ms = max(self.worst_overrun_ms, lost - last_budget)

    def spent(self, plan: MovePlan, seconds: float) -> None:
        """Books a finished search: the bank's loan leaves the bank, what the search left of its budget goes back
        to it, what it overran comes out, and the share of its budget it used goes into the time use. (Crediting
        the unspent budget alone, loan included, gave the loan back to the bank on every move: saved time
        never drained.)"""
        self._last_search_ms = 1000.0 * seconds
        self.moves += 1
        used = min(1000.0 * seconds / plan.budget_ms, 1.0)  # an overrun counts as the whole budget
        self.time_use += TIME_USE_WEIGHT * (used - self.time_use)
        self.bank_ms = max(self.bank_ms - plan.from_bank_ms + plan.budget_ms - 1000.0 * seconds, 0.0)


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
