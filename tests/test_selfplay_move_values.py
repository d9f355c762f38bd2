"""Self-play keeps the search's value of each move it visited (a record's ``policy_wins``) for the action-value
head: the mover's win probability (1 + Q) / 2 of the move's visits, NaN where the search never tried it; the
actors write it into the shards only where the run's network has the head, and the learner's batches carry it.
"""

from __future__ import annotations

from pathlib import Path

import chess
import numpy as np
import pytest

from alphazero.chess.moves import move_to_index
from alphazero.config import to_toml
from alphazero.store.shards import read_shard
from learner.replay import ReplayWindow
from mcts_ext.params import SearchParams
from mcts_ext.search import MultiGameSearch
from selfplay.worker import SelfPlayWorker
from tests.helpers import fast_run, material_evaluator, play_games

SIMULATIONS = 8
PLY_LIMIT = 40
HEAD = "network.action_value_head=logit"


def _material_value(board: chess.Board) -> float:
    """material_evaluator's value of ``board`` for its side to move."""
    worth = {chess.PAWN: 1, chess.KNIGHT: 3, chess.BISHOP: 3, chess.ROOK: 5, chess.QUEEN: 9, chess.KING: 0}
    balance = sum(worth[piece.piece_type] * (1 if piece.color == board.turn else -1)
                  for piece in board.piece_map().values())
    return float(np.tanh(balance / 5))


def test_a_record_holds_the_value_of_each_visited_move_for_its_mover() -> None:
    # An unvisited child is worth 1 to the search (fpu absolute 1), more than any visited one, so with fewer
    # simulations than legal moves each visited move is visited once: its Q is minus the network's value of
    # the position after it, from the evaluator's own reading of material.
    params = SearchParams(simulations=SIMULATIONS, ply_limit=PLY_LIMIT, fpu_mode="absolute", fpu_value=1.0,
                          tree_reuse=False, solver=False)
    records = play_games(MultiGameSearch(3, params, seed=11), material_evaluator)
    compared = 0
    for record in records:
        wins, probs, offsets = record["policy_wins"], record["policy_probs"], record["policy_offsets"]
        assert wins.dtype == np.float32 and wins.shape == probs.shape
        assert np.array_equal(np.isnan(wins), probs == 0)  # a value exactly where the search went
        visited = ~np.isnan(wins)
        assert np.all((wins[visited] >= 0) & (wins[visited] <= 1))
        board = chess.Board(record["start_fen"])
        plies = {int(ply): sample for sample, ply in enumerate(record["plies_of_samples"])}
        for ply, uci in enumerate(record["moves"]):
            sample = plies.get(ply)
            if sample is not None:
                compared += _compare_once_visited(board, record["policy_indices"], probs, wins,
                                                  slice(offsets[sample], offsets[sample + 1]))
            board.push_uci(uci)
    assert compared >= 100


def _compare_once_visited(board: chess.Board, indices: np.ndarray, probs: np.ndarray, wins: np.ndarray,
                          entries: slice) -> int:
    """Checks the sample's moves the search visited once against the evaluator; returns how many it checked."""
    shares = probs[entries]
    once = 1.0 / np.count_nonzero(shares)
    if not np.allclose(shares[shares > 0], once):
        return 0  # a move was visited twice (a mate in one ties with the unvisited): nothing to read off
    by_index = {int(index): (share, win) for index, share, win in zip(indices[entries], shares, wins[entries])}
    checked = 0
    for move in board.legal_moves:
        share, win = by_index[move_to_index(move, board.turn)]
        board.push(move)
        plain = not board.is_game_over(claim_draw=True) and not board.is_repetition(2) and board.ply() < PLY_LIMIT
        if share > 0 and plain:
            assert win == pytest.approx((1 - _material_value(board)) / 2, abs=1e-5)
            checked += 1
        board.pop()
    return checked


@pytest.mark.parametrize("head", [True, False], ids=["with-head", "without-head"])
def test_shards_carry_the_search_values_only_where_the_network_has_the_head(tmp_path: Path, head: bool) -> None:
    run, config = fast_run(tmp_path / "run", *([HEAD] if head else []), "search.algorithm=puct")
    worker = SelfPlayWorker(str(run.root), to_toml(config), "w", seed=1, max_games=2)
    worker.play(120)
    worker.flush()
    shards = sorted(run.selfplay.glob("*.npz"))
    assert worker.idle() and shards
    for path in shards:
        shard = read_shard(path)
        if not head:
            assert shard.policy_wins is None
            continue
        assert shard.policy_wins is not None
        assert np.array_equal(np.isnan(shard.policy_wins), shard.policy_probs == 0)
    if head:  # and the learner's batches take them as the head's targets, NaN where a move went unsearched
        window = ReplayWindow(run.selfplay, window_positions=10_000, max_sample_reuse=0, seed=0)
        window.refresh(force=True)
        batch = window.sample(32)
        assert batch is not None and batch.wins is not None
        assert np.isfinite(batch.wins).any() and np.isnan(batch.wins).any()
