"""Issue 80, trees escaping their memory limit: the copy a kept subtree is made in, the action values a tree
enables, the default limit that two searches of one process would each take whole, and a growth that fails
half way. Each test here failed before its fix."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from mcts_ext import Board
from mcts_ext import params as params_module
from mcts_ext import tree as tree_module
from mcts_ext.driver import run
from mcts_ext.params import SearchParams, default_tree_memory_bytes
from mcts_ext.search import MultiGameSearch, default_memory_searches
from tests.helpers import material_evaluator

ITALIAN = "r1bqkbnr/pppp1ppp/2n5/4p3/2B1P3/5N2/PPPP1PPP/RNBQK2R b KQkq - 3 3"
MIB = 2**20
LOTS = 10_000_000  # a budget no capped test reaches: the tree's memory ends each search


def _with_action_values(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, ...]:
    """material_evaluator, and a win probability of 0.4 for every move (the action-value head's output)."""
    logits, values = material_evaluator(planes, scalars)
    return logits, values, np.full(logits.shape, 0.4, np.float32)


# -- 1. tree reuse: the copy counts inside the limit ---------------------------------------------------------


def test_a_full_trees_subtree_is_not_copied_past_the_limit_and_the_search_starts_afresh() -> None:
    # A tree at its limit has no room beside it for a copy of its subtree: the reuse is dropped, not the search.
    board = Board(ITALIAN)
    search = MultiGameSearch(1, SearchParams(simulations=LOTS, autoplay=False, tree_memory_mb=0.25), seed=1)
    search.set_position(0, board)
    run(search, material_evaluator)
    assert search.tree_full(0)
    board.push_uci(search.best_move(0))
    assert not search.set_position(0, board, reuse=True)  # a fresh tree
    assert search.reuse_dropped == 1
    assert search.peak_tree_bytes <= search.tree_memory_limit
    assert search.state(0) == "searching" and search.tree_size(0) == (1, 0)
    run(search, material_evaluator)
    assert search.tree_full(0) and search.tree_bytes(0) <= search.tree_memory_limit
    assert search.best_move(0) in board.legal_moves()


def test_kept_subtrees_and_their_copies_stay_within_the_limit_together() -> None:
    # Trees of a few hundred kilobytes in a limit of 1.5 MiB: a slot's tree, the scratch it is copied into
    # (holding the tree before, until it must give its memory back) and the copy's queue, at every move.
    board = Board(ITALIAN)
    search = MultiGameSearch(1, SearchParams(simulations=1500, autoplay=False, tree_memory_mb=1.5), seed=2)
    kept = 0
    for _ in range(6):
        kept += search.set_position(0, board, reuse=True)
        run(search, material_evaluator)
        assert search.tree_bytes(0) <= search.tree_memory_limit
        board.push_uci(search.best_move(0))
    assert kept >= 3
    assert 0 < search.peak_tree_bytes <= search.tree_memory_limit


def test_self_play_with_reuse_in_small_trees_keeps_its_copies_within_the_limit() -> None:
    params = SearchParams(simulations=600, ply_limit=10, tree_reuse=True, tree_memory_mb=1.0)
    search = MultiGameSearch(2, params, seed=4)
    finished = []
    run(search, material_evaluator, on_step=lambda rows: finished.extend(search.take_finished()))
    assert len(finished) == 2
    assert 0 < search.peak_tree_bytes <= search.tree_memory_limit
    assert all(search.tree_bytes(g) <= search.tree_memory_limit for g in range(2))


def test_a_kept_subtree_keeps_its_action_values_in_its_copy() -> None:
    board = Board(ITALIAN)
    search = MultiGameSearch(1, SearchParams(simulations=200, autoplay=False, fpu_mode="action_value",
                                             tree_memory_mb=1), seed=1)
    for _ in range(2):  # a scratch laid out without action values, then one holding the tree before
        search.set_position(0, board, reuse=True)
        run(search, _with_action_values)
        move = search.best_move(0)
        values = search.action_values(0, [move])
        assert any(value is not None for value in values.values())
        board.push_uci(move)
        assert search.set_position(0, board, reuse=True)
        assert search.action_values(0) == values
    assert search.reuse_dropped == 0 and 0 < search.peak_tree_bytes <= search.tree_memory_limit


# -- 2. action values count in the limit --------------------------------------------------------------------


def test_action_values_that_no_longer_fit_beside_the_tree_end_its_search_instead() -> None:
    # The network brings no action values until the tree's edges are too many for their 4 bytes each.
    search = MultiGameSearch(1, SearchParams(simulations=LOTS, autoplay=False, fpu_mode="action_value",
                                             tree_memory_mb=0.25), seed=1)
    limit = search.tree_memory_limit
    search.set_position(0, Board(ITALIAN))
    batch = search.new_batch()
    brought = False
    while search.searching() and not brought:
        rows = search.gather(*batch)
        logits, values, action_values = _with_action_values(batch[0][:rows], batch[1][:rows])
        _, edges = search.tree_size(0)
        brought = edges * search.bytes_per_edge > limit
        search.backup(logits, values, action_values if brought else None)  # no MemoryError
    assert brought
    assert search.tree_bytes(0) <= limit
    assert search.tree_full(0)
    run(search, _with_action_values)
    assert search.state(0) == "ready" and search.tree_bytes(0) <= limit
    assert all(value is None for value in search.action_values(0).values())
    assert search.best_move(0) in Board(ITALIAN).legal_moves()


def test_a_small_tree_makes_room_for_its_action_values_within_the_limit() -> None:
    # A tree starts with room for 4096 edges; with their action values those would pass this limit.
    limit = 60_000
    search = MultiGameSearch(1, SearchParams(simulations=LOTS, autoplay=False, fpu_mode="action_value",
                                             tree_memory_mb=limit / MIB), seed=1)
    assert search.tree_memory_limit == limit
    search.set_position(0, Board(ITALIAN))
    run(search, _with_action_values)
    assert search.tree_full(0) and search.simulations(0) > 50
    assert search.tree_bytes(0) <= limit
    assert any(value is not None for value in search.action_values(0).values())


# -- 3. the default limit is shared by the process's searches -------------------------------------------------


def test_searches_with_the_default_limit_share_it(monkeypatch: pytest.MonkeyPatch) -> None:
    gc.collect()  # no search an earlier test dropped shares it any more (those still held do: `others`)
    others = default_memory_searches()
    monkeypatch.setattr(params_module, "machine_memory_bytes", lambda: 2 * MIB * (others + 1))
    share = MIB  # each search's when `first` is one of others + 1
    assert default_tree_memory_bytes() == share * (others + 1)
    first = MultiGameSearch(1, SearchParams(simulations=LOTS, autoplay=False), seed=1)
    assert first.tree_memory_limit == share
    first.set_position(0, Board(ITALIAN))
    run(first, material_evaluator)
    assert first.tree_full(0) and first.tree_bytes(0) > MIB // 2
    full = first.tree_bytes(0)
    second = MultiGameSearch(2, SearchParams(simulations=8, autoplay=False))
    smaller = default_tree_memory_bytes() // (others + 2)
    assert first.tree_memory_limit == smaller < share and second.tree_memory_limit == smaller // 2
    fixed = MultiGameSearch(1, SearchParams(simulations=8, tree_memory_mb=3))  # a limit of its own: not shared
    assert fixed.tree_memory_limit == 3 * MIB and first.tree_memory_limit == smaller
    # A tree above its new, smaller limit keeps what it has and grows no further.
    assert first.set_position(0, Board(ITALIAN), simulations=1000, reuse=True)
    run(first, material_evaluator)
    assert first.tree_full(0) and first.tree_bytes(0) == full
    del second
    gc.collect()
    assert first.tree_memory_limit == share
    del first, fixed
    monkeypatch.undo()
    MultiGameSearch(1, SearchParams(simulations=8))  # measures the machine again for searches still alive


def test_two_default_searches_each_get_half_and_one_gets_all_back() -> None:
    gc.collect()
    others = default_memory_searches()  # held by earlier tests of this process
    params = SearchParams(simulations=8)
    a = MultiGameSearch(2, params)
    alone = a.tree_memory_limit
    assert alone == default_tree_memory_bytes() // (others + 1) // 2
    b = MultiGameSearch(2, params)
    assert a.tree_memory_limit == b.tree_memory_limit == default_tree_memory_bytes() // (others + 2) // 2
    del b
    gc.collect()
    assert a.tree_memory_limit == alone


# -- 4. a growth either happens whole or leaves the tree as it was -----------------------------------------------


@pytest.mark.parametrize("action_values", [False, True])
def test_each_kind_of_arrays_lies_in_one_block_that_the_trees_bytes_count(action_values: bool) -> None:
    layout = tree_module.tree_layout(1000, 3000, action_values)
    for block, capacity, fields in (("nodes", 1000, layout["nodes"]), ("edges", 3000, layout["edges"])):
        offset = 0
        for name, item_size, start in fields:
            assert start == offset, (block, name)  # one after the other, nothing between
            assert start % item_size == 0, (block, name)  # each aligned for its type
            offset += capacity * item_size
        assert offset == layout[f"{block}_bytes"], block
    assert layout["nodes_bytes"] + layout["edges_bytes"] == layout["tree_bytes"]
    assert len(layout["nodes"]) == 11 and len(layout["edges"]) == 3 + action_values


@pytest.mark.parametrize("arrays", ["nodes", "edges", "action_values"])
def test_a_growth_that_cannot_be_allocated_leaves_the_tree_as_it_was(arrays: str) -> None:
    assert tree_module.failed_growth_leaves_the_tree(arrays)
