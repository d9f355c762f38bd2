"""The reply-policy head (issue 79, KataGo's auxiliary policy target): its target is the next position's policy in
the next mover's frame, the network runs it only when training, and the learner trains it where asked."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import chess
import numpy as np
import pytest
import torch

from alphazero.chess.moves import index_to_move
from alphazero.config import LearnerConfig, NetworkConfig, apply_overrides
from alphazero.config_compat import architecture_hash
from alphazero.errors import UserError
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import build_network, load_weights
from alphazero.presets import get_preset
from alphazero.store.checkpoint import load_model, payload_checksums, save_checkpoint, save_model
from alphazero.store.rundir import RunDir
from alphazero.store.shards import shard_name, write_shard
from alphazero.store.sources import read_weights
from learner.batch import Batch
from learner.batch_device import ReplyTargets, scattered, stage
from learner.game_targets import NO_GAME_TARGETS, GameTargets, next_rows
from learner.loop import run_learner
from learner.replay import ReplayWindow
from learner.trainer import Trainer, reply_policy_loss
from tests.helpers import OLD_TINY_HASH, every_position, old_tiny, random_compact, real_games

RESNET = NetworkConfig(blocks=1, filters=8, policy_filters=8, value_filters=2, value_hidden=16,
                       reply_policy_head=True)
CHESSFORMER = NetworkConfig(kind="chessformer", layers=1, embedding=16, heads=2, ffn=16, policy_filters=16,
                            value_filters=2, value_hidden=16, reply_policy_head=True)
REPLY = GameTargets(reply=True)


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(min(2, torch.get_num_threads()))


def board_at(game: dict, ply: int) -> chess.Board:
    board = chess.Board(game["start_fen"])
    for uci in game["moves"][:ply]:
        board.push_uci(uci)
    return board


def entries(offsets: np.ndarray, moves: np.ndarray, shares: np.ndarray, row: int) -> dict[int, float]:
    start, end = offsets[row], offsets[row + 1]
    return dict(zip(moves[start:end].astype(int).tolist(), shares[start:end].tolist(), strict=True))


# --- the target ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("playout_cap_fraction", [0.0, 0.5])
def test_the_reply_target_is_the_next_positions_policy_and_its_legal_moves(playout_cap_fraction: float) -> None:
    shard = real_games(playout_cap_fraction=playout_cap_fraction)
    batch = every_position(shard, REPLY)
    assert batch.reply_offsets is not None and batch.reply_moves is not None and batch.reply_shares is not None
    written = {(int(g), int(p)) for g, p in zip(shard.game, shard.ply, strict=True)}
    with_target = without = 0
    for row in range(len(shard)):
        game, ply = int(shard.game[row]), int(shard.ply[row])
        reply = entries(batch.reply_offsets, batch.reply_moves, batch.reply_shares, row)
        if (game, ply + 1) not in written:  # the game's last position, or a cheap move's next one
            assert reply == {}
            without += 1
            continue
        after = int(np.flatnonzero((shard.game == game) & (shard.ply == ply + 1))[0])
        assert reply == entries(shard.policy_offsets, shard.policy_indices, shard.policy_probs, after)
        # Decoded on the board after the move played, in that board's frame (the opponent to move), the
        # indices are that position's legal moves per python-chess.
        board = board_at(shard.games[game], ply)
        board.push_uci(shard.games[game]["moves"][ply])
        assert board.turn == (chess.BLACK if ply % 2 == 0 else chess.WHITE)
        assert {index_to_move(board, index) for index in reply} == set(board.legal_moves)
        assert sum(reply.values()) == pytest.approx(1.0, abs=1e-5)
        with_target += 1
    assert with_target > 0 and without >= 2  # at least each game's last position
    last = [int(np.flatnonzero(shard.game == game)[-1]) for game in range(len(shard.games))]
    assert all(batch.reply_offsets[row] == batch.reply_offsets[row + 1] for row in last)


def test_next_rows_match_by_game_and_ply_not_by_file_order() -> None:
    game = np.array([1, 0, 1, 0, 0, 1])
    ply = np.array([4, 1, 3, 0, 3, 6])  # game 0: plies 0, 1, 3; game 1: plies 3, 4, 6
    assert next_rows(game, ply).tolist() == [-1, -1, 0, 1, -1, -1]


def test_a_window_builds_reply_targets_only_when_asked(tmp_path: Path) -> None:
    write_shard(tmp_path / shard_name("games"), real_games())
    plain = ReplayWindow(tmp_path, window_positions=1000, max_sample_reuse=0)
    asked = ReplayWindow(tmp_path, window_positions=1000, max_sample_reuse=0, targets=REPLY)
    for window in (plain, asked):
        window.refresh(force=True)
    without, with_reply = plain.sample(64), asked.sample(64)
    assert without is not None and with_reply is not None
    assert without.reply_offsets is None and without.short_term is None and stage(without).reply_flat is None
    assert with_reply.reply_offsets is not None and len(with_reply.reply_offsets) == 65
    assert with_reply.reply_moves is not None and with_reply.reply_shares is not None
    # On the device: the next positions' shares and legal moves scattered densely, and the rows that have them.
    staged = stage(with_reply)
    reply = staged.to(torch.device("cpu")).reply
    assert reply is not None and staged.reply_flat is not None and staged.reply_shares is not None
    dense = np.zeros((64, 4672), np.float32)
    dense[with_reply.reply_rows, with_reply.reply_moves.astype(np.int64)] = with_reply.reply_shares
    np.testing.assert_array_equal(reply.policy.numpy(), dense)
    np.testing.assert_array_equal(reply.legal.numpy().sum(axis=1), np.diff(with_reply.reply_offsets))
    np.testing.assert_array_equal(reply.has.numpy(), np.diff(with_reply.reply_offsets) > 0)
    # The scatter a GPU runs (torch's, not numpy's) gives the same.
    on_gpu_path = scattered(64 * 4672, staged.reply_flat, staged.reply_shares, host=False).view(64, -1)
    assert torch.equal(on_gpu_path, reply.policy)
    assert GameTargets.of(LearnerConfig()) == NO_GAME_TARGETS
    assert GameTargets.of(LearnerConfig(reply_policy_weight=0.15)) == REPLY


def test_positions_without_a_reply_target_are_masked_out_of_the_loss() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 4672, requires_grad=True)
    legal = torch.zeros(3, 4672, dtype=torch.bool)
    policy = torch.zeros(3, 4672)
    legal[0, [5, 9, 11]] = True
    policy[0, [5, 9, 11]] = torch.tensor([0.5, 0.5, 0.0])
    legal[2, [7, 8]] = True
    policy[2, [7, 8]] = torch.tensor([0.25, 0.75])
    has = torch.tensor([True, False, True])  # row 1: the game's last position
    loss = reply_policy_loss(logits, ReplyTargets(policy, legal, has))
    log_p0 = logits[0, [5, 9, 11]].log_softmax(0)
    log_p2 = logits[2, [7, 8]].log_softmax(0)
    by_hand = (-(0.5 * log_p0[0] + 0.5 * log_p0[1]) - (0.25 * log_p2[0] + 0.75 * log_p2[1])) / 2
    assert float(loss.detach()) == pytest.approx(float(by_hand.detach()), rel=1e-6)
    loss.backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    assert not logits.grad[1].any()  # no target: no gradient
    nothing = reply_policy_loss(logits, ReplyTargets(policy * 0, legal & False, has & False))
    assert float(nothing.detach()) == 0.0


# --- the network ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [RESNET, CHESSFORMER], ids=["resnet", "chessformer"])
def test_the_head_gives_logits_of_the_policys_shape_and_changes_nothing_else(config: NetworkConfig) -> None:
    torch.manual_seed(1)
    model: Any = build_network(config).eval()  # (forward_with_reply: the networks', not nn.Module's)
    torch.manual_seed(1)
    plain: Any = build_network(dataclasses.replace(config, reply_policy_head=False)).eval()
    planes, scalars = (torch.from_numpy(a) for a in random_compact(5))
    planes = planes.view(torch.int64)
    with torch.no_grad():
        out, reply = model.forward_with_reply(planes, scalars)
        alone = model(planes, scalars)
        before = plain(planes, scalars)
    assert reply.shape == out.policy_logits.shape == (5, 4672) and reply.dtype == torch.float32
    assert torch.equal(out.policy_logits, alone.policy_logits) and torch.equal(out.value, alone.value)
    # The head is built last: the rest of the network starts from the same weights with it or without it.
    assert torch.equal(alone.policy_logits, before.policy_logits) and torch.equal(alone.value, before.value)
    with pytest.raises(ValueError, match="no reply-policy head"):
        plain.forward_with_reply(planes, scalars)


def _count_calls(model: torch.nn.Module) -> list[str]:
    calls: list[str] = []
    for name, module in model.named_modules():
        if name.startswith("reply_policy"):
            module.register_forward_hook(lambda module, args, output, name=name: calls.append(name))
    return calls


@pytest.mark.parametrize("config", [RESNET, CHESSFORMER], ids=["resnet", "chessformer"])
def test_inference_never_runs_the_head_and_training_does(config: NetworkConfig) -> None:
    torch.manual_seed(2)
    model = build_network(config)
    calls = _count_calls(model)
    evaluator = Evaluator(model, "cpu", precision="float32")
    planes, scalars = random_compact(4)
    evaluator.evaluate(planes, scalars)
    legal = np.tile(np.arange(20, dtype=np.int32), (4, 1))
    evaluator.evaluate_legal(planes, scalars, legal, np.full(4, 20, np.int32))
    assert calls == []
    trainer = Trainer(model, LearnerConfig(reply_policy_weight=0.0, cpu_precision="float32"), torch.device("cpu"))
    trainer.step(train_batch(), step=0)
    assert calls == [] and "reply_policy" in trainer.untrained_figures  # weight 0: not even in training
    trainer = Trainer(model, LearnerConfig(reply_policy_weight=0.5, cpu_precision="float32"), torch.device("cpu"))
    stats = trainer.step(train_batch(), step=0)
    assert calls and float(stats.reply_policy) > 0 and "reply_policy" not in trainer.untrained_figures


def _as_before_the_head(path: Path) -> None:
    """Rewrites a saved file as one written before network.reply_policy_head existed: its network without the key."""
    payload = torch.load(path, weights_only=True)
    payload["network"] = {k: v for k, v in payload["network"].items() if k != "reply_policy_head"}
    payload["checksums"] = {"algorithm": "sha256", **payload_checksums(payload)}
    torch.save(payload, path)


def test_weights_and_checkpoints_without_the_head_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    headless = dataclasses.replace(RESNET, reply_policy_head=False)
    torch.manual_seed(3)
    old = build_network(headless)
    save_model(tmp_path / "old.pt", old)
    (tmp_path / "checkpoints").mkdir()
    checkpoint = save_checkpoint(tmp_path, old, None, 7, dataclasses.replace(get_preset("tiny"), network=headless))
    for path in (tmp_path / "old.pt", checkpoint):
        _as_before_the_head(path)
        loaded, _ = load_model(path)  # a file from before the field loads as a network without the head
        assert loaded.config == headless and loaded.reply_policy_conv is None
    model = build_network(RESNET)
    head_before = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("reply_policy")}
    with caplog.at_level(logging.WARNING):
        load_weights(model, old.state_dict(), tmp_path / "old.pt")
    assert "no reply-policy head" in caplog.text
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in old.state_dict().items())
    assert head_before and all(torch.equal(state[k], v) for k, v in head_before.items())  # fresh, kept
    # --init from weights without the head leaves the head to the run's --set, as for the action-value head.
    weights = read_weights(tmp_path / "old.pt")
    assert not any("reply_policy" in item for item in weights.overrides())
    config = apply_overrides(get_preset("tiny"), [*weights.overrides(), "network.reply_policy_head=true"])
    assert config.network == RESNET
    # Weights with the head keep it.
    save_model(tmp_path / "new.pt", model)
    assert "network.reply_policy_head=True" in read_weights(tmp_path / "new.pt").overrides()
    # Weights of another shape still fail to load.
    with pytest.raises(UserError, match="do not fit"):
        load_weights(model, build_network(dataclasses.replace(RESNET, filters=4)).state_dict(), "other")


def test_the_head_changes_the_architecture_hash_and_the_builtin_keeps_its_own() -> None:
    tiny = old_tiny()
    assert architecture_hash(tiny) == OLD_TINY_HASH
    with_head = apply_overrides(tiny, ["network.reply_policy_head=true"])
    assert architecture_hash(with_head) != architecture_hash(tiny)
    both = apply_overrides(tiny, ["network.action_value_head=logit"])
    assert architecture_hash(both) != architecture_hash(apply_overrides(both, ["network.reply_policy_head=true"]))
    builtin = read_weights("builtin")
    assert not builtin.network.reply_policy_head
    model = build_network(builtin.network)
    load_weights(model, builtin.state, "builtin")  # the built-in network loads as it did


# --- training ---------------------------------------------------------------------------------------------


def train_batch() -> Batch:
    return every_position(real_games(), REPLY)


@pytest.mark.parametrize("config", [RESNET, CHESSFORMER], ids=["resnet", "chessformer"])
def test_a_few_steps_reduce_the_reply_loss(config: NetworkConfig) -> None:
    torch.manual_seed(4)
    settings = LearnerConfig(reply_policy_weight=1.0, optimizer="adam", learning_rates=(1e-2,), lr_boundaries=(),
                             scale_lr=False, weight_decay=0.0, cpu_precision="float32",
                             soft_policy_loss_weight=0.5 if config.kind == "chessformer" else 0.0)
    trainer = Trainer(build_network(config), settings, torch.device("cpu"))
    batch = train_batch()
    losses = [float(trainer.step(batch, step=step).reply_policy) for step in range(15)]
    assert all(np.isfinite(losses)) and losses[-1] < 0.85 * losses[0], losses


def test_the_learner_trains_the_head_on_self_play_shards(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    overrides = ["network.blocks=1", "network.filters=8", "network.policy_filters=8", "network.value_filters=2",
                 "network.value_hidden=16", "network.reply_policy_head=true", "learner.reply_policy_weight=0.15",
                 "learner.value_target_short_term_weight=0.3", "learner.batch_size=16",
                 "learner.min_window_positions=10", "learner.window_positions=1000", "learner.max_sample_reuse=0",
                 "learner.checkpoint_every=3", "learner.log_every=1", "learner.device=cpu",
                 "learner.cpu_precision=float32", "learner.validation_share=0"]
    rundir, config = RunDir.create_or_open(tmp_path / "run", apply_overrides(get_preset("tiny"), overrides))
    write_shard(rundir.selfplay / shard_name("games"), real_games())
    assert run_learner(rundir, config, steps=3, progress=False) == 3
    events = EventAccumulator(str(rundir.tb / "learner"))
    events.Reload()
    values = [event.value for event in events.Scalars("loss/reply_policy")]
    assert len(values) == 3 and all(np.isfinite(value) and value > 0 for value in values)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(UserError, match=r"learner\.reply_policy_weight must be at least 0"):
        LearnerConfig(reply_policy_weight=-0.1)
    with pytest.raises(UserError, match=r"network\.reply_policy_head = false"):
        Trainer(build_network(dataclasses.replace(RESNET, reply_policy_head=False)),
                LearnerConfig(reply_policy_weight=0.15, cpu_precision="float32"), torch.device("cpu"))
    with pytest.raises(UserError, match="reply_policy_head"):
        apply_overrides(get_preset("tiny"), ["network.reply_policy_head=maybe"])
