"""The replay window: newest-W eviction, new shards, the reuse cap, unreadable shards, restarts."""

from __future__ import annotations

import logging
from pathlib import Path

import chess
import numpy as np
import pytest

from alphazero.chess.moves import NUM_MOVES, policy_mask
from alphazero.config import LearnerConfig
from alphazero.errors import UserError
from alphazero.presets import get_preset
from alphazero.store.shards import encode_shard, shard_from_records, shard_name, write_shard
from learner.replay import WAIT_POSITIONS, WAIT_REUSE, ReplayWindow, is_validation_game
from tests.helpers import LEGAL_MOVES, PER_GAME, add_games, add_shard, make_shard


def sampled_ids(window: ReplayWindow, batch_size: int) -> np.ndarray:
    batch = window.sample(batch_size)
    assert batch is not None
    return batch.scalars[:, 1].astype(np.int64)


def test_a_batch_carries_the_shards_positions(tmp_path: Path) -> None:
    # Many small shards, so that the window joins them into blocks (block size 1000 // 32 = 31).
    shards = {start: make_shard(range(start, start + 7)) for start in range(0, 210, 7)}
    for shard in shards.values():
        write_shard(tmp_path / shard_name("test"), shard)
    window = ReplayWindow(tmp_path, window_positions=1000, max_sample_reuse=0)
    assert window.refresh() == 210 and len(window) == 210
    batch = window.sample(300)
    assert batch is not None and len(batch) == 300
    assert batch.planes.dtype == np.uint64 and batch.planes.shape == (300, 112)
    assert batch.scalars.dtype == np.float32 and batch.scalars.shape == (300, 7)
    assert batch.policy.dtype == np.float32 and batch.policy.shape == (300, NUM_MOVES)
    assert batch.legal.dtype == np.bool_ and batch.legal.shape == (300, NUM_MOVES)
    assert batch.z.dtype == np.float32 and batch.z.shape == (300,)
    for row, position in enumerate(batch.scalars[:, 1].astype(int)):
        shard, index = shards[position - position % 7], position % 7
        np.testing.assert_array_equal(batch.planes[row], shard.planes[index])
        np.testing.assert_array_equal(batch.policy[row], shard.dense_policy([index])[0])
        assert batch.q is not None and batch.q[row] == shard.root_values[index]
        legal = shard.policy_indices[shard.policy_offsets[index]:shard.policy_offsets[index + 1]]
        assert sorted(np.flatnonzero(batch.legal[row])) == sorted(legal)
        assert batch.z[row] == shard.results[index]


def test_the_window_keeps_the_newest_positions(tmp_path: Path) -> None:
    window = ReplayWindow(tmp_path, window_positions=100, max_sample_reuse=0)
    for start in range(0, 160, 40):
        add_shard(tmp_path, range(start, start + 40))
        window.refresh(force=True)
    assert len(window) == 100 and window.positions_added == 160
    ids = sampled_ids(window, 2000)
    assert ids.min() == 60 and ids.max() == 159  # the oldest shard is gone, the next one half inside
    # compact arrays only (bitboards, scalars, result, root value, policy offset and entries), no dense policy
    per_position = 112 * 8 + 7 * 4 + 1 + 4 + 8 + LEGAL_MOVES * (2 + 4)
    assert window.nbytes <= 3 * 40 * per_position + 3 * 8  # the three newest shards


def test_new_shards_are_picked_up_and_scans_are_rate_limited(tmp_path: Path) -> None:
    window = ReplayWindow(tmp_path / "selfplay", window_positions=1000, max_sample_reuse=0, scan_interval_s=60)
    assert window.refresh() == 0 and len(window) == 0  # the folder does not exist yet
    add_shard(tmp_path / "selfplay", range(0, 30))
    assert window.refresh() == 0  # within the scan interval: the folder is not listed
    assert window.refresh(force=True) == 30
    assert window.refresh(force=True) == 0  # known names are not read again
    (tmp_path / "selfplay" / ".x.npz.123.ab.tmp").write_bytes(b"partial")  # a writer's temporary
    add_shard(tmp_path / "selfplay", range(30, 50))
    assert window.refresh(force=True) == 20 and len(window) == 50 and window.corrupt_shards == 0
    assert set(sampled_ids(window, 500)) == set(range(50))


def test_a_stop_cuts_a_backlog_read_between_shards_and_the_next_scan_reads_it_all(tmp_path: Path) -> None:
    # Issue 80: a stopping learner must not wait for a whole backlog of shards to be read.
    for start in range(0, 200, 40):
        add_shard(tmp_path, range(start, start + 40))
    window = ReplayWindow(tmp_path, window_positions=1000, max_sample_reuse=0)
    asked = []

    def cancelled() -> bool:
        asked.append(True)
        return len(asked) > 2  # the stop comes after two shards are read

    assert window.refresh(force=True, cancelled=cancelled) == 0
    assert len(window) == 0 and window.shards_loaded == 0 and len(asked) == 3
    assert window.refresh(force=True, cancelled=lambda: False) == 200
    assert window.shards_loaded == 5 and window.positions_added == 200 and window.skipped_shards == 0


def test_a_learner_behind_self_play_skips_old_shards(tmp_path: Path) -> None:
    for start in range(0, 400, 40):
        add_shard(tmp_path, range(start, start + 40))
    window = ReplayWindow(tmp_path, window_positions=100, max_sample_reuse=4)
    assert window.refresh() == 120  # only the newest three shards are read
    assert window.shards_loaded == 3 and window.skipped_shards == 7 and window.positions_added == 120
    assert sampled_ids(window, 400).min() >= 300


def test_the_reuse_cap_makes_sample_wait_for_new_shards(tmp_path: Path) -> None:
    window = ReplayWindow(tmp_path, window_positions=1000, max_sample_reuse=2.0, min_positions=80)
    window.refresh()
    assert window.waiting_reason(50) == WAIT_POSITIONS and window.sample(50) is None
    add_shard(tmp_path, range(0, 100))
    window.refresh(force=True)
    assert [window.sample(50) is not None for _ in range(5)] == [True, True, True, True, False]
    assert window.waiting_reason(50) == WAIT_REUSE
    assert window.samples_drawn == 200 and window.average_reuse == 2.0  # the refused batch drew nothing
    add_shard(tmp_path, range(100, 150))  # +50 positions: +100 samples
    window.refresh(force=True)
    assert window.waiting_reason(50) is None
    assert window.sample(50) is not None and window.sample(50) is not None and window.sample(50) is None
    unlimited = ReplayWindow(tmp_path, window_positions=1000, max_sample_reuse=0)
    unlimited.refresh()
    assert all(unlimited.sample(150) is not None for _ in range(20))


def test_unreadable_shards_are_skipped_logged_once_and_counted(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    add_shard(tmp_path, range(0, 10))
    data = encode_shard(make_shard(range(10, 20)))
    (tmp_path / shard_name("truncated")).write_bytes(data[: len(data) // 2])
    (tmp_path / shard_name("garbage")).write_bytes(np.random.default_rng(0).bytes(5000))
    window = ReplayWindow(tmp_path, window_positions=1000, max_sample_reuse=0)
    with caplog.at_level(logging.WARNING, logger="learner.replay"):
        assert window.refresh() == 10
        add_shard(tmp_path, range(20, 30))
        assert window.refresh(force=True) == 10
        window.refresh(force=True)
    assert window.corrupt_shards == 2 and len(window) == 20
    warnings = [r.getMessage() for r in caplog.records if "unreadable shard" in r.getMessage()]
    assert len(warnings) == 2
    assert any("truncated" in w for w in warnings) and any("garbage" in w for w in warnings)


def test_a_restored_window_counts_nothing_twice_and_draws_the_same(tmp_path: Path) -> None:
    add_shard(tmp_path, range(0, 60))
    add_shard(tmp_path, range(60, 100))
    first = ReplayWindow(tmp_path, window_positions=80, max_sample_reuse=3, seed=1)
    first.refresh()
    first.sample(70)
    state = first.state()
    again = ReplayWindow(tmp_path, window_positions=80, max_sample_reuse=3, seed=99)
    again.restore(state)
    again.refresh()
    assert (again.positions_added, again.samples_drawn, len(again)) == (100, 70, 80)
    np.testing.assert_array_equal(sampled_ids(again, 50), sampled_ids(first, 50))
    add_shard(tmp_path, range(100, 110))
    again.refresh(force=True)
    assert again.positions_added == 110  # only the shard written after the state counts
    with pytest.raises(ValueError, match="malformed replay state"):
        again.restore({"samples_drawn": 3})


def test_batches_of_real_games_mask_the_legal_moves(tmp_path: Path) -> None:
    from mcts_ext.driver import run, uniform_evaluator
    from mcts_ext.params import SearchParams
    from mcts_ext.search import MultiGameSearch

    search = MultiGameSearch(2, SearchParams(simulations=8, ply_limit=12), seed=3)
    for slot in range(2):
        search.start_game(slot)
    records: list[dict] = []
    run(search, uniform_evaluator, on_step=lambda rows: records.extend(r for _, r in search.take_finished()))
    write_shard(tmp_path / shard_name("games"), shard_from_records(records))
    window = ReplayWindow(tmp_path, window_positions=1000, max_sample_reuse=0)
    window.refresh()
    batch = window.sample(200)
    assert batch is not None
    np.testing.assert_allclose(batch.policy.sum(axis=1), 1.0, atol=1e-5)
    assert not (batch.policy[~batch.legal]).any()
    start = batch.scalars[:, 1] == 1  # move number 1 with White to move: the start position
    start &= batch.scalars[:, 0] == 1
    assert start.any()
    for row in np.flatnonzero(start):
        np.testing.assert_array_equal(batch.legal[row], policy_mask(chess.Board()))


# --- the held-out validation games ------------------------------------------------------------------

def test_the_split_is_a_pure_function_of_the_game_id() -> None:
    ids = [f"game-{i}" for i in range(20_000)]
    held_out = [is_validation_game(game_id, 0.02) for game_id in ids]
    assert held_out == [is_validation_game(game_id, 0.02) for game_id in ids]  # the same answer every time
    assert 0.017 < sum(held_out) / len(ids) < 0.023  # about the share (sha256 is uniform)
    assert not any(is_validation_game(game_id, 0.0) for game_id in ids[:100])
    assert all(is_validation_game(game_id, 1.0) for game_id in ids[:100])
    # A larger share holds out a superset: raising it never moves a game into training.
    assert all(is_validation_game(game_id, 0.05) for game_id, out in zip(ids, held_out) if out)


def test_held_out_games_are_never_sampled_and_form_the_validation_set(tmp_path: Path) -> None:
    for first in range(0, 40, 8):
        add_games(tmp_path, first, 8)
    window = ReplayWindow(tmp_path, window_positions=10_000, max_sample_reuse=0, validation_share=0.25,
                          validation_positions=10_000)
    window.refresh()
    held_out = {game for game in range(40) if is_validation_game(f"game-{game}", 0.25)}
    assert 0 < len(held_out) < 40
    assert window.validation_game_ids() == {f"game-{game}" for game in held_out}
    assert len(window) == window.positions_added == (40 - len(held_out)) * PER_GAME
    trained = set(sampled_ids(window, 5000) // PER_GAME)
    assert trained == set(range(40)) - held_out
    validation = np.concatenate([b.scalars[:, 1] for b in window.validation_batches(7)]).astype(np.int64)
    assert sorted(validation) == [game * PER_GAME + i for game in sorted(held_out) for i in range(PER_GAME)]
    assert window.validation_size == len(held_out) * PER_GAME
    sample = list(window.training_sample_batches(25, 10, seed=3))
    assert [len(b) for b in sample] == [10, 10, 5] and window.samples_drawn == 5000  # counted nothing
    assert not set(np.concatenate([b.scalars[:, 1] for b in sample]).astype(np.int64) // PER_GAME) & held_out


def test_a_restarted_window_validates_on_the_same_games(tmp_path: Path) -> None:
    # Older shards without game ids (their ids come from the file name) and newer ones with ids;
    # far more games than the window holds, and a corrupt shard among them.
    for first in range(0, 120, 6):
        add_games(tmp_path, first, 6, ids=False)
    (tmp_path / shard_name("garbage")).write_bytes(b"not a shard")
    for first in range(120, 180, 6):
        add_games(tmp_path, first, 6)
    # The validation set reaches further back than the window: older shards are read for it.
    settings = dict(window_positions=300, max_sample_reuse=0, validation_share=0.3, validation_positions=400)
    before = ReplayWindow(tmp_path, **settings)
    before.refresh()
    games_before = before.validation_game_ids()
    assert before.validation_size == 400 and before.corrupt_shards == 1
    assert any("#" in game for game in games_before) and any(game.startswith("game-") for game in games_before)
    after = ReplayWindow(tmp_path, **settings)
    after.restore(before.state())
    after.refresh()
    assert after.validation_game_ids() == games_before
    np.testing.assert_array_equal(np.concatenate([b.planes for b in after.validation_batches(50)]),
                                  np.concatenate([b.planes for b in before.validation_batches(50)]))
    assert after.corrupt_shards == 1  # counted once, not again after the restart


def test_a_window_that_grew_shard_by_shard_holds_out_what_a_fresh_read_does(tmp_path: Path) -> None:
    settings = dict(window_positions=200, max_sample_reuse=0, validation_share=0.3, validation_positions=80)
    growing = ReplayWindow(tmp_path, **settings)
    for first in range(0, 150, 5):
        add_games(tmp_path, first, 5)
        growing.refresh(force=True)
    fresh = ReplayWindow(tmp_path, **settings)
    fresh.refresh()
    assert growing.validation_size == fresh.validation_size == 80
    assert growing.validation_game_ids() == fresh.validation_game_ids()


# --- the growing window (learner.window_growth, learner.window_exponent: KataGo's shuffler) ---------------


def test_the_window_size_is_the_fixed_window_by_default_and_grows_as_a_power_law() -> None:
    fixed = LearnerConfig(window_positions=1_000, min_window_positions=100)
    assert [fixed.window_size(n) for n in range(0, 3_000, 7)] == [min(n, 1_000) for n in range(0, 3_000, 7)]
    grows = LearnerConfig(window_positions=100_000, min_window_positions=10_000, window_growth=0.5,
                          window_exponent=0.6)
    seen = range(0, 5_000_000, 997)
    sizes = [grows.window_size(n) for n in seen]
    assert sizes == sorted(sizes) and sizes[-1] == 100_000  # monotone, capped at window_positions
    assert [grows.window_size(n) for n in (0, 1, 9_999, 10_000)] == [0, 1, 9_999, 10_000]  # all, until m
    assert 48 <= grows.window_size(10_100) - 10_000 <= 50  # slope g = 0.5 just above m
    assert grows.window_size(20_000) - grows.window_size(19_900) < 40  # and less further on (e < 1)
    tapered = LearnerConfig(window_positions=100_000, min_window_positions=1_000, window_exponent=0.75)
    assert all(tapered.window_size(n) < min(n, 100_000) for n in range(1_001, 2_000_000, 1_013)
               if tapered.window_size(n) < 100_000)
    assert tapered.window_size(10**9) == 100_000


@pytest.mark.parametrize("exponent", [0.0, 1.5])
def test_the_window_exponent_must_lie_in_0_1(exponent: float) -> None:
    with pytest.raises(UserError, match=rf"learner\.window_exponent must lie in \(0, 1\], got {exponent}"):
        LearnerConfig(window_exponent=exponent)
    with pytest.raises(UserError, match="learner.window_growth must be positive"):
        LearnerConfig(window_growth=0.0)


def growing_window(directory: Path, config: LearnerConfig, seed: int = 0) -> ReplayWindow:
    return ReplayWindow(directory, window_positions=config.window_positions, max_sample_reuse=0,
                        min_positions=config.min_window_positions, window_size=config.window_size, seed=seed)


def test_a_growing_window_follows_the_positions_seen_and_a_restart_keeps_it(tmp_path: Path) -> None:
    # m = 50 and e = 0.5: 296 positions after 600 seen, the cap of 400 after about 1,000.
    config = LearnerConfig(window_positions=400, min_window_positions=50, window_exponent=0.5)
    window = growing_window(tmp_path, config)
    fixed = ReplayWindow(tmp_path, window_positions=400, max_sample_reuse=0, min_positions=50)
    assert window.window_size == 50 and len(window) == 0
    sizes = []
    for start in range(0, 1_200, 10):  # shards of 10: joined into blocks once the window passes 320
        add_shard(tmp_path, range(start, start + 10))
        window.refresh(force=True)
        fixed.refresh(force=True)
        added = window.positions_added
        assert added == start + 10
        assert len(window) == config.window_size(added) == window.total - window.first
        assert window.window_size == max(50, config.window_size(added))
        assert len(fixed) == min(added, 400)
        if added < 50:
            assert window.waiting_reason(10) == WAIT_POSITIONS
        else:
            ids = sampled_ids(window, 200)
            assert ids.min() >= added - len(window) and ids.max() < added
        sizes.append(len(window))
        if added == 600:  # the oldest positions fall out of view sooner than with the fixed window
            assert len(window) == 296 < len(fixed) and window.first > fixed.first
            assert sampled_ids(window, 2_000).min() >= 600 - 296 > sampled_ids(fixed, 2_000).min()
            state, size = window.state(), window.window_size
            restarted = growing_window(tmp_path, config, seed=99)
            restarted.restore(state)
            assert restarted.window_size == size  # before the first scan: it reads back the window it had
            restarted.refresh()
            assert restarted.positions_added == 600 and len(restarted) == len(window) == 296
            assert restarted.total - restarted.first == window.total - window.first
            assert restarted.shards_loaded == 30 and restarted.skipped_shards == 0  # its window read back, no more
            np.testing.assert_array_equal(sampled_ids(restarted, 300), sampled_ids(window, 300))
    assert sizes == sorted(sizes) and sizes[-1] == 400 and sizes.index(400) > 90  # grew to the cap, late


def test_the_learner_grows_self_plays_window_and_reads_a_given_folder_whole(tmp_path: Path) -> None:
    from alphazero.store.rundir import RunDir
    from learner.loop import Learner

    run, config = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"), [
        "network.blocks=1", "network.filters=8", "network.policy_filters=8", "network.value_filters=2",
        "network.value_hidden=8", "learner.device=cpu", "learner.cpu_precision=float32",
        "learner.min_window_positions=50", "learner.window_positions=400", "learner.window_exponent=0.5",
        "learner.validation_share=0"])
    for start in range(0, 600, 100):
        add_shard(run.selfplay, range(start, start + 100))
        add_shard(tmp_path / "data", range(start, start + 100))
    with Learner(run, config) as learner:
        assert learner.window.window_size == 50
        learner.window.refresh(force=True)
        # Without a checkpoint it starts as a fresh run: min_window_positions of the newest shards (one).
        assert learner.window.positions_added == 100
        assert len(learner.window) == learner.window.window_size == config.learner.window_size(100) == 91
        add_shard(run.selfplay, range(600, 700))
        learner.window.refresh(force=True)
        assert len(learner.window) == learner.window.window_size == config.learner.window_size(200) == 150
    with Learner(run, config, shards=tmp_path / "data") as learner:
        learner.window.refresh(force=True)
        assert learner.window.window_size == 400 and len(learner.window) == 400
