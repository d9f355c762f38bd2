"""The engine's time manager: the budget at a few clocks and plies, movestogo, the hard cap, the bank."""

from __future__ import annotations

import pytest

from eval.timeman import (
    BANK_SHARE,
    HARD_FRACTION,
    MIN_BUDGET_MS,
    OPENING_FACTOR,
    OPENING_MOVES,
    TimeManager,
    best_is_settled,
    estimated_moves_left,
)
from eval.uci import GoCommand, plan_search_time


def _past_the_opening() -> TimeManager:
    manager = TimeManager()
    for _ in range(OPENING_MOVES):
        plan = manager.plan(60_000, 0, 0, overhead_ms=0)
        manager.spent(plan, seconds=plan.budget_ms / 1000)  # each used its whole budget: nothing banked
    assert manager.bank_ms == pytest.approx(0.0)
    return manager


@pytest.mark.parametrize(("remaining", "increment", "ply"), [(10_000, 100, 0), (10_000, 100, 60), (60_000, 0, 40),
                                                             (180_000, 2_000, 100)])
def test_the_clock_is_shared_over_the_moves_expected_with_their_increments(remaining: float, increment: float,
                                                                             ply: int) -> None:
    manager = _past_the_opening()
    moves = estimated_moves_left(ply)
    expected = (remaining + increment * (moves - 1) - 30 * moves) / moves
    plan = manager.plan(remaining, increment, ply, overhead_ms=30)
    assert plan.budget_ms == pytest.approx(min(expected, HARD_FRACTION * (remaining - 30)))
    assert plan.may_stop_early
    # The first moves of a game (out of book) get more.
    assert TimeManager().plan(remaining, increment, ply, overhead_ms=30).budget_ms == pytest.approx(
        min(OPENING_FACTOR * expected, HARD_FRACTION * (remaining - 30)))


def test_later_plies_expect_fewer_moves_and_movestogo_from_the_gui_wins() -> None:
    assert estimated_moves_left(0) > estimated_moves_left(60) > estimated_moves_left(120) > 1
    manager = _past_the_opening()
    assert manager.plan(60_000, 0, 80, overhead_ms=0).budget_ms > manager.plan(60_000, 0, 0, overhead_ms=0).budget_ms
    assert manager.plan(60_000, 0, 0, overhead_ms=0, movestogo=10).budget_ms == pytest.approx(6_000)
    go = GoCommand(wtime=60_000, btime=60_000, movestogo=10)
    plan = plan_search_time(go, True, overhead_ms=0, moves_to_go=30, ply=0, manager=manager)
    assert plan is not None and plan.budget_ms == pytest.approx(6_000)


def test_the_hard_cap_holds_when_the_clock_is_nearly_out() -> None:
    manager = _past_the_opening()
    manager.bank_ms = 50_000.0  # even with a large bank of saved time
    for remaining in (2_000, 500, 100):
        assert manager.plan(remaining, 100, 150, overhead_ms=30).budget_ms <= max(HARD_FRACTION * (remaining - 30),
                                                                                   MIN_BUDGET_MS)
    assert manager.plan(20, 0, 150, overhead_ms=30).budget_ms == MIN_BUDGET_MS  # a move is always chosen


def test_time_saved_by_an_early_stop_is_spent_later_and_a_new_game_forgets_it() -> None:
    manager = _past_the_opening()
    plan = manager.plan(60_000, 0, 20, overhead_ms=0)
    manager.spent(plan, seconds=plan.budget_ms / 4000)  # stopped after a quarter
    assert manager.bank_ms == pytest.approx(0.75 * plan.budget_ms)
    later = manager.plan(60_000, 0, 20, overhead_ms=0)
    assert later.budget_ms == pytest.approx(plan.budget_ms + BANK_SHARE * manager.bank_ms)
    manager.spent(later, seconds=10 * later.budget_ms / 1000)  # an overrun empties the bank, never below 0
    assert manager.bank_ms == 0.0
    manager.bank_ms = 5.0
    manager.new_game()
    assert (manager.bank_ms, manager.moves) == (0.0, 0)


def test_the_best_move_is_settled_only_when_the_time_left_cannot_overturn_it() -> None:
    assert best_is_settled([50], nodes_per_second=1e6, seconds_left=10)  # one legal move
    assert not best_is_settled([300, 290, 10], nodes_per_second=100, seconds_left=1)
    assert best_is_settled([300, 100, 10], nodes_per_second=100, seconds_left=1)
    assert not best_is_settled([300, 100, 10], nodes_per_second=1000, seconds_left=1)
