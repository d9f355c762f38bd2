"""The Chessformer: outputs, relative attention, the policy index map, DeepNorm, files, training."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import chess
import numpy as np
import pytest
import torch

from alphazero.app.bench.network import flops_per_evaluation
from alphazero.chess.moves import NUM_MOVES, legal_move_indices, move_to_index
from alphazero.config import Config, NetworkConfig, apply_overrides
from alphazero.config_compat import incompatible_fields
from alphazero.errors import UserError
from alphazero.nn.chessformer import (
    AttentionPolicyHead,
    AuxOutput,
    Chessformer,
    EncoderLayer,
    RelativeSelfAttention,
    deepnorm_alpha,
    deepnorm_beta,
    policy_index_map,
)
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import AlphaZeroNet, build_network
from alphazero.nn.planes import compact_to_torch, encode_position
from alphazero.presets import get_preset
from alphazero.store.checkpoint import (
    load_checkpoint,
    load_latest_weights,
    load_model,
    restore_checkpoint,
    save_checkpoint,
    save_model,
)
from alphazero.store.rundir import RunDir
from learner.replay import Batch
from learner.trainer import Trainer, auxiliary_losses, build_optimizer, soft_policy_targets
from tests.helpers import batch_from_dense, trained_a_little, without_game_targets
from tests.random_games import iter_positions

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CF_TINY = get_preset("cf-tiny")
# Smaller than cf-tiny, and every width different, so a mixed-up axis shows as a shape error.
SMALL_CF = NetworkConfig(kind="chessformer", layers=2, embedding=24, heads=2, ffn=20, policy_filters=16,
                         value_head="wdl", value_filters=4, value_hidden=12)
PROMOTIONS = ("2r3k1/1P1P4/8/8/8/8/8/4K3 w - - 0 1", "4k3/8/8/8/8/8/1p1p4/2R3K1 b - - 0 1")
CASTLING = ("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1", "r3k2r/8/8/8/8/8/8/R3K2R b KQkq - 0 1")
EN_PASSANT = ("rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3",
              "rnbqkbnr/pppp1ppp/8/8/3Pp3/5N2/PPP1PPPP/RNBQKB1R b KQkq d3 0 3")
UNDER_PROMOTION_PIECES = (chess.KNIGHT, chess.BISHOP, chess.ROOK)


def encoded(fens_and_moves: list[tuple[str | None, list[str]]]) -> tuple[np.ndarray, np.ndarray]:
    parts = [encode_position(fen, moves) for fen, moves in fens_and_moves]
    return np.concatenate([p for p, _ in parts]), np.concatenate([s for _, s in parts])


def some_positions() -> tuple[np.ndarray, np.ndarray]:
    return encoded([(None, []), (None, ["e2e4", "c7c5", "g1f3"]), (PROMOTIONS[0], []), (PROMOTIONS[1], []),
                    (CASTLING[1], [])])


def oriented(square: chess.Square, turn: chess.Color) -> int:
    return square if turn == chess.WHITE else square ^ 56


# --- outputs ---------------------------------------------------------------------------


@pytest.mark.parametrize("value_head", ["wdl", "scalar"])
def test_outputs_have_the_network_contract(value_head: str) -> None:
    torch.manual_seed(0)
    model = build_network(dataclasses.replace(SMALL_CF, value_head=value_head)).eval()
    assert isinstance(model, Chessformer) and model.config.kind == "chessformer"
    planes, scalars = compact_to_torch(*some_positions(), "cpu")
    with torch.no_grad():
        out = model(planes, scalars)
        again, aux = model.forward_with_aux(planes, scalars)
    assert out.policy_logits.shape == (5, NUM_MOVES) and out.policy_logits.dtype == torch.float32
    assert out.value.shape == (5,) and out.value.dtype == torch.float32
    assert bool(((out.value >= -1) & (out.value <= 1)).all())
    if value_head == "wdl":
        assert out.wdl_logits is not None and out.wdl_logits.shape == (5, 3) and out.wdl_logits.dtype == torch.float32
        probabilities = out.wdl_logits.softmax(1)
        torch.testing.assert_close(out.value, probabilities[:, 0] - probabilities[:, 2])
    else:
        assert out.wdl_logits is None
    torch.testing.assert_close(again.policy_logits, out.policy_logits)
    torch.testing.assert_close(again.value, out.value)
    assert isinstance(aux, AuxOutput)
    assert aux.soft_policy_logits.shape == (5, NUM_MOVES) and aux.soft_policy_logits.dtype == torch.float32
    assert aux.q.shape == (5,) and bool((aux.q.abs() <= 1).all())
    assert not torch.equal(aux.soft_policy_logits, out.policy_logits)  # a head of its own


def test_the_evaluator_runs_a_chessformer() -> None:
    evaluator = Evaluator(build_network(SMALL_CF), "cpu")
    logits, values = evaluator.evaluate(*some_positions())
    assert logits.shape == (5, NUM_MOVES) and logits.dtype == np.float32
    assert values.shape == (5,) and values.dtype == np.float32 and np.isfinite(logits).all()


def test_the_input_is_seen_from_the_side_to_move() -> None:
    # The same position after 1.e4 e5 for White, mirrored for Black: the encoder
    # orients the planes, so only the colour and move-count inputs differ.
    torch.manual_seed(0)
    model = build_network(SMALL_CF).eval()
    white, white_scalars = encode_position("4k3/8/8/8/4P3/8/8/4K3 w - - 0 1")
    black, black_scalars = encode_position("4k3/8/8/4p3/8/8/8/4K3 b - - 0 1")
    assert np.array_equal(white, black)
    black_scalars = black_scalars.copy()
    black_scalars[:, :2] = white_scalars[:, :2]
    with torch.no_grad():
        a = model(*compact_to_torch(white, white_scalars, "cpu"))
        b = model(*compact_to_torch(black, black_scalars, "cpu"))
    torch.testing.assert_close(a.policy_logits, b.policy_logits)


# --- relative attention ------------------------------------------------------------------


def shaw_reference(attention: RelativeSelfAttention, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Computes Shaw et al.'s logits and the layer output term by term, from the equations."""
    n, heads, width = x.shape[0], attention.heads, attention.head_width

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.view(n, 64, heads, width).transpose(1, 2)

    q, k, v = (split(layer(x)) for layer in (attention.query, attention.key, attention.value))
    queries = q[:, :, :, None, :] + attention.relative_query  # x_i W^Q + a^Q_ij: [n, h, i, j, d]
    keys = k[:, :, None, :, :] + attention.relative_key  # x_j W^K + a^K_ij
    logits = (queries * keys).sum(-1) / math.sqrt(width)
    values = v[:, :, None, :, :] + attention.relative_value  # x_j W^V + a^V_ij
    z = (logits.softmax(-1)[..., None] * values).sum(3)
    return logits, attention.out(z.transpose(1, 2).reshape(n, 64, heads * width))


def test_attention_follows_shaw_equations() -> None:
    torch.manual_seed(0)
    attention = RelativeSelfAttention(24, 2, beta=0.7)
    with torch.no_grad():  # relative vectors as large as the content, so each term shows
        for table in (attention.relative_query, attention.relative_key, attention.relative_value):
            table.normal_()
    x = torch.randn(3, 64, 24)
    logits, output = shaw_reference(attention, x)
    with torch.no_grad():
        torch.testing.assert_close(attention.logits(x), logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(attention(x), output, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("table", ["relative_query", "relative_key"])
def test_a_pairs_relative_vector_moves_only_that_pairs_logit(table: str) -> None:
    torch.manual_seed(0)
    attention = RelativeSelfAttention(24, 2, beta=0.7)
    x = torch.randn(2, 64, 24)
    with torch.no_grad():
        before = attention.logits(x)
        getattr(attention, table)[10, 53] += torch.randn(attention.head_width)
        after = attention.logits(x)
    changed = (after - before).abs() > 1e-6
    assert bool(changed[:, :, 10, 53].all())  # every position and head: the vectors are shared by the heads
    changed[:, :, 10, 53] = False
    assert not bool(changed.any())


def test_a_pairs_relative_value_moves_only_its_query_square() -> None:
    torch.manual_seed(0)
    attention = RelativeSelfAttention(24, 2, beta=0.7)
    x = torch.randn(2, 64, 24)
    with torch.no_grad():
        before = attention(x)
        attention.relative_value[10, 53] += torch.randn(attention.head_width)
        after = attention(x)
    changed = ((after - before).abs() > 1e-6).any(dim=-1)  # [n, square]
    assert bool(changed[:, 10].all())
    changed[:, 10] = False
    assert not bool(changed.any())


# --- the policy index map ------------------------------------------------------------------


def legal_sources(board: chess.Board) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gets the legal moves' policy indices and the (pair, bias) slots python-chess says each needs."""
    pairs, biases = [], []
    for move in board.legal_moves:
        source, target = oriented(move.from_square, board.turn), oriented(move.to_square, board.turn)
        pairs.append(source * 64 + target)
        under = move.promotion in UNDER_PROMOTION_PIECES
        biases.append(4097 + chess.square_file(target) * 3 + UNDER_PROMOTION_PIECES.index(move.promotion)
                      if under else 4096)
    return legal_move_indices(board), np.array(pairs, np.int64), np.array(biases, np.int64)


def test_policy_index_map_is_a_bijection_onto_the_legal_moves() -> None:
    pair, bias = policy_index_map()
    assert pair.shape == bias.shape == (NUM_MOVES,) and pair.dtype == bias.dtype == np.int64
    torch.manual_seed(0)
    head = AttentionPolicyHead(16)
    tokens = torch.randn(1, 64, 16)
    with torch.no_grad():
        logits = head(tokens)[0].numpy()
        moves, promotions = head.move_matrix(tokens)
    # The row the map reads: the 64 x 64 matrix, a zero, the 8 x 3 promotion biases.
    source_row = np.concatenate([moves[0].flatten().numpy(), [0.0], promotions[0].flatten().numpy()])
    seen = {"castling": 0, "en passant": 0, "under-promotion": 0, "queen promotion": 0, "positions": 0}
    boards = [chess.Board(fen) for fen in PROMOTIONS + CASTLING + EN_PASSANT]
    for board in [*boards, *iter_positions(range(20))]:
        indices, want_pair, want_bias = legal_sources(board)
        assert np.array_equal(pair[indices], want_pair) and np.array_equal(bias[indices], want_bias), board.fen()
        assert len(set(zip(want_pair.tolist(), want_bias.tolist()))) == len(indices)  # one source per move
        assert (want_pair < 4096).all()
        np.testing.assert_allclose(logits[indices], source_row[want_pair] + source_row[want_bias], rtol=1e-6)
        moves_list = list(board.legal_moves)
        seen["castling"] += sum(map(board.is_castling, moves_list))
        seen["en passant"] += sum(map(board.is_en_passant, moves_list))
        seen["under-promotion"] += sum(m.promotion in UNDER_PROMOTION_PIECES for m in moves_list)
        seen["queen promotion"] += sum(m.promotion == chess.QUEEN for m in moves_list)
        seen["positions"] += 1
    assert all(count > 0 for count in seen.values()) and seen["positions"] > 1000, seen


def test_policy_index_map_matches_the_move_index_for_every_move_shape() -> None:
    # Every (from, to) step the move index encodes, from every square, reads its own matrix entry.
    pair, bias = policy_index_map()
    shapes = 0
    for from_square in chess.SQUARES:
        for to_square in chess.SQUARES:
            promotions: tuple[chess.PieceType | None, ...] = (None,)
            if chess.square_rank(from_square) == 6 and chess.square_rank(to_square) == 7:
                promotions = (None, *UNDER_PROMOTION_PIECES)
            for promotion in promotions:
                try:
                    index = move_to_index(chess.Move(from_square, to_square, promotion), chess.WHITE)
                except ValueError:
                    continue  # no queen-like or knight step
                shapes += 1
                assert pair[index] == from_square * 64 + to_square
                want = 4096 if promotion is None else (
                    4097 + chess.square_file(to_square) * 3 + UNDER_PROMOTION_PIECES.index(promotion))
                assert bias[index] == want
    assert shapes == 1792 + 22 * 3  # 1456 queen-like + 336 knight (from, to) pairs, 22 under-promotions x 3
    assert (pair == 4096).sum() == NUM_MOVES - 1792 - 22 * 3  # the rest can never be legal: they read 0


# --- DeepNorm --------------------------------------------------------------------------------


def test_deepnorm_gains_and_initial_scales() -> None:
    layers = 8
    alpha, beta = deepnorm_alpha(layers), deepnorm_beta(layers)
    assert alpha == pytest.approx((2 * layers) ** 0.25) and beta == pytest.approx((8 * layers) ** -0.25)
    torch.manual_seed(0)
    model = Chessformer(dataclasses.replace(get_preset("cf-6m").network, layers=layers))
    for layer in model.encoder:
        assert isinstance(layer, EncoderLayer) and layer.alpha == pytest.approx(alpha)
        attention = layer.attention
        for linear, gain in ((attention.query, 1.0), (attention.key, 1.0), (attention.value, beta),
                             (attention.out, beta), (layer.ffn_in, beta), (layer.ffn_out, beta)):
            fan_out, fan_in = linear.weight.shape
            xavier = math.sqrt(2.0 / (fan_in + fan_out))
            assert float(linear.weight.detach().std()) == pytest.approx(gain * xavier, rel=0.03)
        assert attention.query.bias is None and attention.key.bias is None and attention.value.bias is None
        assert layer.attention_norm.weight is not None and not hasattr(layer.attention_norm, "bias")


def test_post_ln_output_has_unit_rms() -> None:
    torch.manual_seed(0)
    layer = EncoderLayer(24, 2, 20, alpha=deepnorm_alpha(2), beta=deepnorm_beta(2))
    with torch.no_grad():
        y = layer(torch.randn(3, 64, 24) * 5 + 2)
    torch.testing.assert_close(y.square().mean(-1).sqrt(), torch.ones(3, 64), atol=1e-3, rtol=1e-3)


# --- FLOPs ------------------------------------------------------------------------------------


def test_flop_count_grows_by_one_layers_products() -> None:
    config = get_preset("cf-tiny").network
    one, two = (flops_per_evaluation(Chessformer(dataclasses.replace(config, layers=n))) for n in (1, 2))
    e, f = config.embedding, config.ffn
    projections = 2 * 64 * (4 * e * e + 2 * e * f)  # q, k, v, out and the feed-forward, per square
    attention = 5 * 2 * 64 * 64 * e  # q.k, q.a^K, a^Q.k, alpha.v, alpha.a^V over all heads
    assert two - one == projections + attention


# --- files ---------------------------------------------------------------------------------------


def test_model_file_round_trip_of_both_kinds(tmp_path: Path) -> None:
    planes, scalars = compact_to_torch(*some_positions(), "cpu")
    for config in (SMALL_CF, get_preset("tiny").network):
        model = trained_a_little(build_network(config))
        save_model(tmp_path / f"{config.kind}.pt", model, note="x")
        loaded, extra = load_model(tmp_path / f"{config.kind}.pt", expected=config)
        assert type(loaded) is type(model) and loaded.config == config and extra == {"note": "x"}
        with torch.no_grad():
            want, got = model(planes, scalars), loaded(planes, scalars)
        torch.testing.assert_close(got.policy_logits, want.policy_logits)
        torch.testing.assert_close(got.value, want.value)


@pytest.fixture()
def cf_run(tmp_path: Path) -> tuple[RunDir, Config]:
    config = without_game_targets(dataclasses.replace(get_preset("cf-tiny"), network=SMALL_CF))
    return RunDir.create_or_open(tmp_path / "cf", config)


def test_checkpoint_round_trip_with_the_nadam_state(cf_run: tuple[RunDir, Config]) -> None:
    rundir, config = cf_run
    torch.manual_seed(0)
    trainer = Trainer(build_network(config.network), config.learner, torch.device("cpu"))
    batch = training_batch()
    for step in range(2):
        trainer.step(batch, step)
    path = save_checkpoint(rundir, trainer.model, trainer.optimizer, 2, config)
    payload = load_checkpoint(path, expected=config.network)
    assert payload["network"]["kind"] == "chessformer"
    restored_model = build_network(config.network)
    restored = build_optimizer(restored_model, config.learner)
    assert restore_checkpoint(payload, restored_model, restored, restore_rng=False) == 2
    for a, b in zip(trainer.model.state_dict().values(), restored_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)
    assert isinstance(restored, torch.optim.NAdam)
    state, want = restored.state_dict()["state"], trainer.optimizer.state_dict()["state"]
    assert state.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(state[key]["exp_avg_sq"], want[key]["exp_avg_sq"])
    model, _ = load_model(path, expected=config.network)  # agents open checkpoints as model files
    assert isinstance(model, Chessformer)


def test_a_checkpoint_of_one_kind_is_refused_by_the_other(cf_run: tuple[RunDir, Config], tmp_path: Path) -> None:
    rundir, config = cf_run
    path = save_checkpoint(rundir, build_network(config.network), None, 5, config)
    resnet = get_preset("tiny").network
    with pytest.raises(UserError, match="network.kind='chessformer', run config says 'resnet'"):
        load_checkpoint(path, expected=resnet)
    with pytest.raises(UserError, match="network.kind"):
        load_latest_weights(rundir, AlphaZeroNet(resnet))
    with pytest.raises(UserError, match="network.kind"):
        load_model(path, expected=resnet)
    save_model(tmp_path / "resnet.pt", AlphaZeroNet(resnet))
    with pytest.raises(UserError, match="network.kind='resnet', run config says 'chessformer'"):
        load_model(tmp_path / "resnet.pt", expected=config.network)
    assert incompatible_fields(get_preset("tiny"), get_preset("cf-tiny"))[0] == "network.kind"


# --- training ---------------------------------------------------------------------------------------


def training_batch() -> Batch:
    """Eight real positions, each with a one-hot target on a legal move, a result and a root value."""
    boards = [chess.Board(fen) for fen in PROMOTIONS + CASTLING + EN_PASSANT] + [chess.Board(), chess.Board(
        "r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3")]
    planes, scalars = encoded([(board.fen(), []) for board in boards])
    policy = np.zeros((len(boards), NUM_MOVES), np.float32)
    legal = np.zeros((len(boards), NUM_MOVES), np.bool_)
    for row, board in enumerate(boards):
        indices = legal_move_indices(board)
        legal[row, indices] = True
        policy[row, indices[row % len(indices)]] = 0.75
        policy[row, indices[(row + 1) % len(indices)]] += 0.25
    z = np.array([1, -1, 0, 1, 0, -1, 1, 0], np.float32)
    return batch_from_dense(planes, scalars, policy, legal, z, np.linspace(-0.9, 0.9, len(boards), dtype=np.float32))


def test_a_few_training_steps_reduce_every_loss() -> None:
    config = apply_overrides(without_game_targets(dataclasses.replace(get_preset("cf-tiny"), network=SMALL_CF)),
                             ["learner.warmup_steps=3", "learner.learning_rates=3e-3,3e-4,1e-4,3e-5"])
    torch.manual_seed(0)
    trainer = Trainer(build_network(config.network), config.learner, torch.device("cpu"))
    batch = training_batch()
    first = trainer.evaluate(batch)
    stats = [trainer.step(batch, step) for step in range(40)]
    last = trainer.evaluate(batch)
    assert float(stats[0].soft_policy) > 0 and float(stats[0].q) > 0
    assert float(stats[-1].total) < 0.5 * float(stats[0].total)
    assert float(stats[-1].soft_policy) < float(stats[0].soft_policy)
    assert float(stats[-1].q) < float(stats[0].q)
    assert float(last.policy) < float(first.policy) and float(last.value) < float(first.value)


def test_auxiliary_losses_by_hand() -> None:
    policy = torch.tensor([[0.81, 0.16, 0.03, 0.0], [0.0, 0.0, 0.0, 0.0]])
    legal = torch.tensor([[True, True, True, False], [True, True, False, False]])
    soft = soft_policy_targets(policy, legal, 4.0)
    roots = torch.tensor([0.81, 0.16, 0.03]) ** 0.25
    torch.testing.assert_close(soft[0], torch.cat([roots / roots.sum(), torch.zeros(1)]))
    torch.testing.assert_close(soft[1], torch.zeros(4))  # no targets: no soft targets either
    logits = torch.tensor([[1.0, 0.0, -1.0, 5.0], [0.0, 0.0, 9.0, 9.0]])
    aux = AuxOutput(logits, torch.tensor([0.5, -0.5]))
    soft_loss, q_loss = auxiliary_losses(aux, policy, legal, torch.tensor([1.0, 0.0]), temperature=4.0)
    log_p = torch.tensor([1.0, 0.0, -1.0]).log_softmax(0)
    assert float(soft_loss) == pytest.approx(float(-(soft[0, :3] * log_p).sum()) / 2)
    assert float(q_loss) == pytest.approx((0.25 + 0.25) / 2)


def test_auxiliary_losses_need_a_chessformer() -> None:
    tiny = apply_overrides(get_preset("tiny"), ["learner.q_loss_weight=1"])
    with pytest.raises(UserError, match="network.kind = 'chessformer'"):
        Trainer(build_network(tiny.network), tiny.learner, torch.device("cpu"))


@pytest.mark.parametrize("name", ["adamw", "nadam"])
def test_decoupled_optimizers_decay_weight_matrices_only(name: str) -> None:
    learner = apply_overrides(get_preset("cf-tiny"), [f"learner.optimizer={name}"]).learner
    model = build_network(SMALL_CF)
    optimizer = build_optimizer(model, learner)
    assert isinstance(optimizer, torch.optim.AdamW if name == "adamw" else torch.optim.NAdam)
    decayed, kept = optimizer.param_groups
    assert (decayed["weight_decay"], kept["weight_decay"]) == (learner.weight_decay, 0.0)
    assert decayed["betas"] == (0.9, 0.98) and decayed["eps"] == 1e-7
    names = {id(p): n for n, p in model.named_parameters()}
    decayed_names = {names[id(p)] for p in decayed["params"]}
    assert "encoder.0.attention.query.weight" in decayed_names and "encoder.0.attention.relative_key" in decayed_names
    assert not decayed_names & {"embedding.gain", "embedding.offset", "encoder.0.ffn_in.bias",
                                "encoder.0.attention_norm.weight"}
    assert len(decayed["params"]) + len(kept["params"]) == len(list(model.parameters()))


def test_bench_network_prints_flops_beside_speed_for_both_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    from alphazero.app import cli

    common = ["bench", "network", "--batch-sizes", "2", "--seconds", "0.05", "--device", "cpu"]
    assert cli.main([*common, "--preset", "tiny,cf-tiny"]) == 0
    out = capsys.readouterr().out
    assert "tiny on cpu: 8.3 MFLOP/eval, best" in out and "cf-tiny on cpu: 9.6 MFLOP/eval, best" in out
    assert cli.main([*common, "--preset", "tiny", "--set", "network.filters=64", "--set",
                     "network.policy_filters=64"]) == 0
    assert "tiny on cpu: 23.7 MFLOP/eval" in capsys.readouterr().out  # --set measures a variant
