"""The resnet's soft policy head (network.soft_policy_head): KataGo's auxiliary soft policy target.

The target's shape and normalisation are tested by hand in test_chessformer
(test_auxiliary_losses_by_hand, the same soft_policy_targets); here: the head
on the residual tower, that only training runs it, that its loss is the
cross-entropy against those targets, and that it learns them.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import pytest
import torch

from alphazero.config import LearnerConfig, NetworkConfig, apply_overrides
from alphazero.config_compat import architecture_hash
from alphazero.errors import UserError
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import build_network, load_weights
from learner.game_targets import NO_GAME_TARGETS
from learner.losses import masked_log_softmax, soft_policy_loss, soft_policy_targets
from learner.trainer import Trainer
from tests.helpers import every_position, old_tiny, random_compact, real_games

RESNET = NetworkConfig(blocks=1, filters=8, policy_filters=8, value_filters=2, value_hidden=16,
                       soft_policy_head=True)


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(min(2, torch.get_num_threads()))


def _settings(weight: float) -> LearnerConfig:
    return LearnerConfig(soft_policy_loss_weight=weight, optimizer="adam", learning_rates=(1e-2,), lr_boundaries=(),
                         scale_lr=False, weight_decay=0.0, cpu_precision="float32")


def test_the_head_gives_logits_of_the_policys_shape_and_changes_nothing_else() -> None:
    torch.manual_seed(1)
    model: Any = build_network(RESNET).eval()
    torch.manual_seed(1)
    plain: Any = build_network(dataclasses.replace(RESNET, soft_policy_head=False)).eval()
    planes, scalars = (torch.from_numpy(a) for a in random_compact(5))
    planes = planes.view(torch.int64)
    with torch.no_grad():
        out, heads = model.forward_with_training_heads(planes, scalars, soft_policy=True)
        alone = model(planes, scalars)
        before = plain(planes, scalars)
    soft = heads.soft_policy_logits
    assert soft is not None and soft.shape == (5, 4672) and soft.dtype == torch.float32
    assert not torch.equal(soft, out.policy_logits)  # a head of its own
    assert torch.equal(out.policy_logits, alone.policy_logits) and torch.equal(out.value, alone.value)
    # Built last: the rest of the network starts from the same weights with it or without it.
    assert torch.equal(alone.policy_logits, before.policy_logits) and torch.equal(alone.value, before.value)
    with pytest.raises(ValueError, match="no soft policy head"):
        plain.forward_with_training_heads(planes, scalars, soft_policy=True)


def test_the_loss_is_the_cross_entropy_against_the_flattened_visit_shares() -> None:
    policy = torch.tensor([[0.9, 0.1, 0.0, 0.0]])
    legal = torch.tensor([[True, True, True, False]])
    logits = torch.tensor([[2.0, 0.0, -1.0, 7.0]])
    target = soft_policy_targets(policy, legal, 4.0)
    # T = 4 flattens 0.9 / 0.1 to 0.9^0.25 / 0.1^0.25 (about 0.63 / 0.37); an unvisited move stays 0.
    torch.testing.assert_close(target[0, :2], torch.tensor([0.9, 0.1]) ** 0.25 / (0.9 ** 0.25 + 0.1 ** 0.25))
    assert float(target[0, 2]) == 0.0 and float(target.sum()) == pytest.approx(1.0)
    by_hand = -(target[0, :3] * masked_log_softmax(logits, legal)[0, :3]).sum()
    torch.testing.assert_close(soft_policy_loss(logits, policy, legal, 4.0), by_hand)


def test_inference_never_runs_the_head_and_training_learns_its_targets() -> None:
    torch.manual_seed(2)
    model = build_network(RESNET)
    calls: list[str] = []
    for name, module in model.named_modules():
        if name.startswith("soft_policy"):
            module.register_forward_hook(lambda module, args, output, name=name: calls.append(name))
    planes, scalars = random_compact(4)
    Evaluator(model, "cpu", precision="float32").evaluate(planes, scalars)
    batch = every_position(real_games(), NO_GAME_TARGETS)
    Trainer(model, _settings(0.0), torch.device("cpu")).step(batch, step=0)
    assert calls == []  # weight 0: not even in training
    trainer = Trainer(model, _settings(1.0), torch.device("cpu"))
    losses = [float(trainer.step(batch, step=step).soft_policy) for step in range(15)]
    assert calls and all(np.isfinite(losses)) and losses[-1] < 0.9 * losses[0], losses


def test_a_weight_without_the_head_is_refused_and_the_chessformer_has_its_own() -> None:
    with pytest.raises(UserError, match="network.soft_policy_head"):
        Trainer(build_network(dataclasses.replace(RESNET, soft_policy_head=False)), _settings(1.0),
                torch.device("cpu"))
    with pytest.raises(UserError, match="chessformer always has"):
        NetworkConfig(kind="chessformer", soft_policy_head=True)
    with pytest.raises(UserError, match="q_loss_weight"):
        Trainer(build_network(RESNET), dataclasses.replace(_settings(0.0), q_loss_weight=1.0), torch.device("cpu"))


def test_weights_without_the_head_load_and_the_hash_tells_the_two_apart(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(3)
    old = build_network(dataclasses.replace(RESNET, soft_policy_head=False))
    model = build_network(RESNET)
    with caplog.at_level(logging.WARNING):
        load_weights(model, old.state_dict(), "old.pt")
    assert "no soft policy head" in caplog.text
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in old.state_dict().items())
    tiny = old_tiny()
    assert architecture_hash(apply_overrides(tiny, ["network.soft_policy_head=true"])) != architecture_hash(tiny)
