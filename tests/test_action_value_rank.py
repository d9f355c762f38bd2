"""The listwise loss on the action-value head's ranking (learner.action_value_rank_weight, issue 68)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from alphazero.config import LearnerConfig, NetworkConfig, apply_overrides
from alphazero.errors import UserError
from alphazero.nn.action_values import (
    action_value_head,
    action_value_rank_loss,
    action_value_targets,
    segment_log_softmax,
)
from alphazero.nn.network import build_network
from alphazero.nn.planes import compact_to_torch
from alphazero.presets import get_preset
from learner.trainer import Trainer
from learner.trainer_setup import eval_mode
from tests.helpers import batch_with_action_values, fixed_batch

POLICY_SHAPED = NetworkConfig(blocks=1, filters=8, policy_filters=8, policy_kernel=1, value_filters=2, value_hidden=16,
                              action_value_head="logit", action_value_shape="policy")
SQUARES = dataclasses.replace(POLICY_SHAPED, action_value_shape="squares", action_value_filters=8)


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """Every test here runs its networks on one thread (the machine is shared)."""


def _labelled(size: int = 16, seed: int = 0):
    """fixed_batch's positions with a win probability on most legal moves, one position with a single one."""
    batch = fixed_batch(size, seed)
    rng = np.random.default_rng(seed + 1)
    values = np.full(batch.policy.shape, np.nan, np.float32)
    for row in range(size):
        moves = np.flatnonzero(batch.legal[row])
        scored = moves[:1] if row == 0 else moves[rng.random(len(moves)) < 0.8]
        values[row, scored] = rng.random(len(scored))
    return batch_with_action_values(batch, values)


def test_the_segment_log_softmax_is_each_rows_own_log_softmax() -> None:
    rng = np.random.default_rng(3)
    rows = torch.from_numpy(np.sort(rng.integers(0, 5, 40)))
    scores = torch.from_numpy(rng.normal(size=40).astype(np.float32)) * 30  # large: the shift keeps exp() finite
    got = segment_log_softmax(scores, rows, 6)  # row 5 (and any row drawn no score) has none
    for row in rows.unique():
        mine = rows == row
        assert torch.allclose(got[mine], torch.log_softmax(scores[mine], dim=0), atol=1e-5)


@pytest.mark.parametrize("config", [POLICY_SHAPED, SQUARES], ids=["policy-shape", "squares"])
def test_the_rank_loss_is_listnet_per_position_averaged_over_positions_with_two_moves(config) -> None:
    torch.manual_seed(0)
    model = build_network(config).eval()
    head = action_value_head(model)
    batch = _labelled()
    rows, moves, labels = map(torch.from_numpy, action_value_targets(batch.action_values))
    features = model(*batch_tensors(batch)).action_features
    temperature = 0.05
    got = action_value_rank_loss(head, head.logits(features, rows, moves), rows, labels, len(features), temperature)
    # Brute force, position by position: the cross-entropy of the labels' softmax against the head's.
    expected = []
    for row in range(len(batch.policy)):
        mine = rows == row
        if int(mine.sum()) < 2:
            continue  # position 0 has one move: nothing to rank
        values = head.values(features, rows[mine], moves[mine])
        target = torch.softmax(labels[mine] / temperature, dim=0)
        expected.append(-(target * torch.log_softmax(values / temperature, dim=0)).sum())
    assert len(expected) == len(batch.policy) - 1
    assert torch.allclose(got, torch.stack(expected).mean(), atol=1e-5)
    empty = torch.zeros(0, dtype=torch.int64)
    nothing = head.logits(features, empty, empty)
    assert float(action_value_rank_loss(head, nothing, empty, torch.zeros(0), len(features), temperature)) == 0.0


def batch_tensors(batch) -> tuple[torch.Tensor, torch.Tensor]:
    return compact_to_torch(batch.planes, batch.scalars, "cpu")


def _rank_loss(trainer: Trainer, batch) -> float:
    rows, moves, labels = map(torch.from_numpy, action_value_targets(batch.action_values))
    with torch.no_grad(), eval_mode(trainer.model):
        features = trainer.model(*batch_tensors(batch)).action_features
        head = trainer.action_value_head
        logits = head.logits(features, rows, moves)
        return float(action_value_rank_loss(head, logits, rows, labels, len(features), 0.05))


def test_the_rank_weight_trains_the_heads_ranking_beside_its_values() -> None:
    """Beside the pointwise loss, the rank weight's term reaches the gradient: 20 steps on one batch leave
    the head's listwise loss well below where the pointwise loss alone leaves it, from the same start."""
    ends = {}
    for weight in (0.0, 1.0):
        learner = LearnerConfig(batch_size=16, optimizer="adam", learning_rates=(1e-2,), lr_boundaries=(),
                                scale_lr=False, weight_decay=0.0, cpu_precision="float32", freeze_batch_norm=True,
                                action_value_rank_weight=weight)
        torch.manual_seed(0)
        trainer = Trainer(build_network(POLICY_SHAPED), learner, torch.device("cpu"), precision="float32")
        batch = _labelled()
        start = _rank_loss(trainer, batch)
        for step in range(20):
            assert np.isfinite(float(trainer.step(batch, step).total))
        ends[weight] = _rank_loss(trainer, batch)
        assert ends[weight] < start
    assert ends[1.0] < 0.8 * ends[0.0], ends


def test_positions_without_values_leave_the_rank_losss_gradient_finite() -> None:
    """Positions of the batch without a win probability (a game's, self-play's unvisited) rank nothing, and
    their empty softmaxes give no NaN to any gradient."""
    batch = _labelled()
    values = batch.action_values.copy()
    values[5:9] = np.nan
    learner = LearnerConfig(batch_size=16, optimizer="adam", learning_rates=(1e-2,), lr_boundaries=(), scale_lr=False,
                            weight_decay=0.0, cpu_precision="float32", freeze_batch_norm=True,
                            action_value_rank_weight=1.0)
    torch.manual_seed(0)
    trainer = Trainer(build_network(POLICY_SHAPED), learner, torch.device("cpu"), precision="float32")
    assert np.isfinite(float(trainer.step(batch_with_action_values(batch, values), 0).total))
    assert all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in trainer.model.parameters())
    assert all(bool(torch.isfinite(p).all()) for p in trainer.model.parameters())


def test_the_rank_settings_are_checked() -> None:
    config = apply_overrides(get_preset("tiny"), ["learner.action_value_rank_weight=0.5"])
    assert config.learner.action_value_rank_weight == 0.5 and config.learner.action_value_rank_temperature == 0.05
    for bad in ("learner.action_value_rank_weight=-1", "learner.action_value_rank_temperature=0"):
        with pytest.raises(UserError, match="action_value_rank"):
            apply_overrides(get_preset("tiny"), [bad])
