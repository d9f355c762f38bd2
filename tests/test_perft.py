"""Perft: the move generator counts exactly the published leaf numbers."""

from __future__ import annotations

import pytest

from mcts_ext import Board
from tests.perft_runner import explain_mismatch, load_cases, python_chess_perft

STANDARD = load_cases("perft.epd")
TRICKY = load_cases("tricky.epd")


@pytest.mark.parametrize("case", STANDARD, ids=str)
def test_standard_positions_match_published_counts(case):
    board = Board(case.fen)
    for depth, expected in sorted(case.counts.items()):
        got = board.perft(depth)
        assert got == expected, f"depth {depth}: {got} != {expected}\n{explain_mismatch(case.fen, depth)}"


@pytest.mark.parametrize("case", STANDARD[:3], ids=str)
def test_making_every_last_move_counts_the_same(case):
    board = Board(case.fen)
    assert board.perft(4, bulk=False) == case.counts[4]


@pytest.mark.parametrize("case", TRICKY, ids=str)
def test_rule_specific_positions_match_python_chess(case):
    board = Board(case.fen)
    for depth in (1, 2, 3):
        expected = python_chess_perft(case.fen, depth)
        got = board.perft(depth)
        assert got == expected, f"depth {depth}: {got} != {expected}\n{explain_mismatch(case.fen, depth)}"


def test_divide_lists_each_legal_move_with_its_subtree():
    divide = dict(Board().perft_divide(3))
    assert len(divide) == 20
    assert sum(divide.values()) == 8902
    assert divide["e2e4"] == 600 and divide["g1f3"] == 440


def test_perft_depth_zero_is_one_and_negative_raises():
    assert Board().perft(0) == 1
    with pytest.raises(ValueError):
        Board().perft(-1)
