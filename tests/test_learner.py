"""The learner: the loss, fitting, the training loop, checkpoints and restarts, TensorBoard, the command."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import errno
import logging
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from alphazero.config import Config, apply_overrides
from alphazero.errors import UserError
from alphazero.nn.network import AlphaZeroNet, NetOutput
from alphazero.store.checkpoint import (
    KEPT_NAME,
    LATEST_NAME,
    checkpoint_name,
    checkpoint_steps,
    latest_checkpoint,
    load_checkpoint,
    load_model,
    read_payload,
    step_of,
)
from alphazero.store.rundir import LEARNER_LOCK_NAME, RunDir
from alphazero.store.shards import DRAW_BAND, shard_name, write_shard
from learner import cli
from learner.loop import PROBES, Learner, probe_report, run_learner
from learner.replay import Batch, ReplayWindow
from learner.trainer import (
    VALIDATION_FIGURES,
    Trainer,
    build_optimizer,
    compute_losses,
    masked_log_softmax,
    policy_kl,
    validation_sums,
    value_classes,
)
from tests.helpers import (
    add_games,
    add_shard,
    batch_with_action_values,
    fixed_batch,
    make_shard,
    old_tiny,
    overwrite_inside,
)

SMALL_NET = ["network.blocks=1", "network.filters=16", "network.policy_filters=16", "network.value_filters=2",
             "network.value_hidden=16"]
LEARNER = ["learner.batch_size=32", "learner.min_window_positions=50", "learner.window_positions=1000",
           "learner.max_sample_reuse=0", "learner.checkpoint_every=5", "learner.log_every=2",
           "learner.keep_checkpoints=20", "learner.learning_rates=[0.1]", "learner.lr_boundaries=[]",
           "learner.scale_lr=false", "learner.device=cpu", "learner.validation_share=0"]


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(min(2, torch.get_num_threads()))


def small_config(*overrides: str, value_head: str = "scalar") -> Config:
    # The old tiny: these batches are made by hand, without the games the new tiny's extra targets come from.
    return apply_overrides(old_tiny(), [*SMALL_NET, f"network.value_head={value_head}", *LEARNER,
                                                *overrides])


@pytest.fixture()
def run(tmp_path: Path) -> tuple[RunDir, Config]:
    rundir, config = RunDir.create_or_open(tmp_path / "run", small_config())
    add_shard(rundir.selfplay, range(0, 100))
    add_shard(rundir.selfplay, range(100, 200))
    return rundir, config


class StopOn(logging.Handler):
    """Sets ``stop`` when the learner logs a message containing ``text`` (a waiting learner, say)."""

    def __init__(self, stop: threading.Event, text: str) -> None:
        super().__init__()
        self.stop, self.text, self.seen = stop, text, []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())
        if self.text in record.getMessage():
            self.stop.set()


def momentum_buffers(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [optimizer.state[p]["momentum_buffer"].clone() for group in optimizer.param_groups
            for p in group["params"]]


# --- the loss ---------------------------------------------------------------------------------------

def test_the_loss_is_a_softmax_over_legal_moves_and_the_value_error() -> None:
    logits = torch.tensor([[1.0, 2.0, 50.0, 0.0], [0.0, 0.0, 0.0, 3.0]]).repeat_interleave(1, 0)
    logits = torch.nn.functional.pad(logits, (0, 4672 - 4))
    legal = torch.zeros(2, 4672, dtype=torch.bool)
    legal[0, :2] = True  # the 50 is illegal and must not count
    legal[1, [0, 3]] = True
    policy = torch.zeros(2, 4672)
    policy[0, :2] = torch.tensor([0.25, 0.75])
    policy[1, 3] = 1.0
    value, z = torch.tensor([0.5, -0.2]), torch.tensor([1.0, 0.0])
    stats = compute_losses(NetOutput(logits, value, None), policy, legal, z, value_loss_weight=2.0)
    log_p0 = torch.log_softmax(torch.tensor([1.0, 2.0]), 0)
    log_p1 = torch.log_softmax(torch.tensor([0.0, 3.0]), 0)
    expected_policy = -(0.25 * log_p0[0] + 0.75 * log_p0[1] + log_p1[1]) / 2
    expected_value = ((1 - 0.5) ** 2 + 0.2 ** 2) / 2
    torch.testing.assert_close(stats.policy, expected_policy)
    torch.testing.assert_close(stats.value, torch.tensor(expected_value))
    torch.testing.assert_close(stats.total, expected_policy + 2.0 * expected_value)
    entropy = -(log_p0.exp() * log_p0).sum() - (log_p1.exp() * log_p1).sum()
    torch.testing.assert_close(stats.entropy, entropy / 2)
    assert float(stats.value_accuracy) == 1.0  # 0.5 > 1/3 predicts a win, |-0.2| < 1/3 a draw


def test_gradients_are_finite_and_zero_at_illegal_moves() -> None:
    logits = torch.randn(3, 4672, requires_grad=True)
    legal = torch.zeros(3, 4672, dtype=torch.bool)
    legal[:, 100:105] = True
    policy = torch.zeros(3, 4672)
    policy[:, 100] = 1.0
    stats = compute_losses(NetOutput(logits, torch.zeros(3, requires_grad=True), None), policy, legal,
                           torch.zeros(3), value_loss_weight=1.0)
    stats.total.backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    assert (logits.grad[~legal] == 0).all() and (logits.grad[legal] != 0).all()
    assert torch.isinf(masked_log_softmax(logits, legal)[~legal]).all()


def test_the_wdl_head_uses_cross_entropy_and_its_most_likely_class() -> None:
    wdl = torch.tensor([[3.0, 0.0, 0.0], [0.0, 0.0, 3.0], [0.0, 3.0, 0.0]])
    probabilities = wdl.softmax(1)
    value = probabilities[:, 0] - probabilities[:, 2]
    z = torch.tensor([1.0, 1.0, 0.0])
    legal = torch.ones(3, 4672, dtype=torch.bool)
    policy = torch.full((3, 4672), 1 / 4672)
    stats = compute_losses(NetOutput(torch.zeros(3, 4672), value, wdl), policy, legal, z, value_loss_weight=1.0)
    torch.testing.assert_close(stats.value, torch.nn.functional.cross_entropy(wdl, torch.tensor([0, 0, 1])))
    assert float(stats.value_accuracy) == pytest.approx(2 / 3)
    assert value_classes(torch.tensor([DRAW_BAND + 0.01, -DRAW_BAND - 0.01, 0.0]), None).tolist() == [0, 2, 1]


def test_the_value_target_mixes_the_result_with_the_root_value() -> None:
    logits, legal = torch.zeros(3, 4672), torch.ones(3, 4672, dtype=torch.bool)
    policy = torch.full((3, 4672), 1 / 4672)
    z, q, v = torch.tensor([1.0, -1.0, 0.0]), torch.tensor([0.5, -0.2, 0.4]), torch.tensor([0.2, 0.1, -0.3])
    out = NetOutput(logits, v, None)
    # w = 0.25: targets 0.75 z + 0.25 q = 0.875, -0.8, 0.1; errors 0.675, -0.9, 0.4.
    mixed = compute_losses(out, policy, legal, z, value_loss_weight=1.0, q=q, q_weight=0.25)
    assert float(mixed.value) == pytest.approx((0.675 ** 2 + 0.9 ** 2 + 0.4 ** 2) / 3)
    assert float(mixed.value_mse) == pytest.approx(float(mixed.value))
    assert float(mixed.value_accuracy) == pytest.approx(1 / 3)  # against the result: only the draw is right
    # w = 0 (the default) and w = 1: the result alone, the root value alone.
    plain = compute_losses(out, policy, legal, z, value_loss_weight=1.0, q=q, q_weight=0.0)
    assert float(plain.value) == pytest.approx((0.8 ** 2 + 1.1 ** 2 + 0.3 ** 2) / 3)
    assert float(compute_losses(out, policy, legal, z, value_loss_weight=1.0).value) == float(plain.value)
    only_q = compute_losses(out, policy, legal, z, value_loss_weight=1.0, q=q, q_weight=1.0)
    assert float(only_q.value) == pytest.approx((0.3 ** 2 + 0.3 ** 2 + 0.7 ** 2) / 3)
    # A wdl head: the soft target 0.5 * (win) + 0.5 * (q = 0.5 -> W 0.5, D 0.5, L 0) = (0.75, 0.25, 0).
    wdl = torch.tensor([[2.0, 0.0, -1.0]])
    log_norm = math.log(math.exp(2.0) + 1.0 + math.exp(-1.0))
    soft = compute_losses(NetOutput(torch.zeros(1, 4672), torch.zeros(1), wdl), policy[:1], legal[:1],
                          torch.tensor([1.0]), value_loss_weight=1.0, q=torch.tensor([0.5]), q_weight=0.5)
    assert float(soft.value) == pytest.approx(-(0.75 * (2.0 - log_norm) + 0.25 * (0.0 - log_norm)))


def test_the_trainer_takes_the_root_values_from_the_batch_when_asked() -> None:
    batch = dataclasses.replace(fixed_batch(8), q=np.linspace(-1, 1, 8).astype(np.float32))
    torch.manual_seed(0)
    weights = AlphaZeroNet(small_config().network).state_dict()
    for weight in (0.0, 0.5):
        config = small_config(f"learner.value_target_q_weight={weight}")
        model = AlphaZeroNet(config.network)
        model.load_state_dict(weights)
        trainer = Trainer(model, config.learner, torch.device("cpu"), precision="float32")  # as the reference
        stats = trainer.evaluate(batch)
        with torch.no_grad():
            value = model.eval()(*trainer.to_device(batch)[:2]).value.float()
        target = (1 - weight) * torch.from_numpy(batch.z) + weight * torch.from_numpy(batch.q)
        assert float(stats.value) == pytest.approx(float((target - value).square().mean()), rel=1e-5)


def test_validation_figures_on_a_hand_built_batch() -> None:
    logits = torch.zeros(2, 4672)
    logits[0, [0, 1, 2, 3]] = torch.tensor([2.0, 1.0, 0.0, 10.0])  # move 3 is illegal: the 10 must not count
    logits[1, [5, 6]] = torch.tensor([0.0, 3.0])
    legal = torch.zeros(2, 4672, dtype=torch.bool)
    legal[0, [0, 1, 2]] = True
    legal[1, [5, 6]] = True
    policy = torch.zeros(2, 4672)
    policy[0, [0, 1, 2]] = torch.tensor([0.2, 0.7, 0.1])  # the search's most visited: move 1; the net's: move 0
    policy[1, [5, 6]] = torch.tensor([0.5, 0.5])  # a tie: the net's move 6 is one of the most visited
    value, z = torch.tensor([0.5, -0.5]), torch.tensor([1.0, 0.0])
    sums = validation_sums(NetOutput(logits, value, None), policy, legal, z)
    assert float(sums[5]) == 2.0  # both positions have a value target
    figures = dict(zip(VALIDATION_FIGURES, sums[:5].tolist(), strict=True))
    norm0, norm1 = math.log(math.exp(2) + math.exp(1) + 1), math.log(1 + math.exp(3))
    cross_entropy = -(0.2 * (2 - norm0) + 0.7 * (1 - norm0) + 0.1 * (0 - norm0)) - 0.5 * ((0 - norm1) + (3 - norm1))
    assert figures["policy_loss"] == pytest.approx(cross_entropy)
    assert figures["policy_top1"] == 1.0  # row 0 disagrees, row 1 agrees
    assert figures["value_loss"] == pytest.approx(0.5 ** 2 + 0.5 ** 2)
    assert figures["value_mse"] == pytest.approx(0.5)
    assert figures["value_accuracy"] == 1.0  # 0.5 predicts the win; -0.5 a loss where the game was drawn


@pytest.mark.parametrize("value_head", ["scalar", "wdl"])
def test_positions_without_a_value_target_train_the_policy_alone(value_head: str) -> None:
    # Labels written with pretrain.label_value = false have z = NaN: the value terms are means over the other
    # positions, and no gradient reaches the value from them, while their policy counts as any other's.
    torch.manual_seed(0)
    logits = torch.randn(4, 4672, requires_grad=True)
    value = torch.tensor([0.5, -0.2, 0.3, 0.9], requires_grad=True)
    wdl = torch.randn(4, 3, requires_grad=True) if value_head == "wdl" else None
    legal = torch.zeros(4, 4672, dtype=torch.bool)
    legal[:, :5] = True
    policy = torch.zeros(4, 4672)
    policy[:, :5] = 0.2
    z = torch.tensor([1.0, float("nan"), -1.0, float("nan")])
    q = torch.tensor([0.4, 0.1, -0.6, 0.2])
    stats = compute_losses(NetOutput(logits, value, wdl), policy, legal, z, value_loss_weight=1.0, q=q, q_weight=0.5)
    stats.total.backward()
    assert torch.isfinite(stats.total)
    valued = [0, 2]
    target = 0.5 * z[valued] + 0.5 * q[valued]
    assert float(stats.value_mse) == pytest.approx(float((target - value[valued].detach()).square().mean()))
    assert float(stats.value_accuracy) == 0.5  # 0.5 predicts a win (z 1), 0.3 a draw (z -1): over two
    value_grads = (value.grad if wdl is None else wdl.grad.abs().sum(dim=1)).tolist()
    assert value_grads[1] == 0.0 and value_grads[3] == 0.0 and value_grads[0] != 0.0 and value_grads[2] != 0.0
    assert bool((logits.grad[[1, 3], :5] != 0).any())  # the policy still learns from them
    sums = validation_sums(NetOutput(logits, value, wdl), policy, legal, z, q, q_weight=0.5)
    assert float(sums[5]) == 2.0 and torch.isfinite(sums).all()


def test_the_optimiser_decays_weights_by_2c_and_adam_is_an_option() -> None:
    config = small_config()
    model = AlphaZeroNet(config.network)
    sgd = build_optimizer(model, config.learner)
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.param_groups[0]["weight_decay"] == 2e-4 and sgd.param_groups[0]["momentum"] == 0.9
    adam = build_optimizer(model, small_config("learner.optimizer=adam", "learner.momentum=0.8").learner)
    assert isinstance(adam, torch.optim.Adam) and adam.param_groups[0]["betas"] == (0.8, 0.999)


@pytest.mark.parametrize("value_head", ["scalar", "wdl"])
def test_training_fits_a_fixed_set_of_positions(value_head: str) -> None:
    torch.manual_seed(0)
    config = small_config("learner.learning_rates=[0.05]", value_head=value_head)
    trainer = Trainer(AlphaZeroNet(config.network), config.learner, torch.device("cpu"))
    batch = fixed_batch()
    tensors = trainer.to_device(batch)

    def kl() -> float:
        with torch.no_grad():
            return float(policy_kl(trainer.model(*tensors[:2]).policy_logits, tensors[2], tensors[3]))

    before_kl = kl()
    stats = [trainer.step(batch, step).as_floats() for step in range(60)]
    assert all(np.isfinite(list(s.values())).all() for s in stats)
    # The policy loss cannot fall below the targets' entropy (~1.5 here); the KL can fall to 0.
    assert stats[-1]["total"] < 0.6 * stats[0]["total"]
    assert kl() < 0.1 * before_kl
    assert stats[-1]["value"] < 0.1 * stats[0]["value"] and stats[-1]["value_accuracy"] == 1.0
    assert float(trainer.evaluate(batch).policy) < float(trainer.evaluate(fixed_batch(seed=1)).policy)


def test_frozen_batch_norm_keeps_the_statistics_and_still_trains_the_weights() -> None:
    torch.manual_seed(0)
    batch = fixed_batch()
    for freeze in (False, True):
        config = small_config("learner.learning_rates=[0.05]", f"learner.freeze_batch_norm={freeze}")
        trainer = Trainer(AlphaZeroNet(config.network), config.learner, torch.device("cpu"))
        before = copy.deepcopy(trainer.model.state_dict())
        for step in range(3):
            trainer.step(batch, step)
        trainer.validate([batch])  # evaluation in between must leave the modes as they were
        trainer.step(batch, 3)
        after = trainer.model.state_dict()
        statistics = [name for name in after if "running_" in name or "num_batches" in name]
        kept = [torch.equal(before[name], after[name]) for name in statistics]
        assert statistics and (all(kept) if freeze else not any(kept)), freeze
        assert not torch.equal(before["stem.0.weight"], after["stem.0.weight"])  # the weights train either way
        assert trainer.model.training


def test_policy_head_training_moves_the_policy_head_alone() -> None:
    """learner.trainable=policy_head: the tower, the value head and every batch-norm buffer stay bit-for-bit,
    so the search's values are the start's; the policy head learns."""
    torch.manual_seed(0)
    batch = fixed_batch()
    config = small_config("learner.learning_rates=[0.05]", "learner.freeze_batch_norm=true",
                          "learner.trainable=policy_head")
    trainer = Trainer(AlphaZeroNet(config.network), config.learner, torch.device("cpu"))
    before = copy.deepcopy(trainer.model.state_dict())
    losses = [float(trainer.step(batch, step).policy) for step in range(10)]
    after = trainer.model.state_dict()
    moved = {name for name in after if not torch.equal(before[name], after[name])}
    assert moved and all(name.startswith(("policy_conv.", "policy_out.")) for name in moved), moved
    assert {"policy_out.weight", "policy_conv.0.weight"} <= moved
    assert losses[-1] < losses[0]
    with pytest.raises(UserError, match="freeze_batch_norm"):
        small_config("learner.trainable=policy_head", "learner.freeze_batch_norm=false")


def _with_win_probabilities(batch: Batch, seed: int = 1) -> Batch:
    """The batch with a win probability on each legal move (Stockfish's per-move values)."""
    values = np.where(batch.legal, np.random.default_rng(seed).random(batch.legal.shape), np.nan).astype(np.float32)
    return batch_with_action_values(batch, values)


def test_action_value_head_training_moves_that_head_alone() -> None:
    """learner.trainable=action_value_head: the tower, the policy and value heads and the batch-norm buffers
    stay bit-for-bit (what the search plays with), the head learns; a batch without per-move values moves
    nothing; a network without the head is refused in one line; policy_head leaves the head frozen."""
    torch.manual_seed(0)
    batch = _with_win_probabilities(fixed_batch())
    config = small_config("learner.learning_rates=[0.05]", "learner.freeze_batch_norm=true",
                          "learner.trainable=action_value_head", "network.action_value_head=logit")
    trainer = Trainer(AlphaZeroNet(config.network), config.learner, torch.device("cpu"))
    before = copy.deepcopy(trainer.model.state_dict())
    losses = [float(trainer.step(batch, step).action_value) for step in range(10)]
    after = trainer.model.state_dict()
    moved = {name for name in after if not torch.equal(before[name], after[name])}
    assert moved and all(name.startswith("action_value") for name in moved), moved
    assert {"action_value_conv.weight", "action_value.out.weight"} <= moved
    assert losses[-1] < losses[0]
    stats = trainer.step(batch_with_action_values(batch, None), 10)  # a game's positions: no target
    assert float(stats.grad_norm) == 0.0
    assert all(torch.equal(after[name], value) for name, value in trainer.model.state_dict().items())
    with pytest.raises(UserError, match="has none") as refused:
        headless = small_config("learner.freeze_batch_norm=true", "learner.trainable=action_value_head")
        Trainer(AlphaZeroNet(headless.network), headless.learner, torch.device("cpu"))
    assert "\n" not in str(refused.value)
    policy_only = small_config("learner.learning_rates=[0.05]", "learner.freeze_batch_norm=true",
                               "learner.trainable=policy_head", "network.action_value_head=logit")
    trainer = Trainer(AlphaZeroNet(policy_only.network), policy_only.learner, torch.device("cpu"))
    before = copy.deepcopy(trainer.model.state_dict())
    trainer.step(batch, 0)
    moved = {name for name, value in trainer.model.state_dict().items() if not torch.equal(before[name], value)}
    assert moved and all(name.startswith("policy") for name in moved), moved


def test_the_anchor_pulls_towards_the_start_and_is_zero_there() -> None:
    from learner.trainer import anchor_loss

    torch.manual_seed(0)
    batch = fixed_batch()
    config = small_config("learner.learning_rates=[0.05]", "learner.start_anchor_weight=1")
    model = AlphaZeroNet(config.network)
    trainer = Trainer(model, config.learner, torch.device("cpu"))
    trainer.set_anchor(copy.deepcopy(model.state_dict()))
    first = trainer.step(batch, 0)
    assert float(first.anchor) == pytest.approx(0.0, abs=1e-6)  # at the start the net is its own anchor
    assert float(trainer.step(batch, 1).anchor) > 0
    # Its gradient points back to the start: a step on the anchor alone brings the outputs closer.
    tensors = trainer.to_device(batch)
    with torch.no_grad():
        start = trainer.anchor(*tensors[:2])
    out = trainer.model(*tensors[:2])
    loss = anchor_loss(out, start, tensors[3])
    loss.backward()
    with torch.no_grad():
        for parameter in trainer.model.parameters():
            if parameter.grad is not None:
                parameter -= 0.05 * parameter.grad
        assert float(anchor_loss(trainer.model(*tensors[:2]), start, tensors[3])) < float(loss)


def test_a_learner_with_an_anchor_loads_the_runs_step_zero(run: tuple[RunDir, Config]) -> None:
    rundir, _ = run
    config = small_config("learner.start_anchor_weight=0.5")
    with Learner(rundir, config) as learner:
        learner.resume()
        learner.train(steps=3)
        start = load_checkpoint(rundir.checkpoints / checkpoint_name(0))["model"]
        moved = not torch.equal(learner.model.state_dict()["stem.0.weight"], start["stem.0.weight"])
        assert learner.step == 3 and moved
        for name, parameter in learner.trainer.anchor.named_parameters():
            assert torch.equal(parameter, start[name]) and not parameter.requires_grad, name
    (rundir.checkpoints / checkpoint_name(0)).unlink()
    with Learner(rundir, config) as learner, pytest.raises(UserError, match="start_anchor_weight"):
        learner.resume()
        learner.train(steps=1)


def test_replay_mixing_draws_its_share_of_each_batch_and_decays(run: tuple[RunDir, Config]) -> None:
    rundir, _ = run
    add_shard(rundir.root / "pretrain", range(1000, 1100))  # ids 1000.. are the mixed data, 0..199 self-play
    config = small_config("learner.mix_dir=pretrain", "learner.mix_share=0.25", "learner.mix_decay_steps=4")
    assert [config.learner.mix_rows(step) for step in range(6)] == [8, 6, 4, 2, 0, 0]
    mixed: list[int] = []
    with Learner(rundir, config) as learner:
        learner.resume()
        step = learner.trainer.step

        def record(batch: Batch, at: int):
            assert len(batch) == 32
            mixed.append(int((batch.scalars[:, 1] >= 1000).sum()))
            return step(batch, at)

        learner.trainer.step = record
        learner.train(steps=6)
        assert learner.window.samples_drawn == 6 * 32 - sum(mixed)  # the reuse cap counts self-play's rows
    assert mixed == [8, 6, 4, 2, 0, 0]
    with pytest.raises(UserError, match="holds no shards"):
        Learner(rundir, small_config("learner.mix_dir=nowhere", "learner.mix_share=0.5"))


def _add_labelled_shard(directory: Path, ids: range) -> None:
    """A shard as Stockfish labels write it: a win probability after each move (policy_wins)."""
    directory.mkdir(parents=True, exist_ok=True)
    shard = make_shard(ids)
    wins = np.random.default_rng(ids.start).random(len(shard.policy_indices)).astype(np.float32)
    write_shard(directory / shard_name("labels"), dataclasses.replace(shard, policy_wins=wins,
                                                                      meta={"kind": "stockfish"}))


@pytest.mark.parametrize("head", ["none", "logit"])
def test_only_a_learner_with_an_action_value_head_builds_action_values(tmp_path: Path, head: str) -> None:
    """Pretraining a head-less network on Stockfish labels keeps no win probabilities and builds no dense
    per-move array, in its window nor in the mix folder's; a network with the head gets both."""
    rundir, config = RunDir.create_or_open(tmp_path / "run", small_config(f"network.action_value_head={head}"))
    _add_labelled_shard(rundir.pretrain, range(0, 100))
    _add_labelled_shard(rundir.root / "mix", range(1000, 1100))
    config = apply_overrides(config, ["learner.mix_dir=mix", "learner.mix_share=0.5"])
    with Learner(rundir, config, shards=rundir.pretrain) as learner:
        learner.resume()
        assert learner.mix is not None
        for window in (learner.window, learner.mix):
            batch = window.sample(8)
            assert batch is not None and (batch.action_values is not None) == (head != "none"), window.directory


def test_probe_report_names_legal_moves_for_each_probe() -> None:
    report = probe_report(AlphaZeroNet(small_config(value_head="wdl").network), torch.device("cpu"))
    lines = report.splitlines()
    assert len(lines) == 2 + len(PROBES)
    assert "W/D/L" in lines[2] and "mate in one" in report
    assert all(line.count("%") >= 3 for line in lines[2:])


# --- the loop ---------------------------------------------------------------------------------------------

def test_run_learner_checkpoints_publishes_and_logs(run: tuple[RunDir, Config]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rundir, config = run
    published: list[tuple[int, Path]] = []
    assert run_learner(rundir, config, steps=12, progress=False,
                       on_checkpoint=lambda step, path: published.append((step, path))) == 12
    assert [step for step, _ in published] == [0, 5, 10, 12]
    assert all(path.is_file() and step_of(path) == step for step, path in published)
    assert (rundir.checkpoints / LATEST_NAME).read_text().strip() == checkpoint_name(12)
    payload = load_checkpoint(published[-1][1])
    assert payload["replay"]["samples_drawn"] == 12 * 32 and payload["replay"]["positions_added"] == 200

    events = EventAccumulator(str(rundir.tb / "learner"))
    events.Reload()
    scalars = events.Tags()["scalars"]
    for tag in ("loss/total", "loss/policy", "loss/value", "learning_rate", "grad_norm", "policy/entropy",
                "value/accuracy", "throughput/samples_per_s", "replay/window_positions", "replay/average_reuse",
                "replay/corrupt_shards"):
        assert tag in scalars, tag
    assert [e.step for e in events.Scalars("loss/total")] == [2, 4, 6, 8, 10, 12]
    assert all(np.isfinite(e.value) and e.value > 0 for e in events.Scalars("loss/total"))
    assert events.Scalars("replay/window_positions")[-1].value == 200
    assert events.Scalars("replay/average_reuse")[-1].value == pytest.approx(12 * 32 / 200)
    assert "probes" in str(events.Tags()["tensors"])


def test_the_first_checkpoint_after_each_stretch_of_the_runs_time_is_kept(run: tuple[RunDir, Config],
                                                                           monkeypatch) -> None:
    rundir, _ = run
    # The run's time is what the test sets, not the machine's: a loaded machine's sitting would otherwise
    # pass into the next minute on its own.
    monkeypatch.setattr(Learner, "run_seconds", property(lambda self: self._run_seconds_before))
    config = apply_overrides(run[1], ["learner.keep_checkpoints=1", "learner.keep_every_steps=0",
                                      "learner.keep_every_minutes=1"])
    with Learner(rundir, config) as learner:
        learner.resume()
        learner.train(5)  # steps 0 and 5 in the run's first minute
        learner._run_seconds_before = 65.0  # as if a minute had passed: the next checkpoint is kept
        learner.train(10)  # steps 10 (kept) and 15
        learner._run_seconds_before = 200.0  # the fourth minute
        learner.train(5)  # step 20 (kept)
    assert checkpoint_steps(rundir) == [0, 10, 20]  # the start, the kept ones (15 is thinned: keep 1)
    assert (rundir.checkpoints / KEPT_NAME).read_text().split() == ["10", "20"]
    with Learner(rundir, config) as resumed:  # a resumed run knows which minutes already have theirs
        resumed.resume()
        resumed.train(5)
    assert checkpoint_steps(rundir) == [0, 10, 20, 25]
    assert (rundir.checkpoints / KEPT_NAME).read_text().split() == ["10", "20"]


def test_a_restart_resumes_where_a_clean_stop_saved(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    with Learner(rundir, config) as first:
        first.resume()
        assert first.train(7) == 7
        momentum = momentum_buffers(first.optimizer)
        weights = copy.deepcopy(first.model.state_dict())
        drawn = first.window.samples_drawn
    saved = sorted(p.name for p in rundir.checkpoints.glob("step_*.pt"))
    assert saved == [checkpoint_name(s) for s in (0, 5, 7)]
    # Each checkpoint keeps the run's wall time so far (the curve's hours), growing from one to the next.
    times = [read_payload(rundir.checkpoints / checkpoint_name(s))["run_seconds"] for s in (0, 5, 7)]
    assert 0 <= times[0] <= times[1] <= times[2]

    with Learner(rundir, config) as second:
        assert second.resume() == 7
        for a, b in zip(momentum, momentum_buffers(second.optimizer), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        for key, value in weights.items():
            torch.testing.assert_close(second.model.state_dict()[key], value, rtol=0, atol=0)
        assert second.window.samples_drawn == drawn and second.window.positions_added == 200
        assert second.run_seconds >= times[2]  # a resumed run's time goes on from its checkpoint's
        assert second.train(3) == 10
        resumed = copy.deepcopy(second.model.state_dict())
    assert read_payload(rundir.checkpoints / checkpoint_name(10))["run_seconds"] >= times[2]
    assert sorted(p.name for p in rundir.checkpoints.glob("step_*.pt")) == sorted(saved + [checkpoint_name(10)])

    # The same ten steps without the restart reach the same weights: nothing was lost or repeated.
    fresh, _ = RunDir.create_or_open(rundir.root.parent / "fresh", config)
    for path in sorted(rundir.selfplay.iterdir()):
        os.link(path, fresh.selfplay / path.name)
    with Learner(fresh, config) as straight:
        straight.resume()
        straight.train(10)
        for key, value in resumed.items():
            torch.testing.assert_close(straight.model.state_dict()[key], value)


def held_out_run(tmp_path: Path) -> tuple[RunDir, Config]:
    """A run of 40 games, 30% of them held out, validated every 4 steps."""
    config = small_config("learner.validation_share=0.3", "learner.validate_every=4",
                          "learner.validation_positions=1000")
    rundir, _ = RunDir.create_or_open(tmp_path / "run", config)
    for first_game in range(0, 40, 8):
        add_games(rundir.selfplay, first_game, 8)
    return rundir, config


def test_the_learner_validates_on_held_out_games_and_keeps_them_after_a_restart(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rundir, config = held_out_run(tmp_path)
    with Learner(rundir, config) as first:
        first.resume()
        assert first.train(6) == 6
        held_out = first.window.validation_game_ids()
        figures = first.validation
        assert first.window.positions_added == 400 - 10 * len(held_out)  # held-out games are never trained on
    assert held_out and figures is not None
    assert figures["validation/positions"] == 10 * len(held_out) and figures["validation/games"] == len(held_out)
    assert 0 <= figures["validation/policy_top1"] <= 1 and figures["validation/policy_loss"] > 0
    events = EventAccumulator(str(rundir.tb / "learner"))  # the same run folder as the training curves
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert "loss/policy" in scalars
    for name in ("policy_loss", "policy_top1", "value_loss", "value_accuracy"):
        assert [e.step for e in events.Scalars(f"validation/{name}")] == [4, 6]  # every 4 steps and at the end
        assert f"validation/train_{name}" in scalars
    with Learner(rundir, config) as second:
        second.resume()
        assert second.window.validation_game_ids() == held_out


def test_a_stop_saves_the_last_step_and_cuts_the_final_validation(tmp_path: Path) -> None:
    # Issue 80: a stop is bounded; validation over up to 50,000 held-out positions is not, so a stopped learner
    # saves its step and says the validation was cut, where an end at its steps validates as before.
    rundir, config = held_out_run(tmp_path)
    stop = threading.Event()
    handler = StopOn(threading.Event(), "\0")  # records what the learner says
    with Learner(rundir, config) as learner:
        learner.resume()
        logger = logging.getLogger("learner.loop")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        original = learner._after_step

        def stop_at_six() -> None:
            original()
            if learner.step == 6:
                stop.set()

        learner._after_step = stop_at_six  # type: ignore[method-assign]
        try:
            assert learner.train(100, stop=stop) == 6
        finally:
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)
        assert learner._validated_step == 4  # the last validation is the one at its every-4 step
    assert (rundir.checkpoints / checkpoint_name(6)).is_file()
    assert any("the stop cuts the final validation at step 6" in line for line in handler.seen), handler.seen


def test_a_crash_loses_only_the_steps_after_the_last_checkpoint(run: tuple[RunDir, Config],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rundir, config = run
    config = apply_overrides(config, ["learner.checkpoint_every=3"])
    at_checkpoint: dict[int, list[torch.Tensor]] = {}
    learner = Learner(rundir, config)
    learner.on_checkpoint = lambda step, path: at_checkpoint.update({step: momentum_buffers(learner.optimizer)}
                                                                     if step else {})
    original_step = Trainer.step

    def crash_in_the_ninth_step(self: Trainer, batch: Batch, step: int) -> object:
        if step == 8:
            raise RuntimeError("killed")
        return original_step(self, batch, step)

    monkeypatch.setattr(Trainer, "step", crash_in_the_ninth_step)
    learner.resume()
    with pytest.raises(RuntimeError, match="killed"):
        learner.train(20)
    learner.close()
    monkeypatch.undo()
    assert sorted(step_of(p) for p in rundir.checkpoints.glob("step_*.pt")) == [0, 3, 6]
    # TensorBoard reads a run's event files in name order, and a name is events.out.tfevents.SECOND.HOST.PID.N:
    # a restart is a new process, seconds later. In this one process both files may share the second, and then
    # N (9 then 10) sorts them backwards; date the crashed learner's file a second earlier, as a restart sees it.
    for crashed in (rundir.tb / "learner").glob("events.out.tfevents.*"):
        fields = crashed.name.split(".")
        fields[3] = str(int(fields[3]) - 1)
        crashed.rename(crashed.with_name(".".join(fields)))
    with Learner(rundir, config) as restarted:
        assert restarted.resume() == 6
        for a, b in zip(at_checkpoint[6], momentum_buffers(restarted.optimizer), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert restarted.train(2) == 8
    events = EventAccumulator(str(rundir.tb / "learner"))
    events.Reload()
    # The first run logged steps 2, 4, 6 and 8; those from the resumed step on are its lost future.
    assert [e.step for e in events.Scalars("loss/total")] == [2, 4, 8]


def test_the_reuse_cap_makes_the_learner_wait_until_stopped(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    config = apply_overrides(config, ["learner.max_sample_reuse=1.0", "learner.batch_size=50",
                                      "learner.poll_seconds=0.01"])
    stop = threading.Event()
    handler = StopOn(stop, "reuse cap")
    logger = logging.getLogger("learner.loop")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        final = run_learner(rundir, config, steps=100, stop=stop, progress=False)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert final == 4  # 200 positions x 1 sample each = 4 batches of 50, then a wait
    assert load_checkpoint(rundir.checkpoints / checkpoint_name(4))["replay"]["samples_drawn"] == 200


def test_a_learner_at_the_reuse_cap_trains_on_the_next_shard_as_soon_as_it_lands(run: tuple[RunDir, Config]) -> None:
    # Issue 48: reused no further than the cap, and never idle while games wait unread.
    rundir, config = run
    config = apply_overrides(config, ["learner.max_sample_reuse=1.0", "learner.batch_size=50",
                                      "learner.poll_seconds=0.01"])
    stop = threading.Event()

    class NewShardOnWait(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "reuse cap" in record.getMessage() and not landed:
                landed.append(add_shard(rundir.selfplay, range(200, 300)))  # self-play writes while it waits

    landed: list[Path] = []
    handler = NewShardOnWait()
    logger = logging.getLogger("learner.loop")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    hang = threading.Timer(300, stop.set)  # only stops a hang: the learner reaches its steps long before
    hang.start()
    try:
        final = run_learner(rundir, config, steps=6, stop=stop, progress=False)
    finally:
        hang.cancel()
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert landed and not stop.is_set()
    assert final == 6  # 4 batches of the first 200 positions, a wait, 2 of the new 100: each drawn once
    assert load_checkpoint(rundir.checkpoints / checkpoint_name(6))["replay"]["samples_drawn"] == 300


def test_an_empty_run_waits_for_self_play_and_saves_step_zero(tmp_path: Path) -> None:
    rundir, config = RunDir.create_or_open(tmp_path / "run", small_config("learner.poll_seconds=0.01"))
    stop = threading.Event()
    handler = StopOn(stop, "waiting for self-play: 0 of 50 positions")
    logger = logging.getLogger("learner.loop")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        assert run_learner(rundir, config, stop=stop, progress=False) == 0
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert (rundir.checkpoints / checkpoint_name(0)).is_file()


def test_the_learner_says_why_it_waits(tmp_path: Path) -> None:
    # `train` prints this when its learner is still waiting at the end (a GPU run's first games finish late).
    rundir, config = RunDir.create_or_open(tmp_path / "run", small_config())
    with Learner(rundir, config) as learner:
        assert learner.waiting_text().startswith("waiting for self-play: 0 of 50 positions")
        add_shard(rundir.selfplay, range(200))
        assert learner.waiting_text() == ""  # the shard came: it could train now


def test_a_full_disk_is_a_user_error(run: tuple[RunDir, Config], monkeypatch: pytest.MonkeyPatch) -> None:
    rundir, config = run

    def full(path: object, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr("alphazero.store.checkpoint.atomic_write_bytes", full)
    with pytest.raises(UserError, match="No space left on device"):
        run_learner(rundir, config, steps=3, progress=False)


def test_a_corrupt_checkpoint_is_a_user_error(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    run_learner(rundir, config, steps=1, progress=False)
    (rundir.checkpoints / checkpoint_name(1)).write_bytes(b"\x00" * 100)
    with pytest.raises(UserError, match="cannot resume the learner: .*step_000000001.pt is corrupt.*"
                                        "--from-checkpoint STEP \\(this run has steps 0\\)"):
        run_learner(rundir, config, steps=1, progress=False)


# --- the command -------------------------------------------------------------------------------------------

def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_learn_creates_a_missing_run_and_calls_the_hook(tmp_path: Path) -> None:
    add_shard(tmp_path / "new" / "selfplay", range(0, 100))
    published: list[int] = []
    settings = [f"--set={item}" for item in [*SMALL_NET, *LEARNER]]
    args = parse("--run", str(tmp_path / "new"), "--steps", "3", "--quiet", *settings)
    assert cli.run(args, on_checkpoint=lambda step, path: published.append(step)) == 3
    assert RunDir(tmp_path / "new").read_config().network.blocks == 1
    assert published == [0, 3]


def test_learn_refuses_another_runs_network_and_bad_options(run: tuple[RunDir, Config]) -> None:
    rundir, _ = run
    with pytest.raises(UserError, match="network.blocks"):
        cli.run(parse("--run", str(rundir.root), "--preset", "small", "--steps", "1", "--quiet"))
    with pytest.raises(UserError, match="--steps"):
        cli.run(parse("--run", str(rundir.root), "--steps", "0"))
    with pytest.raises(UserError, match="unknown device"):
        cli.run(parse("--run", str(rundir.root), "--device", "tpu", "--steps", "1", "--quiet"))


def test_the_window_used_by_the_loop_matches_the_config(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    with Learner(rundir, dataclasses.replace(config, learner=dataclasses.replace(
            config.learner, window_positions=150, min_window_positions=100))) as learner:
        learner.resume()
        assert isinstance(learner.window, ReplayWindow)
        assert len(learner.window) == 150 and learner.window.min_positions == 100


def test_the_learner_bench_prints_training_beside_inference(capsys: pytest.CaptureFixture[str]) -> None:
    from alphazero.app.bench import learner as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    bench.run(parser.parse_args(["--preset", "tiny", "--device", "cpu", "--batch-size", "8", "--seconds", "0.05"]))
    out = capsys.readouterr().out
    assert "tiny on cpu" in out and "training samples/s at batch 8 = " in out
    assert out.count("x inference") == 1 and "x training" in out
    # --set measures another tower, named by it and counted as it is
    bench.run(parser.parse_args(["--preset", "tiny", "--device", "cpu", "--batch-size", "8", "--seconds", "0.05",
                                 "--set", "network.blocks=1", "--set", "network.filters=8"]))
    smaller = capsys.readouterr().out
    assert "tiny (1x8) on cpu" in smaller
    params = [float(re.search(r"(\d+\.\d+)M", text).group(1)) for text in (out, smaller)]  # type: ignore[union-attr]
    assert params[1] < params[0]


@pytest.mark.slow
def test_a_damaged_latest_is_named_and_from_checkpoint_resumes_before_it(run: tuple[RunDir, Config],
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from alphazero.app import cli as alphazero_cli

    rundir, config = run
    run_learner(rundir, config, steps=12, progress=False)  # checkpoints 0, 5, 10 and 12
    latest = rundir.checkpoints / checkpoint_name(12)
    overwrite_inside(latest, load_model(latest)[0].stem[0].weight.detach())
    learn = ["learn", "--run", str(rundir.root), "--quiet"]
    assert alphazero_cli.main([*learn, "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert f"{latest} is corrupt" in err and "--from-checkpoint STEP (this run has steps 0, 5, 10)" in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert alphazero_cli.main([*learn, "--steps", "1", "--from-checkpoint", "7"]) == 2
    assert "no checkpoint at step 7 (its checkpoints: 0, 5, 10, 12)" in capsys.readouterr().err

    assert alphazero_cli.main([*learn, "--steps", "3", "--from-checkpoint", "5"]) == 0
    assert checkpoint_steps(rundir) == [0, 5, 8]  # 5, then three steps: the damaged line is gone from view
    assert latest_checkpoint(rundir) == rundir.checkpoints / checkpoint_name(8)
    (aside,) = [p for p in rundir.checkpoints.iterdir() if p.is_dir()]
    assert sorted(p.name for p in aside.iterdir()) == [checkpoint_name(10), checkpoint_name(12)]  # kept, not deleted
    assert load_checkpoint(rundir.checkpoints / checkpoint_name(8))["replay"]["samples_drawn"] == 8 * 32


def start_waiting_learner(rundir: RunDir) -> subprocess.Popen[bytes]:
    """Starts `alphazero learn` on the run in a subprocess that waits for positions it will never get;
    returns once it is running (its step 0 checkpoint is written, so it holds the learner lock)."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    holder = subprocess.Popen([sys.executable, "-m", "alphazero", "learn", "--run", str(rundir.root), "--quiet",
                               "--set", "learner.min_window_positions=1000"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300  # a bound against a hang, not a timing assertion
    while not (rundir.checkpoints / checkpoint_name(0)).is_file():
        if holder.poll() is not None:
            assert holder.stderr is not None
            raise AssertionError(f"the learner exited early: {holder.stderr.read().decode()}")
        assert time.monotonic() < deadline, "the learner did not start"
        time.sleep(0.1)
    return holder


@pytest.mark.slow
def test_one_learner_per_run_and_no_stale_lock_after_a_kill(run: tuple[RunDir, Config],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from alphazero.app import cli as alphazero_cli

    rundir, _ = run
    holder = start_waiting_learner(rundir)
    try:
        assert alphazero_cli.main(["learn", "--run", str(rundir.root), "--steps", "1", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"already has a learner: process {holder.pid} on host {socket.gethostname()} (alphazero learn)" in err
        assert err.count("\n") == 1
        assert alphazero_cli.main(["train", "--run", str(rundir.root), "--minutes", "1", "--quiet"]) == 2
        assert f"process {holder.pid}" in capsys.readouterr().err  # refused before Ray starts
        assert checkpoint_steps(rundir) == [0]  # neither wrote anything
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert str(holder.pid) in (rundir.root / LEARNER_LOCK_NAME).read_text()  # the file stays; the lock went
    assert cli.run(parse("--run", str(rundir.root), "--steps", "1", "--quiet")) == 1
    assert str(os.getpid()) in (rundir.root / LEARNER_LOCK_NAME).read_text()


def test_the_live_line_fits_an_80_column_terminal(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    with Learner(rundir, config) as learner:
        learner.resume()
        learner.train(3)
        full = learner.status()
        line = learner.status(80)
    assert len(full) > 80 and "lr 0.1" in full
    assert len(line) <= 80 and line.startswith("step 3/") and "loss " in line
