"""The moves-left head (issue 79, lc0's): its target is the plies from a position to its game's end (1 before the
move that ends it, 0 where a side resigned; to the resignation or the ply limit's cut), masked where the game has no
recorded end; the network runs it only when training, the learner trains it where asked, and older weights and
checkpoints load without it."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from alphazero.config import Config, LearnerConfig, NetworkConfig, apply_overrides
from alphazero.config_compat import architecture_hash
from alphazero.errors import UserError
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import AlphaZeroNet, build_network, load_weights
from alphazero.presets import get_preset
from alphazero.store.checkpoint import (
    load_checkpoint,
    load_latest_weights,
    load_model,
    payload_checksums,
    save_checkpoint,
    save_model,
)
from alphazero.store.rundir import RunDir
from alphazero.store.shards import VALUE_FROM_ROOT, Shard, shard_from_records, shard_name, write_shard
from alphazero.store.sources import read_weights
from learner.batch import Batch, concatenate_batches
from learner.batch_device import stage
from learner.game_targets import NO_GAME_TARGETS, GameTargets, plies_left
from learner.loop import run_learner
from learner.replay import ReplayWindow
from learner.replay_store import Block
from learner.trainer import Trainer, moves_left_loss
from mcts_ext.driver import run, uniform_evaluator
from mcts_ext.params import SearchParams
from mcts_ext.search import MultiGameSearch
from tests.helpers import HAND_GAME as GAME
from tests.helpers import HAND_PLY as PLY
from tests.helpers import OLD_TINY_HASH, every_position, hand_made_shard, make_shard, old_tiny, random_compact

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PLAIN = NetworkConfig(blocks=1, filters=8, policy_filters=8, value_filters=2, value_hidden=16)
RESNET = dataclasses.replace(PLAIN, moves_left_head=True)
CHESSFORMER = NetworkConfig(kind="chessformer", layers=1, embedding=16, heads=2, ffn=16, policy_filters=16,
                            value_filters=2, value_hidden=16, moves_left_head=True)
MOVES_LEFT = GameTargets(moves_left=True)


def self_play(**params: Any) -> Shard:
    """Two self-play games of the real search with a uniform evaluator (value 0 everywhere)."""
    search = MultiGameSearch(2, SearchParams(simulations=8, **params), seed=3)
    for slot in range(2):
        search.start_game(slot)
    records: list[dict] = []
    run(search, uniform_evaluator, on_step=lambda rows: records.extend(r for _, r in search.take_finished()))
    return shard_from_records(records)


def cut_at_the_ply_limit() -> Shard:
    return self_play(ply_limit=12)


def resigned() -> Shard:
    """Games in which White resigns at its second move: every root value (0) is below the threshold, 2 in a row."""
    return self_play(ply_limit=40, resign_threshold=0.5, resign_consecutive=2, resign_disabled_fraction=0.0)


def with_games(shard: Shard, *games: dict[str, Any]) -> Shard:
    return dataclasses.replace(shard, games=list(games))


# --- the target ------------------------------------------------------------------------------------------


def test_the_target_is_the_plies_to_the_games_end_by_hand() -> None:
    # test_short_term_value's two games, their samples interleaved: game 0 at plies 0-5, game 1 at plies 0, 1, 2, 4
    # (ply 3 a cheap move without a sample).
    shard = hand_made_shard()
    by_ply = {(g, p): left for g, p, left in zip(GAME, PLY, plies_left(with_games(
        shard, {"plies": 6, "termination": "checkmate"},  # mated by the move after ply 5: 1 ply left there
        {"plies": 4, "termination": "resignation"})).tolist(), strict=True)}  # a side resigned at ply 4
    assert by_ply == {(0, 0): 6, (0, 1): 5, (0, 2): 4, (0, 3): 3, (0, 4): 2, (0, 5): 1,
                      (1, 0): 4, (1, 1): 3, (1, 2): 2, (1, 4): 0}
    # Cut at the ply limit: counted to the cut, as a resignation is.
    cut = plies_left(with_games(shard, {"plies": 6, "termination": "ply_limit"}, {"plies": 6, "termination": "pgn"}))
    np.testing.assert_array_equal(cut, 6 - np.array(PLY, np.float32))


def test_games_without_a_recorded_end_have_no_target() -> None:
    shard = hand_made_shard()
    game_0, ply = np.array(GAME) == 0, np.array(PLY, np.float32)
    mated = {"plies": 6, "termination": "checkmate"}
    for game_1 in ({"samples": 4},  # no length: a synthetic shard
                   {"plies": 4, "termination": "label"},  # a labeller's cut (pretraining's Stockfish labels)
                   {"plies": True, "termination": "checkmate"}):  # not a count
        left = plies_left(with_games(shard, mated, game_1))
        np.testing.assert_array_equal(left[game_0], 6 - ply[game_0])
        assert np.isnan(left[~game_0]).all()
    # A record shorter than a sample's ply is broken there: that sample has none, the earlier ones theirs.
    short = plies_left(with_games(shard, mated, {"plies": 3, "termination": "checkmate"}))
    np.testing.assert_array_equal(short[~game_0], [3, 2, 1, np.nan])
    # make_shard's positions (pretraining-like, one record without a length) have none at all.
    assert np.isnan(plies_left(make_shard(range(5)))).all()
    empty = dataclasses.replace(shard, game=np.zeros(0, np.int32), ply=np.zeros(0, np.int16), games=[])
    assert plies_left(empty).shape == (0,)


@pytest.mark.parametrize(("games", "termination", "last"), [(cut_at_the_ply_limit, "ply_limit", 1),
                                                            (resigned, "resignation", 0)],
                         ids=["ply-limit", "resigned"])
def test_real_games_count_to_their_end(games: Any, termination: str, last: int) -> None:
    shard = games()
    left = plies_left(shard)
    for game, record in enumerate(shard.games):
        assert record["termination"] == termination
        rows = np.flatnonzero(shard.game == game)
        np.testing.assert_array_equal(left[rows], record["plies"] - shard.ply[rows].astype(np.float32))
        # The last sample: the position before the cut's move (1), or the resigning side's own position (0), which
        # the search wrote before resigning.
        assert left[rows[-1]] == last and shard.ply[rows[-1]] == record["plies"] - last
    assert termination != "resignation" or all(record["plies"] == 2 for record in shard.games)


def tagged(shard: Shard, first: int) -> Shard:
    """Gets the shard with its samples' scalars[:, 1] numbered from ``first``, so that a batch says which each row is
    (real games share positions: their start, at least)."""
    scalars = shard.scalars.copy()
    scalars[:, 1] = np.arange(first, first + len(shard))
    return dataclasses.replace(shard, scalars=scalars)


def test_the_window_builds_them_only_when_asked(tmp_path: Path) -> None:
    games, synthetic = tagged(resigned(), 0), make_shard(range(100, 110))
    labels = dataclasses.replace(tagged(cut_at_the_ply_limit(), 200), meta={"value_target": VALUE_FROM_ROOT})
    labels = with_games(labels, *({**record, "termination": "label"} for record in labels.games))
    for shard in (games, synthetic, labels):
        write_shard(tmp_path / shard_name("test"), shard)
    asked = ReplayWindow(tmp_path, window_positions=1000, max_sample_reuse=0, targets=MOVES_LEFT)
    plain = ReplayWindow(tmp_path, window_positions=1000, max_sample_reuse=0)
    for window in (asked, plain):
        window.refresh(force=True)
    batch, without = asked.sample(400), plain.sample(400)  # (drawn with replacement: each position is there)
    assert batch is not None and without is not None
    assert without.moves_left is None and stage(without).moves_left is None
    assert batch.moves_left is not None and batch.short_term is None and batch.reply_offsets is None
    # Each position's own target: the resigned games' plies left, NaN for the others (ids 100 on).
    ids = batch.scalars[:, 1].astype(int)
    wanted = np.where(ids < len(games), plies_left(games)[np.minimum(ids, len(games) - 1)], np.nan)
    np.testing.assert_array_equal(batch.moves_left, wanted)
    assert set((ids // 100).tolist()) == {0, 1, 2} and (batch.moves_left == 0).any()  # 0: the resigning positions
    # On the device as z is, NaN kept; a batch without them joins as NaN.
    tensors = stage(batch).to(torch.device("cpu"))
    assert tensors.moves_left is not None
    np.testing.assert_array_equal(tensors.moves_left.numpy(), wanted)
    joined = concatenate_batches(batch, without)
    assert joined.moves_left is not None and np.isnan(joined.moves_left[len(batch):]).all()
    assert GameTargets.of(LearnerConfig()) == NO_GAME_TARGETS
    assert GameTargets.of(LearnerConfig(moves_left_weight=1.0)) == MOVES_LEFT


def test_blocks_keep_them_when_merged() -> None:
    shard = resigned()
    half = int(np.flatnonzero(shard.game == 1)[0])  # the second game's first row: blocks hold whole games
    blocks = [Block.of("s", 0, shard, rows, targets=MOVES_LEFT)
              for rows in (np.arange(half), np.arange(half, len(shard)))]
    merged = Block.merge(blocks)
    np.testing.assert_array_equal(merged.moves_left, plies_left(shard))
    assert Block.merge([Block.of("s", 0, shard, np.arange(len(shard)))]).moves_left.shape == (0,)


# --- the loss ---------------------------------------------------------------------------------------------


def test_the_loss_is_lc0s_scaled_huber_over_the_rows_with_a_target() -> None:
    predicted = torch.tensor([30.0, 5.0, 14.0, 80.0], requires_grad=True)
    target = torch.tensor([25.0, float("nan"), 14.0, 20.0])
    loss = moves_left_loss(predicted, target)
    # Errors of 5, 0 and 60 plies, over 20: 0.25 and 0 inside the delta (0.5), 3 beyond it.
    by_hand = (0.5 * 0.25 ** 2 + 0.0 + 0.5 * (3.0 - 0.25)) / 3
    assert float(loss.detach()) == pytest.approx(by_hand, rel=1e-6)
    torch.testing.assert_close(loss, F.huber_loss(predicted[[0, 2, 3]] / 20, target[[0, 2, 3]] / 20, delta=0.5))
    loss.backward()
    assert predicted.grad is not None and torch.isfinite(predicted.grad).all()
    assert predicted.grad[1] == 0 and predicted.grad[2] == 0  # no target; no error
    assert float(predicted.grad[3]) == pytest.approx(0.5 / 20 / 3)  # beyond the delta: a constant pull
    nothing = moves_left_loss(predicted, torch.full((4,), float("nan")))
    assert float(nothing.detach()) == 0.0


# --- the network ------------------------------------------------------------------------------------------


def _compact(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    planes, scalars = (torch.from_numpy(a) for a in random_compact(n))
    return planes.view(torch.int64), scalars


@pytest.mark.parametrize("config", [RESNET, CHESSFORMER], ids=["resnet", "chessformer"])
def test_the_head_gives_non_negative_plies_and_changes_nothing_else(config: NetworkConfig) -> None:
    torch.manual_seed(1)
    model: Any = build_network(config).eval()  # (forward_with_training_heads: the networks', not nn.Module's)
    torch.manual_seed(1)
    plain: Any = build_network(dataclasses.replace(config, moves_left_head=False)).eval()
    planes, scalars = _compact(5)
    with torch.no_grad():
        out, heads = model.forward_with_training_heads(planes, scalars, moves_left=True)
        alone, before = model(planes, scalars), plain(planes, scalars)
        assert heads.reply_policy_logits is None and heads.moves_left is not None
        assert heads.moves_left.shape == (5,) and heads.moves_left.dtype == torch.float32
        assert (heads.moves_left >= 0).all() and torch.isfinite(heads.moves_left).all()
        assert torch.equal(out.policy_logits, alone.policy_logits) and torch.equal(out.value, alone.value)
        # Built last: the rest of the network starts from the same weights with it or without it.
        assert torch.equal(alone.policy_logits, before.policy_logits) and torch.equal(alone.value, before.value)
        # However negative its last layer, the plies stay non-negative (softplus), and finite.
        model.moves_left.out.bias.fill_(-1e4)
        _, low = model.forward_with_training_heads(planes, scalars, moves_left=True)
        assert (low.moves_left >= 0).all() and float(low.moves_left.max()) < 1e-3
    with pytest.raises(ValueError, match="no moves-left head"):
        plain.forward_with_training_heads(planes, scalars, moves_left=True)


@pytest.mark.parametrize("config", [RESNET, CHESSFORMER], ids=["resnet", "chessformer"])
def test_inference_never_runs_the_head_and_training_does(config: NetworkConfig) -> None:
    torch.manual_seed(2)
    model = build_network(config)
    calls: list[str] = []
    for name, module in model.named_modules():
        if name.startswith("moves_left"):
            module.register_forward_hook(lambda module, args, output, name=name: calls.append(name))
    evaluator = Evaluator(model, "cpu", precision="float32")
    planes, scalars = random_compact(4)
    evaluator.evaluate(planes, scalars)
    legal = np.tile(np.arange(20, dtype=np.int32), (4, 1))
    evaluator.evaluate_legal(planes, scalars, legal, np.full(4, 20, np.int32))
    assert calls == []
    trainer = Trainer(model, LearnerConfig(cpu_precision="float32"), torch.device("cpu"))
    trainer.step(train_batch(), step=0)
    assert calls == [] and "moves_left" in trainer.untrained_figures  # weight 0: not even in training
    trainer = Trainer(model, LearnerConfig(moves_left_weight=1.0, cpu_precision="float32"), torch.device("cpu"))
    stats = trainer.step(train_batch(), step=0)
    assert calls and float(stats.moves_left) > 0 and "moves_left" not in trainer.untrained_figures


# --- training ---------------------------------------------------------------------------------------------


def train_batch() -> Batch:
    return every_position(cut_at_the_ply_limit(), MOVES_LEFT)


@pytest.mark.parametrize("config", [RESNET, CHESSFORMER], ids=["resnet", "chessformer"])
def test_a_few_steps_reduce_the_loss(config: NetworkConfig) -> None:
    torch.manual_seed(4)
    # Adam at 1e-3, the Chessformer presets' rate: at 1e-2 its first steps move all 128 weights of the last layer
    # at once, far enough to leave the softplus where its slope is nearly 0 on this batch.
    settings = LearnerConfig(moves_left_weight=1.0, optimizer="adam", learning_rates=(1e-3,), lr_boundaries=(),
                             scale_lr=False, weight_decay=0.0, cpu_precision="float32",
                             soft_policy_loss_weight=0.5 if config.kind == "chessformer" else 0.0)
    trainer = Trainer(build_network(config), settings, torch.device("cpu"))
    batch = train_batch()
    losses = [float(trainer.step(batch, step=step).moves_left) for step in range(15)]
    assert all(np.isfinite(losses)) and losses[-1] < 0.25 * losses[0], losses


def test_both_training_heads_train_in_one_pass() -> None:
    torch.manual_seed(5)
    network = dataclasses.replace(RESNET, reply_policy_head=True)
    settings = LearnerConfig(moves_left_weight=1.0, reply_policy_weight=0.15, cpu_precision="float32")
    trainer = Trainer(build_network(network), settings, torch.device("cpu"))
    batch = every_position(cut_at_the_ply_limit(), GameTargets(reply=True, moves_left=True))
    stats = trainer.step(batch, step=0)
    assert float(stats.moves_left) > 0 and float(stats.reply_policy) > 0
    with pytest.raises(ValueError, match="moves-left targets"):
        trainer.step(every_position(cut_at_the_ply_limit(), GameTargets(reply=True)), step=1)


def test_the_learner_trains_the_head_on_self_play_shards(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    overrides = ["network.blocks=1", "network.filters=8", "network.policy_filters=8", "network.value_filters=2",
                 "network.value_hidden=16", "network.moves_left_head=true", "learner.moves_left_weight=1.0",
                 "learner.batch_size=16", "learner.min_window_positions=10", "learner.window_positions=1000",
                 "learner.max_sample_reuse=0", "learner.checkpoint_every=3", "learner.log_every=1",
                 "learner.device=cpu", "learner.cpu_precision=float32", "learner.validation_share=0"]
    rundir, config = RunDir.create_or_open(tmp_path / "run", apply_overrides(old_tiny(), overrides))
    write_shard(rundir.selfplay / shard_name("games"), cut_at_the_ply_limit())
    assert run_learner(rundir, config, steps=3, progress=False) == 3
    events = EventAccumulator(str(rundir.tb / "learner"))
    events.Reload()
    values = [event.value for event in events.Scalars("loss/moves_left")]
    assert len(values) == 3 and all(np.isfinite(value) and value > 0 for value in values)
    assert "loss/reply_policy" not in events.Tags()["scalars"]


# --- the architecture, old weights and checkpoints -------------------------------------------------------------


def test_the_head_changes_the_architecture_hash_and_the_builtin_keeps_its_own() -> None:
    tiny = old_tiny()
    assert not tiny.network.moves_left_head and architecture_hash(tiny) == OLD_TINY_HASH
    with_head = apply_overrides(tiny, ["network.moves_left_head=true"])
    assert architecture_hash(with_head) != architecture_hash(tiny)
    reply = apply_overrides(tiny, ["network.reply_policy_head=true"])
    assert architecture_hash(apply_overrides(reply, ["network.moves_left_head=true"])) != architecture_hash(reply)
    builtin = read_weights("builtin")
    assert not builtin.network.moves_left_head
    assert not any("moves_left" in item for item in builtin.overrides())  # left to the run, as the reply head is
    load_weights(build_network(builtin.network), builtin.state, "builtin")  # the built-in network loads as it did


def _as_before_the_head(path: Path) -> None:
    """Rewrites a saved file as one written before network.moves_left_head existed: its network without the key."""
    payload = torch.load(path, weights_only=True)
    payload["network"] = {k: v for k, v in payload["network"].items() if k != "moves_left_head"}
    payload["checksums"] = {"algorithm": "sha256", **payload_checksums(payload)}
    torch.save(payload, path)


def _run(tmp_path: Path, network: NetworkConfig) -> tuple[RunDir, Config]:
    return RunDir.create_or_open(tmp_path / "run", dataclasses.replace(get_preset("tiny"), network=network))


def test_old_checkpoints_load_with_the_head_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rundir, config = _run(tmp_path, PLAIN)
    torch.manual_seed(3)
    old = AlphaZeroNet(PLAIN)
    checkpoint = save_checkpoint(rundir, old, None, 5, config)
    save_model(tmp_path / "old.pt", old)
    for path in (checkpoint, tmp_path / "old.pt"):
        _as_before_the_head(path)
        assert "moves_left_head" not in torch.load(path, weights_only=True)["network"]
        loaded, _ = load_model(path)
        assert loaded.config == PLAIN and loaded.moves_left is None
    assert load_checkpoint(checkpoint, expected=PLAIN)["step"] == 5
    assert load_latest_weights(rundir, AlphaZeroNet(PLAIN)) == 5
    # --init from weights without the head: the rest loads, the head starts fresh, one warning says so.
    model = AlphaZeroNet(RESNET)
    head_before = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("moves_left")}
    with caplog.at_level(logging.WARNING):
        load_weights(model, old.state_dict(), tmp_path / "old.pt")
    assert "no moves-left head" in caplog.text
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in old.state_dict().items())
    assert head_before and all(torch.equal(state[k], v) for k, v in head_before.items())
    weights = read_weights(tmp_path / "old.pt")
    assert apply_overrides(old_tiny(), [*weights.overrides(), "network.moves_left_head=true"]).network == RESNET
    save_model(tmp_path / "new.pt", model)
    assert "network.moves_left_head=True" in read_weights(tmp_path / "new.pt").overrides()


@pytest.mark.parametrize(("saved", "asked"), [(PLAIN, RESNET), (RESNET, PLAIN)], ids=["add-head", "drop-head"])
def test_a_resume_with_the_other_shape_is_refused_naming_the_setting(
        tmp_path: Path, saved: NetworkConfig, asked: NetworkConfig) -> None:
    rundir, config = _run(tmp_path, saved)
    path = save_checkpoint(rundir, AlphaZeroNet(saved), None, 7, config)
    message = rf"checkpoint has network\.moves_left_head={saved.moves_left_head}, run config says " \
              rf"{asked.moves_left_head}"
    with pytest.raises(UserError, match=message):
        load_checkpoint(path, expected=asked)  # the learner's resume
    with pytest.raises(UserError, match=message):
        load_latest_weights(rundir, AlphaZeroNet(asked))  # an actor's weight poll
    run_has, requested = str(saved.moves_left_head).lower(), str(asked.moves_left_head).lower()  # (TOML's spelling)
    with pytest.raises(UserError, match=rf"network\.moves_left_head: run has {run_has}, requested {requested}"):
        RunDir.create_or_open(rundir.root, dataclasses.replace(config, network=asked))  # reopening the run


def test_bad_settings_are_refused() -> None:
    with pytest.raises(UserError, match=r"learner\.moves_left_weight must be at least 0"):
        LearnerConfig(moves_left_weight=-1.0)
    with pytest.raises(UserError, match=r"learner\.moves_left_weight trains the moves-left head, which this network "
                                        r"has not \(network\.moves_left_head = false\)"):
        Trainer(build_network(PLAIN), LearnerConfig(moves_left_weight=1.0, cpu_precision="float32"),
                torch.device("cpu"))
    with pytest.raises(UserError, match="moves_left_head"):
        apply_overrides(get_preset("tiny"), ["network.moves_left_head=maybe"])
