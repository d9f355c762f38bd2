"""Short-term value targets (issue 79, KataGo's short-term value targets): the search's root value h plies on in the
same game, for the position's mover, mixed into the value target; the game's result where the game has no sample
that far on."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from alphazero.config import LearnerConfig, NetworkConfig, apply_overrides
from alphazero.errors import UserError
from alphazero.nn.heads import NetOutput
from alphazero.nn.network import build_network
from alphazero.presets import get_preset
from alphazero.store.shards import VALUE_FROM_ROOT, shard_name, write_shard
from learner.batch import concatenate_batches
from learner.game_targets import GameTargets, short_term_values
from learner.replay import ReplayWindow
from learner.trainer import Trainer, compute_losses, value_target
from tests.helpers import HAND_GAME, HAND_PLY, HAND_RESULT, HAND_ROOT, hand_made_shard

# Two games, their samples interleaved and out of ply order in the file (the targets match by game and ply).
# Game 0: plies 0-5, White wins (the mover at even plies wins). Game 1: plies 0, 1, 2, 4 (ply 3 was a cheap
# move: no sample), a draw.
GAME, PLY, ROOT, RESULT = HAND_GAME, HAND_PLY, HAND_ROOT, HAND_RESULT
# By hand, h = 2: the root value two plies on (an even distance: the same mover), else the next sample after
# that ply (its own parity), else the game's result for the mover.
EXPECTED_2 = {
    (0, 0): 0.3, (0, 1): -0.4, (0, 2): 0.5, (0, 3): -0.6, (0, 4): 1.0, (0, 5): -1.0,
    (1, 0): -0.3,  # ply 2
    (1, 1): -0.7,  # ply 3 not written: ply 4, three plies on, for the other side
    (1, 2): 0.7,  # ply 4
    (1, 4): 0.0,  # the game's end: its result, a draw
}
# h = 3: an odd distance, the sign flipped.
EXPECTED_3 = {
    (0, 0): 0.4, (0, 1): -0.5, (0, 2): 0.6, (0, 3): -1.0, (0, 4): 1.0, (0, 5): -1.0,
    (1, 0): 0.7,  # ply 3 not written: ply 4, four plies on, for the same side
    (1, 1): -0.7, (1, 2): 0.0, (1, 4): 0.0,
}


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(min(2, torch.get_num_threads()))


def expected(table: dict[tuple[int, int], float]) -> np.ndarray:
    return np.array([table[(g, p)] for g, p in zip(GAME, PLY, strict=True)], np.float32)


def test_short_term_targets_equal_a_hand_computation() -> None:
    shard = hand_made_shard()
    np.testing.assert_allclose(short_term_values(shard, 2), expected(EXPECTED_2), atol=1e-6)
    np.testing.assert_allclose(short_term_values(shard, 3), expected(EXPECTED_3), atol=1e-6)
    # Beyond every game's end: the results themselves.
    np.testing.assert_array_equal(short_term_values(shard, 50), np.array(RESULT, np.float32))
    # Labels whose value target is not a game's result keep their own.
    labels = dataclasses.replace(shard, meta={"value_target": VALUE_FROM_ROOT})
    np.testing.assert_allclose(short_term_values(labels, 2), np.array(ROOT, np.float32))
    with pytest.raises(ValueError, match="at least 1 ply"):
        short_term_values(shard, 0)


def test_the_window_builds_them_as_samples_enter(tmp_path: Path) -> None:
    write_shard(tmp_path / shard_name("games"), hand_made_shard())
    window = ReplayWindow(tmp_path, window_positions=100, max_sample_reuse=0,
                          targets=GameTargets.of(LearnerConfig(value_target_short_term_weight=0.5,
                                                               value_target_short_term_plies=2)))
    window.refresh(force=True)
    batch = next(window.training_sample_batches(64, 64, seed=1))
    assert batch.short_term is not None and batch.reply_offsets is None
    rows = batch.scalars[:, 1].astype(int)
    assert len(set(rows.tolist())) > 5
    np.testing.assert_allclose(batch.short_term, expected(EXPECTED_2)[rows], atol=1e-6)
    np.testing.assert_array_equal(batch.z, np.array(RESULT, np.float32)[rows])  # z stays the game's result
    plain = ReplayWindow(tmp_path, window_positions=100, max_sample_reuse=0)
    plain.refresh(force=True)
    without = next(plain.training_sample_batches(8, 8, seed=1))
    assert without.short_term is None
    joined = concatenate_batches(batch, without)  # a batch without them takes its value targets
    assert joined.short_term is not None
    np.testing.assert_array_equal(joined.short_term[len(batch):], without.z)


def test_the_value_target_mixes_result_root_value_and_short_term_value() -> None:
    z = torch.tensor([1.0, -1.0, 0.0, float("nan")])
    q = torch.tensor([0.5, -0.2, 0.1, 0.3])
    short = torch.tensor([0.9, 0.4, -0.6, 0.2])
    target = value_target(z, q, 0.25, short, 0.5)
    np.testing.assert_allclose(target[:3].numpy(), [0.25 + 0.125 + 0.45, -0.25 - 0.05 + 0.2, 0.025 - 0.3],
                               rtol=1e-6)
    # Weight 0: the target as it was without the short-term values.
    torch.testing.assert_close(value_target(z, q, 0.25, short, 0.0), value_target(z, q, 0.25), rtol=0, atol=0,
                               equal_nan=True)
    assert value_target(z, None, 0.0, short, 0.0) is z
    value = torch.tensor([0.1, 0.2, -0.3, 0.4])
    out = NetOutput(torch.zeros(4, 4672), value, None)
    policy = torch.zeros(4, 4672)
    policy[:, 0] = 1.0
    legal = policy > 0
    stats = compute_losses(out, policy, legal, z, value_loss_weight=1.0, q=q, q_weight=0.25, short_term=short,
                           short_term_weight=0.5)
    by_hand = ((target[:3] - value[:3]) ** 2).mean()  # the NaN result has no value target
    assert float(stats.value_mse) == pytest.approx(float(by_hand), rel=1e-6)
    # A wdl head's soft target has the same mean value.
    wdl = torch.zeros(4, 3, requires_grad=True)
    soft = compute_losses(NetOutput(torch.zeros(4, 4672), torch.zeros(4), wdl), policy, legal, z,
                          value_loss_weight=1.0, q=q, q_weight=0.25, short_term=short, short_term_weight=0.5)
    soft.total.backward()
    assert wdl.grad is not None
    target_classes = torch.full((4, 3), 1.0 / 3) - wdl.grad * 3  # softmax(0) - grad x B = the soft target
    means = target_classes[:3, 0] - target_classes[:3, 2]
    np.testing.assert_allclose(means.numpy(), target[:3].numpy(), atol=1e-5)


def test_the_trainer_trains_on_them_and_asks_for_them(tmp_path: Path) -> None:
    write_shard(tmp_path / shard_name("games"), hand_made_shard())
    config = LearnerConfig(value_target_short_term_weight=0.5, value_target_short_term_plies=2,
                           cpu_precision="float32")
    window = ReplayWindow(tmp_path, window_positions=100, max_sample_reuse=0, targets=GameTargets.of(config))
    plain = ReplayWindow(tmp_path, window_positions=100, max_sample_reuse=0)
    for w in (window, plain):
        w.refresh(force=True)
    network = NetworkConfig(blocks=1, filters=8, policy_filters=8, value_filters=2, value_hidden=16)
    torch.manual_seed(0)
    trainer = Trainer(build_network(network), config, torch.device("cpu"))
    batch = next(window.training_sample_batches(10, 10, seed=2))
    with_short = trainer.evaluate(batch)
    alone = Trainer(build_network(network), dataclasses.replace(config, value_target_short_term_weight=0.0),
                    torch.device("cpu"))
    alone.model.load_state_dict(trainer.model.state_dict())
    assert float(with_short.value) != pytest.approx(float(alone.evaluate(batch).value))  # the target moved
    assert np.isfinite(float(trainer.step(batch, step=0).total))
    with pytest.raises(ValueError, match="short-term value targets"):
        trainer.step(next(plain.training_sample_batches(10, 10, seed=2)), step=1)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(UserError, match=r"learner\.value_target_short_term_weight must be at least 0"):
        LearnerConfig(value_target_short_term_weight=-0.5)
    with pytest.raises(UserError, match=r"learner\.value_target_short_term_plies must be at least 1, got 0"):
        LearnerConfig(value_target_short_term_plies=0)
    with pytest.raises(UserError, match=r"learner\.value_target_short_term_weight must lie in \[0, 1\]"):
        LearnerConfig(value_target_short_term_weight=1.5)
    with pytest.raises(UserError, match="at most 1 together"):
        LearnerConfig(value_target_q_weight=0.6, value_target_short_term_weight=0.5)
    with pytest.raises(UserError, match="value_target_short_term_plies"):
        apply_overrides(get_preset("tiny"), ["learner.value_target_short_term_plies=2.5"])
    assert GameTargets.of(LearnerConfig(value_target_short_term_plies=9)) == GameTargets()  # weight 0: not built
