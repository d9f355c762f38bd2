"""The action-value head: its HL-Gauss target, its masked losses, both network kinds, the Evaluator's ways to
it, its batches from Stockfish labels, and networks without it (old checkpoints, the built-in one)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from alphazero.config import LearnerConfig, NetworkConfig, apply_overrides, network_config_from_dict, to_toml
from alphazero.config_compat import architecture_hash
from alphazero.errors import UserError
from alphazero.nn.action_values import (
    action_value_head,
    action_value_targets,
    bin_centres,
    features_only,
    hl_gauss_target,
)
from alphazero.nn.forward import Evaluator
from alphazero.nn.move_map import policy_index_map
from alphazero.nn.network import build_network, cpu_state_dict, load_weights
from alphazero.nn.planes import compact_to_torch
from alphazero.presets import from_toml, get_preset
from alphazero.store.checkpoint import load_model, payload_checksums, save_checkpoint, save_model
from alphazero.store.shards import Shard, shard_name, write_shard
from alphazero.store.sources import NetworkSource, load_network, read_weights
from learner.batch import Batch, concatenate_batches
from learner.replay import ReplayWindow
from learner.trainer import Trainer
from mcts_ext import Board
from mcts_ext.driver import analyse
from tests.helpers import OLD_TINY_HASH, batch_with_action_values, fixed_batch, make_shard, old_tiny, random_compact

RESNET = NetworkConfig(blocks=1, filters=8, policy_filters=8, policy_kernel=1, value_filters=2, value_hidden=16)
CHESSFORMER = NetworkConfig(kind="chessformer", layers=1, embedding=16, heads=2, ffn=16, policy_filters=16,
                            value_filters=2, value_hidden=16)
HEADS = ("logit", "hl_gauss")


def _with_head(body: NetworkConfig, head: str) -> NetworkConfig:
    return dataclasses.replace(body, action_value_head=head, action_value_filters=8, action_value_bins=16)


NETWORKS = [pytest.param(_with_head(body, head), id=f"{body.kind}-{head}")
            for body in (RESNET, CHESSFORMER) for head in HEADS]
# the head shaped as each kind's policy head (the 'logit' form only)
POLICY_SHAPED = [pytest.param(dataclasses.replace(_with_head(body, "logit"), action_value_shape="policy"),
                              id=f"{body.kind}-policy-shape") for body in (RESNET, CHESSFORMER)]
WIDTH = 12  # legal moves per random position


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """Every test here runs its networks on one thread (the machine is shared)."""


def _model(config: NetworkConfig, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_network(config)
    with torch.no_grad():  # off the initialisation, so that positions and moves get different values
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.2)
    return model.eval()


POSSIBLE = np.flatnonzero(policy_index_map()[0] < 64 * 64)  # the 1858 policy indices that can be legal moves


def _legal(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    indices = np.stack([rng.choice(POSSIBLE, WIDTH, replace=False) for _ in range(rows)]).astype(np.int32)
    counts = rng.integers(1, WIDTH + 1, size=rows).astype(np.int32)
    counts[0] = WIDTH
    return indices, counts


def _stockfish_batch(size: int = 16, seed: int = 0, *, labelled_rows: int | None = None) -> Batch:
    """fixed_batch's positions with a win probability on most legal moves (the rest NaN, as Stockfish's
    unscored moves), on the first ``labelled_rows`` positions (default all; the others: a game's, none)."""
    batch = fixed_batch(size, seed)
    rng = np.random.default_rng(seed + 1)
    values = np.full(batch.policy.shape, np.nan, np.float32)
    for row in range(size if labelled_rows is None else labelled_rows):
        moves = np.flatnonzero(batch.legal[row])
        scored = moves[rng.random(len(moves)) < 0.8]
        values[row, scored] = rng.choice([0.0, 0.1, 0.5, 0.9, 1.0], len(scored))
    return batch_with_action_values(batch, values)


def _trainer(config: NetworkConfig, *, rate: float = 3e-3, seed: int = 0) -> Trainer:
    learner = LearnerConfig(batch_size=16, optimizer="adam", learning_rates=(rate,), lr_boundaries=(),
                            scale_lr=False, weight_decay=0.0, cpu_precision="float32")
    torch.manual_seed(seed)
    return Trainer(build_network(config), learner, torch.device("cpu"), precision="float32")


# --- the HL-Gauss target ---------------------------------------------------------------------------


@pytest.mark.parametrize("bins", [2, 16, 128])
def test_the_hl_gauss_target_sums_to_1_and_its_mean_recovers_the_label_within_a_bin(bins: int) -> None:
    labels = torch.cat([torch.linspace(0.0, 1.0, 101), torch.tensor([0.0, 1.0, 1e-7, 1 - 1e-7])])
    target = hl_gauss_target(labels, bins)
    assert target.shape == (len(labels), bins) and bool(torch.isfinite(target).all()) and bool((target >= 0).all())
    assert torch.allclose(target.sum(dim=1), torch.ones(len(labels)), atol=1e-5)
    means = target @ bin_centres(bins)
    assert float((means - labels).abs().max()) < 1.0 / bins


def test_labels_at_0_and_1_put_their_mass_in_the_end_bins() -> None:
    target = hl_gauss_target(torch.tensor([0.0, 1.0]), 128)
    assert float(target[0, :2].sum()) > 0.99 and float(target[1, -2:].sum()) > 0.99
    assert torch.allclose(target[0], target[1].flip(0), atol=1e-6)  # the two ends mirror each other
    # sigma is 0.75 of a bin's width: a label in the middle of a bin keeps most of its mass there.
    middle = hl_gauss_target(torch.tensor([64.5 / 128]), 128)[0]
    assert int(middle.argmax()) == 64 and 0.45 < float(middle[64]) < 0.55


def test_only_finite_targets_are_picked_and_they_are_clipped_into_0_1() -> None:
    values = np.full((3, 4672), np.nan, np.float32)
    values[0, [5, 9]] = [0.25, 1.5]
    values[2, 4671] = -0.5
    values[1, 3] = np.inf
    rows, moves, labels = action_value_targets(values)
    assert rows.tolist() == [0, 0, 2] and moves.tolist() == [5, 9, 4671] and labels.tolist() == [0.25, 1.0, 0.0]
    assert [len(a) for a in action_value_targets(None)] == [0, 0, 0]


# --- the masked loss --------------------------------------------------------------------------------


@pytest.mark.parametrize("head", HEADS)
def test_positions_and_moves_without_values_never_reach_a_gradient(head: str) -> None:
    trainer = _trainer(_with_head(RESNET, head))
    batch = _stockfish_batch(labelled_rows=10)  # 6 positions without values, NaN at a fifth of the moves
    assert np.isnan(batch.action_values).any()
    stats = trainer.step(batch, 0)
    assert np.isfinite(float(stats.total)) and float(stats.action_value) > 0
    grads = {name: p.grad for name, p in trainer.model.named_parameters()}
    assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads.values())
    assert float(grads["action_value.out.weight"].abs().sum()) > 0  # the head learnt from the others
    assert all(bool(torch.isfinite(p).all()) for p in trainer.model.parameters())


@pytest.mark.parametrize("head", HEADS)
def test_a_batch_without_values_has_an_action_value_loss_of_0(head: str) -> None:
    trainer = _trainer(_with_head(RESNET, head))
    all_nan = _stockfish_batch(labelled_rows=0)
    assert np.isnan(all_nan.action_values).all()
    for batch in (all_nan, batch_with_action_values(all_nan, None)):
        stats = trainer.step(batch, 0)
        assert float(stats.action_value) == 0.0 and np.isfinite(float(stats.total))
        assert all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in trainer.model.parameters())


def test_a_network_without_the_head_ignores_the_batches_values() -> None:
    trainer = _trainer(RESNET)
    stats = trainer.step(_stockfish_batch(), 0)
    assert float(stats.action_value) == 0.0 and np.isfinite(float(stats.total))


@pytest.mark.parametrize("config", [NETWORKS[0], NETWORKS[1], NETWORKS[3], *POLICY_SHAPED])
def test_training_on_stockfish_values_lowers_the_action_value_loss(config: NetworkConfig) -> None:
    trainer = _trainer(config, rate=1e-2 if config.action_value_shape == "policy" else 3e-3)
    batch = _stockfish_batch(labelled_rows=12)
    before = trainer.validate([batch])
    losses = [float(trainer.step(batch, step).action_value) for step in range(30)]
    after = trainer.validate([batch])
    assert before is not None and after is not None
    assert np.mean(losses[-5:]) < 0.9 * np.mean(losses[:3])
    assert after["action_value_loss"] < before["action_value_loss"]
    assert after["action_value_mae"] < before["action_value_mae"]
    assert "action_value_loss" not in (trainer.validate([batch_with_action_values(batch, None)]) or {})


# --- the head on both kinds, and the Evaluator ---------------------------------------------------


@pytest.mark.parametrize("config", NETWORKS + POLICY_SHAPED)
def test_the_head_gives_every_move_a_win_probability_and_the_legal_path_the_same_values(
        config: NetworkConfig) -> None:
    model = _model(config)
    planes, scalars = random_compact(6, seed=2)
    with torch.no_grad():
        out = model(*compact_to_torch(planes, scalars, "cpu"))
        lean = model(*compact_to_torch(planes, scalars, "cpu"), action_values=False)
    assert out.action_values is not None and out.action_values.shape == (6, 4672)
    assert out.action_values.dtype == torch.float32
    scored = out.action_values[:, POSSIBLE]
    assert float(scored.min()) >= 0.0 and float(scored.max()) <= 1.0 and float(scored.std()) > 1e-3
    impossible = np.setdiff1d(np.arange(4672), POSSIBLE)
    assert len(impossible) == 4672 - 1858 and not out.action_values[:, impossible].any()  # never legal: 0
    features = (6, 4672) if config.action_value_shape == "policy" else (6, 64, 2 * config.action_value_filters)
    assert out.action_features is not None and out.action_features.shape == features
    assert lean.action_values is None and torch.equal(lean.action_features, out.action_features)

    evaluator = Evaluator(model, "cpu", precision="float32")
    assert evaluator.has_action_values
    with torch.no_grad():  # again, in the layout the evaluator put the model in (channels_last: sums in another order)
        out = model(*compact_to_torch(planes, scalars, "cpu"))
    full = evaluator.evaluate_action_values(planes, scalars)
    np.testing.assert_allclose(full, out.action_values.numpy(), atol=1e-6)
    indices, counts = _legal(6)
    logits, values, legal_values = (a.copy() for a in evaluator.evaluate_legal(planes, scalars, indices, counts,
                                                                                action_values=True))
    plain_logits, plain_values = evaluator.evaluate_legal(planes, scalars, indices, counts)
    np.testing.assert_array_equal(logits, plain_logits)  # the keyword changes nothing else
    np.testing.assert_array_equal(values, plain_values)
    real = np.arange(WIDTH) < counts[:, None]
    assert legal_values.shape == (6, WIDTH) and legal_values.dtype == np.float32
    np.testing.assert_allclose(legal_values[real], np.take_along_axis(full, indices, axis=1)[real], atol=1e-6)


def test_the_bucketed_path_carries_the_action_values_and_the_parity_check_covers_them(caplog) -> None:
    model = _model(NETWORKS[1].values[0])
    planes, scalars = random_compact(5, seed=4)
    indices, counts = _legal(5, seed=5)
    eager = Evaluator(model, "cpu", precision="float32").evaluate_legal(planes, scalars, indices, counts,
                                                                         action_values=True)
    expected = [a.copy() for a in eager]

    def shifted_features(planes_t: torch.Tensor, scalars_t: torch.Tensor):  # a fast pass that is wrong
        def run():
            out = features_only(model)(planes_t, scalars_t)
            return out._replace(action_features=out.action_features + 10.0)
        return run

    def right(planes_t: torch.Tensor, scalars_t: torch.Tensor):
        return lambda: features_only(model)(planes_t, scalars_t)

    fast = Evaluator(model, "cpu", precision="float32", forward="compile", max_batch=8, runner_maker=right)
    got = fast.evaluate_legal(planes, scalars, indices, counts, action_values=True)  # padded to bucket 6
    real = np.arange(WIDTH) < counts[:, None]
    np.testing.assert_allclose(got[2][real], expected[2][real], atol=1e-6)
    assert not fast.fallbacks
    wrong = Evaluator(model, "cpu", precision="float32", forward="compile", max_batch=8,
                      runner_maker=shifted_features)
    with caplog.at_level(logging.WARNING, logger="alphazero.nn.forward"):
        got = wrong.evaluate_legal(planes, scalars, indices, counts, action_values=True)
    np.testing.assert_allclose(got[2][real], expected[2][real], atol=1e-6)  # eager's reached the search
    assert len(wrong.fallbacks) == 1 and "action-value error" in wrong.fallbacks[0]


def test_a_network_without_the_head_says_so_in_one_line() -> None:
    model = _model(RESNET)
    out = model(*compact_to_torch(*random_compact(2), "cpu"))
    assert out.action_values is None and out.action_features is None and action_value_head(model) is None
    evaluator = Evaluator(model, "cpu", name="weights old.pt")
    assert not evaluator.has_action_values
    indices, counts = _legal(2)
    for call in (lambda: evaluator.evaluate_action_values(*random_compact(2)),
                 lambda: evaluator.evaluate_legal(*random_compact(2), indices, counts, action_values=True)):
        with pytest.raises(UserError) as raised:
            call()
        message = str(raised.value)
        assert "\n" not in message and message.startswith("weights old.pt has no action-value head")
        assert "network.action_value_head = 'none'" in message


# --- batches from Stockfish labels ---------------------------------------------------------------


def _labelled(ids: range, seed: int) -> Shard:
    shard = make_shard(ids, seed)
    wins = np.random.default_rng(seed).random(len(shard.policy_indices)).astype(np.float32)
    wins[::5] = np.nan  # moves Stockfish left unscored
    return dataclasses.replace(shard, policy_wins=wins, meta={"kind": "stockfish"})


def test_batches_carry_the_win_probabilities_of_labelled_shards_and_nan_elsewhere(tmp_path: Path) -> None:
    folder = tmp_path / "shards"
    folder.mkdir()
    labelled = {}
    for first, has_wins in ((0, True), (10, False), (20, True), (30, False)):
        shard = _labelled(range(first, first + 10), seed=first) if has_wins else make_shard(range(first, first + 10))
        write_shard(folder / shard_name(f"s{first}"), shard)
        if has_wins:
            labelled[first] = shard
    window = ReplayWindow(folder, window_positions=1000, max_sample_reuse=0, seed=0)  # its shards merge: one block
    window.refresh(force=True)
    batch = window.sample(200)
    assert batch is not None and batch.action_values is not None and batch.action_values.shape == (200, 4672)
    for row in range(len(batch)):
        position = int(batch.scalars[row, 1])
        first = position - position % 10
        legal = np.flatnonzero(batch.legal[row])
        if first not in labelled:
            assert np.isnan(batch.action_values[row]).all()
            continue
        shard = labelled[first]
        lo, hi = shard.policy_offsets[position - first], shard.policy_offsets[position - first + 1]
        order = np.argsort(shard.policy_indices[lo:hi])
        np.testing.assert_allclose(batch.action_values[row, legal], shard.policy_wins[lo:hi][order], atol=1e-3)
        assert np.isnan(np.delete(batch.action_values[row], legal)).all()

    selfplay = tmp_path / "selfplay"
    selfplay.mkdir()
    write_shard(selfplay / shard_name("games"), make_shard(range(100, 110)))
    games = ReplayWindow(selfplay, window_positions=64, max_sample_reuse=0, seed=0)
    games.refresh(force=True)
    plain = games.sample(8)
    assert plain is not None and plain.action_values is None  # self-play's batches build no [B, 4672] of NaN
    joined = concatenate_batches(plain, batch)  # a mix folder's rows after self-play's
    assert joined.action_values is not None and np.isnan(joined.action_values[:8]).all()
    np.testing.assert_array_equal(joined.action_values[8:], batch.action_values)
    assert concatenate_batches(plain, plain).action_values is None
    headless = ReplayWindow(folder, window_positions=1000, max_sample_reuse=0, seed=0, action_values=False)
    headless.refresh(force=True)
    assert headless.sample(8).action_values is None and headless.nbytes < window.nbytes  # kept none, built none


# --- old networks, and heads added to them ---------------------------------------------------------


def _as_before_the_head(path: Path) -> None:
    """Rewrites a saved file as this version would have before the head: its network entry without the keys."""
    payload = torch.load(path, weights_only=True)
    payload["network"] = {k: v for k, v in payload["network"].items() if not k.startswith("action_value")}
    payload["checksums"] = {"algorithm": "sha256", **payload_checksums(payload)}
    torch.save(payload, path)


def test_old_checkpoints_and_model_files_load_and_play_without_the_head(tmp_path: Path) -> None:
    model = _model(RESNET)
    save_model(tmp_path / "old.pt", model)
    (tmp_path / "checkpoints").mkdir()
    checkpoint = save_checkpoint(tmp_path, model, None, 7, dataclasses.replace(get_preset("tiny"), network=RESNET))
    for path in (tmp_path / "old.pt", checkpoint):
        _as_before_the_head(path)
        assert "action_value_head" not in torch.load(path, weights_only=True)["network"]
        loaded, _ = load_model(path)
        assert loaded.config == RESNET and loaded.config.action_value_head == "none"
        network = load_network(NetworkSource(tmp_path / "nowhere", weights=path), device="cpu")
        assert not network.evaluator.has_action_values
        search = analyse(Board(), network.evaluate, 16)
        assert search.best_move(0) in Board().legal_moves()
    assert network_config_from_dict({"blocks": 2}).action_value_head == "none"
    # A network without the head hashes as before the head existed (checkpoints carry the hash).
    assert architecture_hash(old_tiny()) == OLD_TINY_HASH
    assert architecture_hash(apply_overrides(old_tiny(), ["network.action_value_head=logit"])) != \
        architecture_hash(old_tiny())


def test_the_builtin_network_plays_without_the_head_and_says_so_when_asked_for_values(tmp_path: Path) -> None:
    network = load_network(NetworkSource(tmp_path / "nowhere", weights=Path("builtin")), device="cpu")
    assert network.evaluator.config.action_value_head == "none" and not network.evaluator.has_action_values
    search = analyse(Board(), network.evaluate, 16)
    assert search.best_move(0) in Board().legal_moves()
    with pytest.raises(UserError, match=r"^the built-in network has no action-value head"):
        network.evaluator.evaluate_action_values(*random_compact(1))


def test_headless_weights_start_a_run_with_the_head_and_the_head_starts_fresh(tmp_path: Path, caplog) -> None:
    old = _model(RESNET, seed=3)
    save_model(tmp_path / "old.pt", old)
    _as_before_the_head(tmp_path / "old.pt")
    weights = read_weights(tmp_path / "old.pt")
    assert not any("action_value" in item for item in weights.overrides())  # the run's --set decides
    config = apply_overrides(old_tiny(), [*weights.overrides(), "network.action_value_head=hl_gauss"])
    assert config.network == dataclasses.replace(RESNET, action_value_head="hl_gauss")  # the head's defaults
    model = build_network(config.network)
    fresh = {name: tensor.clone() for name, tensor in cpu_state_dict(model).items() if name.startswith("action")}
    with caplog.at_level(logging.WARNING, logger="alphazero.nn.network"):
        load_weights(model, weights.state, weights.path)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and "no action-value head" in said[0] and str(weights.path) in said[0]
    state = cpu_state_dict(model)
    assert all(torch.equal(state[name], tensor) for name, tensor in weights.state.items())
    assert fresh and all(torch.equal(state[name], tensor) for name, tensor in fresh.items())
    with_head = read_weights(_saved(tmp_path / "new.pt", model))
    assert "network.action_value_head=hl_gauss" in with_head.overrides()
    with pytest.raises(UserError, match="do not fit"):  # the head is only ever added, never dropped or reshaped
        load_weights(build_network(RESNET), with_head.state, "new.pt")


@pytest.mark.parametrize("config", POLICY_SHAPED)
def test_a_policy_shaped_head_loaded_from_headless_weights_starts_as_the_policy(config: NetworkConfig,
                                                                                  caplog) -> None:
    torch.manual_seed(5)  # unperturbed weights: values well inside (-1, 1), where their logit is finite
    old = build_network(dataclasses.replace(config, action_value_head="none")).eval()
    model = build_network(config).eval()
    with caplog.at_level(logging.WARNING, logger="alphazero.nn.network"):
        load_weights(model, cpu_state_dict(old), "old.pt")
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and "starts from a copy of the policy head" in said[0]
    planes, scalars = random_compact(4, seed=6)
    with torch.no_grad():
        out = model(*compact_to_torch(planes, scalars, "cpu"))
    # each move's value logit is the policy's logit plus the position's level, logit((1 + v) / 2) of the
    # value head: the head ranks the moves as the policy does, at the value's level
    assert out.action_features is not None and out.action_values is not None
    level = out.action_features[:, POSSIBLE] - out.policy_logits[:, POSSIBLE]
    value_logit = torch.log((1 + out.value) / (1 - out.value))
    torch.testing.assert_close(level, value_logit[:, None].expand_as(level), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.action_values[:, POSSIBLE], torch.sigmoid(out.action_features[:, POSSIBLE]))
    # a checkpoint with the head keeps its own head's weights, copied from nothing
    trained = _model(config, seed=7)
    again = build_network(config)
    load_weights(again, cpu_state_dict(trained), "trained.pt")
    assert all(torch.equal(a, b) for a, b in zip(cpu_state_dict(again).values(),
                                                  cpu_state_dict(trained).values(), strict=True))


def test_the_squares_shape_starts_fresh_and_the_policy_shape_refuses_bins() -> None:
    model = build_network(_with_head(RESNET, "logit"))
    assert model.start_action_values_from_policy() is False
    with pytest.raises(UserError, match="takes network.action_value_head = 'logit'"):
        apply_overrides(get_preset("tiny"), ["network.action_value_head=hl_gauss",
                                             "network.action_value_shape=policy"])
    with pytest.raises(UserError, match="must be one of 'squares', 'policy'"):
        apply_overrides(get_preset("tiny"), ["network.action_value_shape=moves"])
    assert "action_value_shape" not in to_toml(get_preset("tiny"), comments=False)  # old hashes unchanged


def _saved(path: Path, model: torch.nn.Module) -> Path:
    save_model(path, model)
    return path


def test_the_action_value_settings_are_checked_and_written() -> None:
    tiny = get_preset("tiny")
    for override, message in (("network.action_value_head=gauss", "must be one of 'none', 'logit', 'hl_gauss'"),
                              ("network.action_value_bins=1", "at least 2"),
                              ("network.action_value_filters=0", "at least 1"),
                              ("learner.action_value_loss_weight=-1", "at least 0")):
        with pytest.raises(UserError, match=message):
            apply_overrides(tiny, [override])
    assert tiny.learner.action_value_loss_weight == 1.0 and tiny.network.action_value_head == "none"
    canonical = to_toml(tiny, comments=False)
    assert "action_value_head" not in canonical and "action_value_head = \"none\"" in to_toml(tiny)
    headed = apply_overrides(tiny, ["network.action_value_head=hl_gauss", "network.action_value_bins=64"])
    assert "action_value_head = \"hl_gauss\"" in to_toml(headed, comments=False)
    assert "action_value_filters = 32" in to_toml(headed, comments=False)
    assert from_toml(to_toml(headed, comments=False)) == headed and from_toml(canonical) == tiny


def test_the_chessformer_trains_the_head_beside_its_auxiliary_heads() -> None:
    config = _with_head(CHESSFORMER, "hl_gauss")
    learner = LearnerConfig(batch_size=16, optimizer="adam", learning_rates=(1e-3,), lr_boundaries=(),
                            scale_lr=False, weight_decay=0.0, cpu_precision="float32",
                            soft_policy_loss_weight=0.5, q_loss_weight=0.5)
    torch.manual_seed(0)
    trainer = Trainer(build_network(config), learner, torch.device("cpu"), precision="float32")
    batch = dataclasses.replace(_stockfish_batch(), q=np.zeros(16, np.float32))
    stats = trainer.step(batch, 0)
    assert float(stats.action_value) > 0 and float(stats.soft_policy) > 0 and np.isfinite(float(stats.total))


@pytest.mark.slow
def test_pretraining_on_labels_logs_the_action_value_loss_and_its_validation(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from alphazero.store.rundir import RunDir
    from learner.pretrain import pretrain_network

    overrides = ["network.blocks=1", "network.filters=8", "network.policy_filters=8", "network.value_filters=2",
                 "network.value_hidden=16", "network.action_value_head=hl_gauss", "network.action_value_bins=16",
                 "network.action_value_filters=8", "learner.batch_size=16", "learner.optimizer=adam",
                 "learner.learning_rates=0.001", "learner.lr_boundaries=", "learner.scale_lr=false",
                 "learner.cpu_precision=float32", "learner.log_every=2", "learner.validate_every=2",
                 "learner.validation_share=0.5", "learner.checkpoint_every=100"]
    run, config = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"), overrides)
    run.pretrain.mkdir(parents=True, exist_ok=True)
    for first in range(0, 40, 10):
        shard = _labelled(range(first, first + 10), seed=first)
        games = [{"samples": 1, "game_id": f"labels-{first + i}"} for i in range(10)]
        write_shard(run.pretrain / shard_name(f"labels{first}"),
                    dataclasses.replace(shard, game=np.arange(10, dtype=np.int32), games=games))
    assert pretrain_network(run, config, steps=4, progress=False) == 4
    events = EventAccumulator(str(run.tb / "learner"))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert all(e.value > 0 for e in events.Scalars("loss/action_value"))
    assert {"validation/action_value_loss", "validation/action_value_mae", "validation/train_action_value_loss"} \
        <= set(scalars)
