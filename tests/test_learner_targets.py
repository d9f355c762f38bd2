"""The learner's sparse batches and their targets scattered on the device give the losses and gradients of the
dense host path they replaced (issue 69), kept here as the reference: the old replay gather, the old copy to the
device and the old picking of action-value targets."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from alphazero.chess.moves import NUM_MOVES
from alphazero.config import LearnerConfig, NetworkConfig
from alphazero.nn.action_values import action_features, action_value_head, action_value_loss, features_only
from alphazero.nn.network import build_network
from alphazero.nn.planes import COMPACT_PLANES, NUM_SCALARS, compact_to_torch
from alphazero.store.shards import VALUE_NONE, shard_name, write_shard
from learner.batch import Batch, concatenate_batches
from learner.batch_device import ActionValueTargets, DeviceBatch, pins, scattered, stage
from learner.replay import ReplayWindow
from learner.replay_store import Store, _ranges
from learner.trainer import StepStats, Trainer, anchor_loss, auxiliary_losses, compute_losses
from tests.helpers import batch_from_dense, batch_with_action_values, fixed_batch, make_shard

RESNET = NetworkConfig(blocks=1, filters=8, policy_filters=8, policy_kernel=1, value_filters=2, value_hidden=16,
                       action_value_head="logit", action_value_filters=8)
CHESSFORMER = NetworkConfig(kind="chessformer", layers=1, embedding=16, heads=2, ffn=16, policy_filters=16,
                            value_filters=2, value_hidden=16, action_value_head="hl_gauss", action_value_filters=8,
                            action_value_bins=16)
WEIGHTS = dict(value_target_q_weight=0.5, action_value_loss_weight=0.7, start_anchor_weight=0.3)
AUXILIARY = dict(soft_policy_loss_weight=0.5, q_loss_weight=0.4)


# --- the reference: the dense host path before issue 69 -------------------------------------------------


@dataclasses.dataclass
class Dense:
    planes: np.ndarray
    scalars: np.ndarray
    policy: np.ndarray
    legal: np.ndarray
    z: np.ndarray
    q: np.ndarray
    action_values: np.ndarray | None


def old_gather(store: Store, numbers: np.ndarray) -> Dense:
    """learner.replay_store.Store.gather as it was: the dense targets built on the host."""
    size = len(numbers)
    planes = np.empty((size, COMPACT_PLANES), np.uint64)
    scalars = np.empty((size, NUM_SCALARS), np.float32)
    policy = np.zeros((size, NUM_MOVES), np.float32)
    legal = np.zeros((size, NUM_MOVES), np.bool_)
    z = np.empty(size, np.float32)
    q = np.empty(size, np.float32)
    starts = np.array([block.start for block in store.blocks], dtype=np.int64)
    owner = np.searchsorted(starts, numbers, side="right") - 1
    bounds = np.searchsorted(owner, np.arange(len(store.blocks) + 1))
    used = [b for b in range(len(store.blocks)) if bounds[b] < bounds[b + 1]]
    action_values = np.full((size, NUM_MOVES), np.nan, np.float32) \
        if any(store.blocks[b].has_wins for b in used) else None
    for b in used:
        block = store.blocks[b]
        lo_out, hi_out = int(bounds[b]), int(bounds[b + 1])
        rows = numbers[lo_out:hi_out] - block.start
        planes[lo_out:hi_out] = block.planes[rows]
        scalars[lo_out:hi_out] = block.scalars[rows]
        z[lo_out:hi_out] = block.results[rows]
        q[lo_out:hi_out] = block.root_values[rows]
        lo, hi = block.policy_offsets[rows], block.policy_offsets[rows + 1]
        entries = np.repeat(lo, hi - lo) + _ranges(hi - lo)
        batch_rows = np.repeat(np.arange(lo_out, hi_out), hi - lo)
        moves = block.policy_indices[entries].astype(np.int64)
        policy[batch_rows, moves] = block.policy_probs[entries]
        legal[batch_rows, moves] = True
        if action_values is not None and block.has_wins:
            action_values[batch_rows, moves] = block.policy_wins[entries]
    return Dense(planes, scalars, policy, legal, z, q, action_values)


def old_action_value_targets(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows, moves = np.nonzero(np.isfinite(values))
    return rows.astype(np.int64), moves.astype(np.int64), np.clip(values[rows, moves], 0.0, 1.0).astype(np.float32)


def old_tensors(dense: Dense) -> tuple[torch.Tensor, ...]:
    """The old Trainer.to_device: (planes, scalars, policy, legal, z), copied as they were."""
    planes, scalars = compact_to_torch(dense.planes, dense.scalars, "cpu")
    return planes, scalars, *(torch.from_numpy(np.ascontiguousarray(a)) for a in (dense.policy, dense.legal, dense.z))


def old_total(trainer: Trainer, model: torch.nn.Module, anchor: torch.nn.Module | None, dense: Dense) -> StepStats:
    """The old Trainer._loss on ``model`` (a copy of the trainer's): the losses from the dense host arrays."""
    config = trainer.config
    planes, scalars, policy, legal, z = old_tensors(dense)
    q = torch.from_numpy(dense.q) if config.value_target_q_weight else None
    if trainer.auxiliary:
        out, aux = model.forward_with_aux(planes, scalars)  # type: ignore[operator]
    else:
        out = features_only(model)(planes, scalars)
    stats = compute_losses(out, policy, legal, z, value_loss_weight=config.value_loss_weight, q=q,
                           q_weight=config.value_target_q_weight)
    total = stats.total
    if trainer.auxiliary:
        root_values = torch.from_numpy(np.where(np.isfinite(dense.z), dense.q, np.nan).astype(np.float32))
        soft, q_loss = auxiliary_losses(aux, policy, legal, root_values, temperature=config.soft_policy_temperature)
        total = total + config.soft_policy_loss_weight * soft + config.q_loss_weight * q_loss
        stats = dataclasses.replace(stats, soft_policy=soft.detach(), q=q_loss.detach())
    head = action_value_head(model)
    if head is not None and dense.action_values is not None:
        rows, moves, labels = (torch.from_numpy(a) for a in old_action_value_targets(dense.action_values))
        loss, _ = action_value_loss(head, head.logits(action_features(out), rows, moves), labels)
        total = total + config.action_value_loss_weight * loss
        stats = dataclasses.replace(stats, action_value=loss.detach())
    if anchor is not None:
        with torch.no_grad():
            start = features_only(anchor)(planes, scalars)
        pull = anchor_loss(out, start, legal)
        total = total + config.start_anchor_weight * pull
        stats = dataclasses.replace(stats, anchor=pull.detach())
    return dataclasses.replace(stats, total=total)


# --- shards ------------------------------------------------------------------------------------------


def _labelled(ids: range, *, value: bool = True) -> object:
    """A shard as Stockfish labels write it: a win probability after most moves (NaN: unscored), out of [0, 1]
    at some; ``value`` False: no value target (z NaN)."""
    shard = make_shard(ids, seed=3)
    rng = np.random.default_rng(ids.start)
    wins = rng.uniform(-0.1, 1.1, len(shard.policy_indices)).astype(np.float32)
    wins[rng.random(len(wins)) < 0.2] = np.nan
    meta = {"kind": "stockfish", **({} if value else {"value_target": VALUE_NONE})}
    return dataclasses.replace(shard, policy_wins=wins, meta=meta)


@pytest.fixture()
def window(tmp_path: Path) -> ReplayWindow:
    """Self-play shards and Stockfish labels (one without value targets), small enough to be merged into
    blocks with and without win probabilities."""
    for shard in (make_shard(range(0, 60)), _labelled(range(60, 120)), make_shard(range(120, 180)),
                  _labelled(range(180, 240), value=False), make_shard(range(240, 300))):
        write_shard(tmp_path / shard_name("mixed"), shard)  # type: ignore[arg-type]
    window = ReplayWindow(tmp_path, window_positions=10_000, max_sample_reuse=0, seed=5)
    window.refresh(force=True)
    assert any(block.has_wins for block in window._train.blocks)
    return window


def _sampled(window: ReplayWindow, size: int, seed: int) -> tuple[Batch, Dense]:
    """A batch drawn by the window, and the same positions through the old gather."""
    numbers = np.sort(np.random.default_rng(seed).integers(window.first, window.total, size=size))
    before = window.sampler_state()
    window.rewind(dataclasses.replace(before, rng=np.random.default_rng(seed).bit_generator.state))
    batch = window.sample(size)
    assert batch is not None
    return batch, old_gather(window._train, numbers)


def _trainer(network: NetworkConfig, **weights: Any) -> Trainer:
    learner = LearnerConfig(batch_size=64, optimizer="adam", learning_rates=(1e-3,), lr_boundaries=(),
                            scale_lr=False, weight_decay=1e-4, cpu_precision="float32", **weights)
    torch.manual_seed(0)
    return Trainer(build_network(network), learner, torch.device("cpu"), precision="float32")


# --- the tests ---------------------------------------------------------------------------------------


def test_the_sparse_batch_scatters_into_the_old_dense_targets(window: ReplayWindow) -> None:
    for seed in range(3):
        batch, dense = _sampled(window, 64, seed)
        tensors = stage(batch).to(torch.device("cpu"))
        old = old_tensors(dense)
        for new, reference in zip(tensors[:5], old, strict=True):
            assert new.dtype == reference.dtype and torch.equal(torch.nan_to_num(new), torch.nan_to_num(reference))
        assert dense.action_values is not None and tensors.action_values is not None
        for got, wanted in zip(tensors.action_values, old_action_value_targets(dense.action_values), strict=True):
            assert torch.equal(got, torch.from_numpy(wanted))  # the same moves in the same order
        np.testing.assert_array_equal(batch.policy, dense.policy)  # the dense views a reader takes
        np.testing.assert_array_equal(batch.legal, dense.legal)
        np.testing.assert_array_equal(batch.action_values, dense.action_values)


@pytest.mark.parametrize(("network", "weights"), [(RESNET, WEIGHTS), (CHESSFORMER, {**WEIGHTS, **AUXILIARY})],
                         ids=["resnet", "chessformer-auxiliary"])
def test_a_step_on_the_sparse_path_has_the_old_paths_losses_and_gradients(window: ReplayWindow,
                                                                          network: NetworkConfig,
                                                                          weights: dict[str, float]) -> None:
    trainer = _trainer(network, **weights)
    trainer.set_anchor(copy.deepcopy(trainer.model.state_dict()))
    assert trainer.anchor is not None
    with torch.no_grad():  # the anchor a little away from the net, so that its loss and gradient are not 0
        for parameter in trainer.anchor.parameters():
            parameter.add_(0.01)
    for seed in range(2):
        batch, dense = _sampled(window, 48, seed)
        assert np.isnan(dense.z).any() and np.isfinite(dense.z).any()
        reference = copy.deepcopy(trainer.model)
        expected = old_total(trainer, reference, trainer.anchor, dense)
        expected.total.backward()
        stats = trainer.step(stage(batch), seed)
        for name in ("total", "policy", "value", "value_mse", "entropy", "value_accuracy", "soft_policy", "q",
                     "anchor", "action_value"):
            assert float(getattr(stats, name)) == pytest.approx(float(getattr(expected, name).detach()), abs=1e-6), name
        assert float(stats.action_value) > 0 and float(stats.anchor) > 0
        if trainer.auxiliary:
            assert float(stats.soft_policy) > 0 and float(stats.q) > 0
        grads = dict(reference.named_parameters())
        for name, parameter in trainer.model.named_parameters():
            expected_grad = grads[name].grad
            assert (parameter.grad is None) == (expected_grad is None), name
            if parameter.grad is not None:
                torch.testing.assert_close(parameter.grad, expected_grad, atol=1e-6, rtol=1e-5, msg=name)


def test_validation_on_sparse_batches_gives_the_old_figures(window: ReplayWindow) -> None:
    trainer = _trainer(RESNET, **WEIGHTS)
    batch, dense = _sampled(window, 40, 7)
    planes, scalars, policy, legal, z = old_tensors(dense)
    assert dense.action_values is not None
    rows, moves, labels = (torch.from_numpy(a) for a in old_action_value_targets(dense.action_values))
    old = DeviceBatch(planes, scalars, policy, legal, z, torch.from_numpy(dense.q),
                      ActionValueTargets(rows, moves, labels))
    assert trainer.validate([batch]) == pytest.approx(trainer.validate([old]), abs=1e-6)


def test_concatenated_batches_and_dense_built_ones_read_as_their_dense_arrays(window: ReplayWindow) -> None:
    plain = fixed_batch(6)
    labelled, dense = _sampled(window, 10, 3)
    joined = concatenate_batches(plain, labelled)
    np.testing.assert_array_equal(joined.policy, np.concatenate([plain.policy, dense.policy]))
    np.testing.assert_array_equal(joined.legal, np.concatenate([plain.legal, dense.legal]))
    assert dense.action_values is not None and joined.action_values is not None
    assert np.isnan(joined.action_values[:6]).all()
    np.testing.assert_array_equal(joined.action_values[6:], dense.action_values)
    again = batch_from_dense(joined.planes, joined.scalars, joined.policy, joined.legal, joined.z, joined.q,
                             joined.action_values)
    for name in ("policy", "legal", "action_values"):
        np.testing.assert_array_equal(getattr(again, name), getattr(joined, name))
    with pytest.raises(ValueError, match="off its legal moves"):
        batch_from_dense(plain.planes, plain.scalars, np.ones_like(plain.policy), plain.legal, plain.z)
    with pytest.raises(ValueError, match="off its legal moves"):
        batch_with_action_values(plain, np.zeros(plain.policy.shape, np.float32))


def test_the_devices_scatter_and_the_hosts_build_the_same_targets() -> None:
    # A GPU takes torch's scatter_, a CPU numpy's calloc'd zeros; the scatter is checked here on CPU tensors.
    staged = stage(fixed_batch(12))
    cells = len(staged) * NUM_MOVES
    for values in (staged.shares, None):
        on_host, scatter = (scattered(cells, staged.flat, values, host=host) for host in (True, False))
        assert on_host.dtype == scatter.dtype == (torch.bool if values is None else torch.float32)
        assert torch.equal(on_host, scatter) and int(torch.count_nonzero(scatter)) > 0


def test_batches_are_pinned_only_for_cuda() -> None:
    assert not pins(torch.device("cpu"))
    staged = stage(fixed_batch(4), pin=pins(torch.device("cpu")))
    assert not any(t.is_pinned() for t in (staged.planes, staged.flat, staged.shares, staged.z))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the GPU checks run it)")
def test_on_cuda_a_staged_batch_is_pinned_and_scatters_the_same_targets() -> None:
    batch = fixed_batch(16)
    device = torch.device("cuda")
    staged = stage(batch, pin=pins(device))
    assert pins(device) and all(t.is_pinned() for t in (staged.planes, staged.scalars, staged.flat, staged.shares))
    tensors = staged.to(device)
    torch.cuda.synchronize(device)
    assert torch.equal(tensors.policy.cpu(), torch.from_numpy(batch.policy))
    assert torch.equal(tensors.legal.cpu(), torch.from_numpy(batch.legal))
