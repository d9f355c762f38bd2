"""Policy surprise weighting (learner.policy_surprise_weight, learner.surprise): KataGo's frequency weights.

Self-play records each sample's surprise, KL(policy target || the root's
prior); the replay window keeps each training position as many times as its
frequency weight draws, the game's expected count kept.
"""

from __future__ import annotations

from pathlib import Path

import chess
import numpy as np
import pytest

from alphazero.store.shards import ShardError, read_shard, shard_from_records, shard_name, write_shard
from learner.replay import ReplayWindow
from learner.surprise import copies, frequency_weights, shard_rng
from mcts_ext.driver import run, uniform_evaluator
from mcts_ext.params import SearchParams
from mcts_ext.search import MultiGameSearch


def _records(noise_weight: float, seed: int = 5) -> list[dict]:
    search = MultiGameSearch(2, SearchParams(simulations=16, ply_limit=16, noise_weight=noise_weight), seed=seed)
    for slot in range(2):
        search.start_game(slot)
    records: list[dict] = []
    run(search, uniform_evaluator, on_step=lambda rows: records.extend(r for _, r in search.take_finished()))
    return records


def test_the_search_records_the_kl_of_its_target_from_a_uniform_prior() -> None:
    for record in _records(noise_weight=0.0):
        board = chess.Board(record["start_fen"])
        samples = {int(ply): k for k, ply in enumerate(record["plies_of_samples"])}
        offsets, probs = record["policy_offsets"], record["policy_probs"]
        for ply, uci in enumerate(record["moves"]):
            if ply in samples:
                k = samples[ply]
                target = probs[offsets[k]:offsets[k + 1]].astype(np.float64)
                legal = board.legal_moves.count()  # python-chess: the uniform prior is 1 / this
                assert len(target) == legal
                shown = target[target > 0]
                expected = float(np.sum(shown * np.log(shown)) + np.log(legal))
                assert record["policy_surprise"][k] == pytest.approx(expected, rel=1e-4, abs=1e-5)
            board.push_uci(uci)


def test_noise_at_the_root_is_part_of_the_prior_the_surprise_reads() -> None:
    quiet, noisy = _records(noise_weight=0.0), _records(noise_weight=0.5)
    assert all(np.all(r["policy_surprise"] >= 0) for r in quiet + noisy)
    assert not np.allclose(quiet[0]["policy_surprise"], noisy[0]["policy_surprise"])


def test_weights_give_each_game_its_count_and_copies_keep_it_in_expectation() -> None:
    game = np.repeat(np.arange(3), [4, 5, 6])
    surprise = np.random.default_rng(0).exponential(size=15).astype(np.float32)
    surprise[9:] = 0.0  # a game without surprise keeps weight 1 everywhere
    weights = frequency_weights(game, surprise, 0.5)
    for g in range(3):
        assert weights[game == g].sum() == pytest.approx((game == g).sum())
    assert np.all(weights >= 0.5) and np.all(weights[9:] == 1.0)
    assert np.all(frequency_weights(game, surprise, 0.0) == 1.0)
    # The most surprising position of a game gets the largest weight.
    assert np.argmax(weights[:4]) == np.argmax(surprise[:4])
    drawn = np.mean([copies(weights, np.random.default_rng(seed)) for seed in range(4000)], axis=0)
    np.testing.assert_allclose(drawn, weights, atol=0.05)
    with pytest.raises(ValueError, match="share"):
        frequency_weights(game, surprise, 1.5)
    with pytest.raises(ValueError, match="negative"):
        frequency_weights(game, -surprise - 1, 0.5)


def test_the_shard_keeps_the_surprise_and_refuses_a_negative_one(tmp_path: Path) -> None:
    shard = shard_from_records(_records(noise_weight=0.25))
    assert shard.policy_surprise is not None and len(shard.policy_surprise) == len(shard)
    write_shard(tmp_path / "a.npz", shard)
    np.testing.assert_array_equal(read_shard(tmp_path / "a.npz").policy_surprise, shard.policy_surprise)
    shard.policy_surprise[0] = -1.0
    with pytest.raises(ShardError, match="policy_surprise"):
        write_shard(tmp_path / "b.npz", shard)


def _window(directory: Path, share: float) -> ReplayWindow:
    window = ReplayWindow(directory, window_positions=10_000, max_sample_reuse=0, surprise_share=share)
    window.refresh(force=True)
    return window


def test_the_window_repeats_surprising_positions_the_same_way_after_a_restart(tmp_path: Path) -> None:
    records = _records(noise_weight=0.25)
    for record in records:  # one position of each game is far more surprising than the rest
        record["policy_surprise"] = np.full_like(record["policy_surprise"], 0.01)
        record["policy_surprise"][3] = 5.0
    shard = shard_from_records(records)
    name = shard_name("test")
    write_shard(tmp_path / name, shard)
    plain, weighted, again = _window(tmp_path, 0.0), _window(tmp_path, 0.5), _window(tmp_path, 0.5)
    assert len(plain) == len(shard)
    expected = copies(frequency_weights(shard.game, shard.policy_surprise, 0.5), shard_rng(name))
    assert len(weighted) == len(again) == expected.sum()
    batch = weighted._train.gather(np.arange(weighted.first, weighted.total))
    surprising = np.flatnonzero(shard.policy_surprise == 5.0)
    for row in surprising:  # each surprising position's copies are in the window (its weight is about 8)
        same = np.all(batch.planes == shard.planes[row], axis=1) & np.all(batch.scalars == shard.scalars[row], axis=1)
        assert same.sum() == expected[row] >= 6
    again_batch = again._train.gather(np.arange(again.first, again.total))
    np.testing.assert_array_equal(batch.planes, again_batch.planes)
    # Shards without surprises (older ones, labels) enter once per position.
    shard_without = shard_from_records([{k: v for k, v in r.items() if k != "policy_surprise"} for r in records])
    other = tmp_path / "older"
    other.mkdir()
    write_shard(other / shard_name("old"), shard_without)
    assert len(_window(other, 0.5)) == len(shard_without)
