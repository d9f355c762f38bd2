"""The search tree's memory and numerics in long searches: values summed in double, a tree bounded by a memory
setting that ends its search with the answer it has, capacities that cannot overflow the int32 indices."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import chess
import numpy as np
import pytest

from mcts_ext import Board
from mcts_ext import params as params_module
from mcts_ext import search as search_module
from mcts_ext.driver import analyse, run, uniform_evaluator
from mcts_ext.params import SearchParams, default_tree_memory_bytes, machine_memory_bytes, tree_memory_bytes
from mcts_ext.search import MultiGameSearch, default_memory_searches
from mcts_ext.tree import grown_capacity
from tests.helpers import material_evaluator, play_games

ITALIAN = "r1bqkbnr/pppp1ppp/2n5/4p3/2B1P3/5N2/PPPP1PPP/RNBQK2R b KQkq - 3 3"
MIB = 2**20
LOTS = 10_000_000  # a budget no capped test reaches: the tree's memory ends each search


def _most_visited(search: MultiGameSearch) -> set[str]:
    stats = search.root_stats(0)
    most = max(visits for _, _, visits, _, _ in stats)
    return {uci for uci, _, visits, _, _ in stats if visits == most}


def test_the_q_of_millions_of_backups_keeps_its_value() -> None:
    # Summed in float32 the sum passes 2^20 and each added 0.3 rounds to a multiple of 1/8: Q drifts to 0.308.
    search = analyse(Board(), uniform_evaluator, 1)
    move = search.best_move(0)
    search.repeat_backup(0, [move], -0.3, 3_000_000)  # -0.3 for the child's side to move: 0.3 for the chooser
    q = {uci: q for uci, _, _, q, _ in search.root_stats(0)}[move]
    assert q == pytest.approx(0.3, abs=1e-6)
    assert search.root_value(0) == pytest.approx(0.3, abs=1e-6)


def test_a_search_that_fills_its_memory_stops_with_its_answer() -> None:
    board = Board(ITALIAN)
    capped = analyse(board, material_evaluator, LOTS, tree_memory_mb=0.5, seed=3)
    assert capped.tree_full(0) and capped.state(0) == "ready"
    done = capped.simulations(0)
    assert 0 < done < LOTS
    assert capped.tree_bytes(0) <= capped.tree_memory_limit == MIB // 2
    assert capped.best_move(0) in board.legal_moves()
    assert capped.best_move(0) in _most_visited(capped)
    # The same search given exactly those simulations, without a cap, is the same search.
    uncapped = analyse(board, material_evaluator, done, tree_memory_mb=1024, seed=3)
    assert not uncapped.tree_full(0)
    assert uncapped.root_stats(0) == capped.root_stats(0)
    assert uncapped.best_move(0) == capped.best_move(0)
    assert uncapped.principal_variation(0) == capped.principal_variation(0)
    capped.clear(0)
    assert not capped.tree_full(0)


def _with_action_values(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, ...]:
    """material_evaluator, and a win probability of 0.4 for every move (the action-value head's output)."""
    logits, values = material_evaluator(planes, scalars)
    return logits, values, np.full(logits.shape, 0.4, np.float32)


@pytest.mark.parametrize("extra", [dict(leaves_per_game=8), dict(algorithm="gumbel"), dict(solver=True),
                                   dict(fpu_mode="action_value")])
def test_every_kind_of_search_stops_when_its_tree_is_full(extra: dict) -> None:
    board = Board(ITALIAN)
    evaluate = _with_action_values if "fpu_mode" in extra else material_evaluator
    search = analyse(board, evaluate, LOTS, tree_memory_mb=0.25, **extra)
    assert not search.reads_action_values or any(v is not None for v in search.action_values(0).values())
    assert search.tree_full(0) and search.state(0) == "ready"
    assert search.in_flight(0) == 0  # the batch's leaves were backed up before it stopped
    assert search.tree_bytes(0) <= search.tree_memory_limit
    assert search.best_move(0) in board.legal_moves()
    assert search.best_move(0) in _most_visited(search)
    line = chess.Board(ITALIAN)
    for uci in search.principal_variation(0):
        line.push_uci(uci)  # raises on an illegal move


def test_a_kept_subtree_searches_on_within_its_memory() -> None:
    # The kept subtree is copied beside the tree, the two within the tree's limit: a tree well below it is kept
    # (one at its limit is not: tests/test_tree_memory_limits.py).
    board = Board(ITALIAN)
    search = MultiGameSearch(1, SearchParams(simulations=LOTS, autoplay=False, tree_memory_mb=0.25), seed=1)
    search.set_position(0, board, simulations=300)
    run(search, material_evaluator)
    assert not search.tree_full(0)
    move = search.best_move(0)
    reply = search.principal_variation(0, 2, first=move)
    board.push_uci(move)
    assert search.set_position(0, board, reuse=True)  # the subtree is kept
    assert not search.tree_full(0) and search.state(0) == "searching"
    kept, _ = search.tree_size(0)
    assert kept > 1
    run(search, material_evaluator)
    assert search.tree_full(0) and search.tree_size(0)[0] > kept
    assert search.tree_bytes(0) <= search.tree_memory_limit
    assert 0 < search.peak_tree_bytes <= search.tree_memory_limit and search.reuse_dropped == 0
    assert search.best_move(0) in board.legal_moves()
    assert len(reply) >= 1


def test_self_play_with_tiny_trees_plays_its_games_through() -> None:
    # Two games of 0.15 MiB between them: a tree of a few hundred nodes, far below the budget of each move.
    params = SearchParams(simulations=5000, ply_limit=12, tree_reuse=True, tree_memory_mb=0.15)
    search = MultiGameSearch(2, params, seed=4)
    records = play_games(search, material_evaluator)
    assert len(records) == 2
    assert search.total_simulations < 2 * 12 * 5000 / 4  # the trees' memory ended the moves' searches
    for record in records:
        board = chess.Board(record["start_fen"])
        for uci in record["moves"]:
            board.push_uci(uci)
        assert record["plies"] == 12
        assert len(record["plies_of_samples"]) == 12


def test_the_bytes_of_a_node_and_an_edge_are_the_arrays_types() -> None:
    # tree.pxd: first_edge, visits, in_flight, parent (int32); edge_count, proof_plies (int16); value_sum
    # (float64); terminal, proof (int8); pending (uint8); raw_value (float32). Edges: move (uint16), prior
    # (float32), child (int32), and action_value (float32) where kept.
    node = sum(np.dtype(t).itemsize for t in ["i4"] * 4 + ["i2"] * 2 + ["f8", "i1", "i1", "u1", "f4"])
    assert search_module.BYTES_PER_NODE == node == 35
    assert search_module.BYTES_PER_EDGE == 2 + 4 + 4
    assert search_module.BYTES_PER_ACTION_VALUE == 4
    plain = MultiGameSearch(1, SearchParams(simulations=8))
    assert (plain.bytes_per_node, plain.bytes_per_edge) == (35, 10)
    assert MultiGameSearch(1, SearchParams(simulations=8, fpu_mode="action_value")).bytes_per_edge == 14


def test_the_limit_is_the_searchs_split_between_its_games_and_says_how_many_nodes_fit() -> None:
    search = MultiGameSearch(4, SearchParams(simulations=8, tree_memory_mb=8))
    assert search.tree_memory_limit == 2 * MIB
    assert search.nodes_that_fit(30) == 2 * MIB // (35 + 30 * 10)
    assert search.nodes_that_fit(0) == 2 * MIB // 35
    assert search.nodes_that_fit() == int(2 * MIB / (35 + search_module.EDGES_PER_NODE * 10))
    with pytest.raises(ValueError, match="edges_per_node"):
        search.nodes_that_fit(-1)
    assert MultiGameSearch(1, SearchParams(simulations=8, tree_memory_mb=1e9)).nodes_that_fit() == \
        search_module.MAX_TREE_INDEX
    with pytest.raises(ValueError, match="tree_memory_mb"):
        SearchParams(tree_memory_mb=-1)


def test_a_full_tree_holds_the_nodes_its_bytes_say() -> None:
    search = analyse(Board(ITALIAN), material_evaluator, LOTS, tree_memory_mb=1)
    nodes, edges = search.tree_size(0)
    fits = search.nodes_that_fit(edges / nodes)
    # The arrays' growth shares the room between nodes and edges, whatever the moves per node: the tree fills
    # its limit but for a few hundred bytes.
    assert 0.99 * fits <= nodes <= fits + 1
    assert search.tree_bytes(0) > search.tree_memory_limit - 256 * 14


def test_the_default_limit_is_half_of_what_the_machine_has(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    machine = machine_memory_bytes()
    assert machine is not None and 0 < machine <= physical
    assert default_tree_memory_bytes() == machine // 2
    assert SearchParams().c_options()["tree_memory_bytes"] == default_tree_memory_bytes()
    gc.collect()  # the default is shared with every live search that has it: earlier tests may hold some
    search = MultiGameSearch(2, SearchParams(simulations=8))
    assert search.tree_memory_limit == default_tree_memory_bytes() // default_memory_searches() // 2
    assert tree_memory_bytes(3) == 3 * MIB
    # A container's smaller limit wins; cgroup v2's "max" is none.
    limit = tmp_path / "memory.max"
    monkeypatch.setattr(params_module, "_CGROUP_LIMITS", (limit,))
    limit.write_text(f"{MIB * 512}\n")
    assert machine_memory_bytes() == min(physical, 512 * MIB)
    limit.write_text("max\n")
    assert machine_memory_bytes() == physical


def test_capacities_stop_at_the_int32_indices_without_overflowing() -> None:
    top = search_module.MAX_TREE_INDEX
    assert top == 2**31 - 1
    assert grown_capacity(2**30, 2**30 + 1) == top  # doubling 2^30 in int32 overflowed
    assert grown_capacity(top, top) == top
    assert grown_capacity(top, top + 1) == -1
    assert grown_capacity(2**30 + 5, 2**31 + 7) == -1
    assert grown_capacity(1000, 1001) == 2000
    # Within a memory limit: doubling while the room left holds the tree twice; nearer, the array's share of
    # the room (here all of it), or what it needs; never past the limit.
    assert grown_capacity(1000, 1001, memory_limit=35 * 3000) == 2000
    assert grown_capacity(1000, 1001, memory_limit=35 * 1500) == 1500
    assert grown_capacity(1000, 1001, memory_limit=35 * 1001) == 1001
    assert grown_capacity(1000, 1001, memory_limit=35 * 1000) == -1
