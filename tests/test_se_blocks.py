"""Squeeze-and-excitation in the resnet's blocks (issue 81, network.se_ratio, lc0's): the block's numbers, a whole
network on real positions and on the CPU's fast paths, old weights without it, and a resume of the other shape
refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from alphazero.config import Config, NetworkConfig, apply_overrides
from alphazero.errors import UserError
from alphazero.nn.network import (
    AlphaZeroNet,
    ResidualBlock,
    SqueezeExcitation,
    build_network,
    load_weights,
)
from alphazero.nn.planes import compact_to_torch, encode_position
from alphazero.presets import get_preset
from alphazero.store.checkpoint import (
    load_checkpoint,
    load_latest_weights,
    load_model,
    payload_checksums,
    save_checkpoint,
)
from alphazero.store.rundir import RunDir
from alphazero.store.sources import read_weights
from tests.helpers import (
    assert_a_tower_setting_hashes_apart,
    assert_evaluates_real_positions,
    assert_runs_folded_bf16_and_compiled,
    trained_a_little,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PLAIN = NetworkConfig(blocks=2, filters=8, policy_filters=8, value_filters=2, value_hidden=16)
SE = dataclasses.replace(PLAIN, se_ratio=4)  # a hidden layer of 2 units


def _se_by_hand(se: SqueezeExcitation, x: torch.Tensor) -> torch.Tensor:
    """lc0's SE written out channel by channel: sigmoid(w_c) * x_c + b_c, (w, b) from the channels' means."""
    channels = x.shape[1]
    pooled = x.sum(dim=(2, 3)) / 64.0
    hidden = torch.clamp(pooled @ se.squeeze.weight.T + se.squeeze.bias, min=0.0)
    excited = hidden @ se.excite.weight.T + se.excite.bias
    out = torch.empty_like(x)
    for c in range(channels):
        scale, bias = 1.0 / (1.0 + torch.exp(-excited[:, c])), excited[:, channels + c]
        out[:, c] = scale[:, None, None] * x[:, c] + bias[:, None, None]
    return out


# --- the block ---------------------------------------------------------------------------------------------


def test_the_se_keeps_the_shape_and_its_layers_are_sized_by_the_ratio() -> None:
    se = SqueezeExcitation(16, 4)
    assert se.squeeze.weight.shape == (4, 16) and se.excite.weight.shape == (32, 4)
    assert se(torch.randn(3, 16, 8, 8)).shape == (3, 16, 8, 8)
    assert ResidualBlock(16, 4)(torch.randn(3, 16, 8, 8)).shape == (3, 16, 8, 8)
    assert ResidualBlock(16).se is None


def test_at_zero_last_weights_the_se_halves_the_branch_and_adds_nothing() -> None:
    torch.manual_seed(0)
    block = ResidualBlock(8, 2)
    assert block.se is not None
    assert not block.se.excite.weight.any() and not block.se.excite.bias.any()  # how it is built
    with torch.no_grad():  # a branch that is not zero: random batch norm scales and statistics
        for norm in (block.first[1], block.second[1]):
            norm.weight.normal_()
            norm.bias.normal_()
            norm.running_mean.normal_()
            norm.running_var.uniform_(0.5, 2.0)
    block.eval()
    x = torch.relu(torch.randn(2, 8, 8, 8))
    with torch.no_grad():
        branch = block.second(torch.relu(block.first(x)))
        assert branch.abs().sum() > 0
        # sigmoid(0) = 0.5 and a bias of 0: half the branch, exactly, then the skip and the ReLU.
        torch.testing.assert_close(block.se(branch), 0.5 * branch, rtol=0, atol=0)
        torch.testing.assert_close(block(x), torch.clamp(x + 0.5 * branch, min=0.0))


def test_a_fresh_block_with_se_starts_as_the_identity() -> None:
    # The last batch norm's scale is 0 (ResidualBlock), so the branch is 0, and the SE's bias starts at 0.
    torch.manual_seed(1)
    x = torch.relu(torch.randn(4, 8, 8, 8))  # a block's input comes out of a ReLU
    for mode in (True, False):
        block = ResidualBlock(8, 4).train(mode)
        with torch.no_grad():
            torch.testing.assert_close(block(x), x, rtol=0, atol=0)


def test_the_se_with_trained_weights_matches_lc0s_formula_by_hand() -> None:
    torch.manual_seed(2)
    se = SqueezeExcitation(8, 2)
    with torch.no_grad():
        for parameter in se.parameters():
            parameter.normal_()
        x = torch.randn(3, 8, 8, 8)
        torch.testing.assert_close(se(x), _se_by_hand(se, x))
        # Per position: one board's scales and biases do not leak into another's.
        torch.testing.assert_close(se(x[1:2]), se(x)[1:2])


# --- a whole network ------------------------------------------------------------------------------------------


def test_a_network_with_se_evaluates_real_positions() -> None:
    model = trained_a_little(build_network(SE))
    assert sum(name.startswith("tower.0.se.") for name in model.state_dict()) == 4
    assert_evaluates_real_positions(model)


def test_the_se_adds_two_small_layers_a_block() -> None:
    tiny = dataclasses.replace(get_preset("tiny").network, blocks=2)  # 2 blocks of 32 channels
    plain = AlphaZeroNet(tiny)
    with_se = AlphaZeroNet(dataclasses.replace(tiny, se_ratio=4))  # a hidden layer of 8
    extra = sum(p.numel() for p in with_se.parameters()) - sum(p.numel() for p in plain.parameters())
    assert extra == 2 * ((32 * 8 + 8) + (8 * 64 + 64))


def test_the_se_network_runs_folded_in_channels_last_bf16_and_compiled() -> None:
    # Folded batch norms (the evaluator's inference copy) leave the SE alone.
    model = trained_a_little(build_network(SE))
    assert_runs_folded_bf16_and_compiled(model)
    y = torch.randn(2, 8, 8, 8).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        assert model.tower[0].se(y).is_contiguous(memory_format=torch.channels_last)


# --- settings and the architecture hash ----------------------------------------------------------------------


def test_bad_ratios_are_refused() -> None:
    with pytest.raises(UserError, match=r"network\.se_ratio must be at least 0"):
        dataclasses.replace(PLAIN, se_ratio=-1)
    with pytest.raises(UserError, match=r"network\.se_ratio \(16\) must be at most network\.filters \(8\)"):
        dataclasses.replace(PLAIN, se_ratio=16)
    assert dataclasses.replace(PLAIN, se_ratio=8).se_ratio == 8  # a hidden layer of one unit
    with pytest.raises(UserError, match=r"network\.se_ratio = 4 .*network\.kind = 'chessformer' has none"):
        apply_overrides(get_preset("cf-tiny"), ["network.se_ratio=4"])


def test_the_ratio_changes_the_architecture_hash_and_none_keeps_the_old_one() -> None:
    assert_a_tower_setting_hashes_apart("se_ratio", (2, 4))


# --- old weights, and a resume of the other shape ------------------------------------------------------------


def test_the_builtin_network_loads_and_plays_without_se_and_refuses_an_se_network() -> None:
    builtin = read_weights("builtin")
    assert builtin.network.se_ratio == 0 and not any(".se." in name for name in builtin.state)
    assert not any("se_ratio" in item for item in builtin.overrides())  # left to the run, as a head is
    model = build_network(builtin.network)
    load_weights(model, builtin.state, "builtin")
    with torch.no_grad():
        out = model.eval()(*compact_to_torch(*encode_position(), "cpu"))
    assert bool(torch.isfinite(out.policy_logits).all()) and abs(float(out.value[0])) < 1
    with pytest.raises(UserError, match=r"builtin: the weights do not fit the model \(network\.se_ratio differs.*"
                                        r"tower\.0\.se\."):
        load_weights(build_network(dataclasses.replace(builtin.network, se_ratio=4)), builtin.state, "builtin")


def _as_before_se(path: Path) -> None:
    """Rewrites a saved checkpoint as one written before network.se_ratio existed: its network without the key."""
    payload = torch.load(path, weights_only=True)
    payload["network"] = {k: v for k, v in payload["network"].items() if k != "se_ratio"}
    payload["checksums"] = {"algorithm": "sha256", **payload_checksums(payload)}
    torch.save(payload, path)


def _run(tmp_path: Path, network: NetworkConfig) -> tuple[RunDir, Config]:
    return RunDir.create_or_open(tmp_path / "run", dataclasses.replace(get_preset("tiny"), network=network))


def test_a_checkpoint_from_before_se_loads_as_none(tmp_path: Path) -> None:
    rundir, config = _run(tmp_path, PLAIN)
    path = save_checkpoint(rundir, AlphaZeroNet(PLAIN), None, 5, config)
    _as_before_se(path)
    assert "se_ratio" not in torch.load(path, weights_only=True)["network"]
    assert load_checkpoint(path, expected=PLAIN)["step"] == 5
    model, _ = load_model(path)
    assert model.config == PLAIN and model.config.se_ratio == 0
    assert load_latest_weights(rundir, AlphaZeroNet(PLAIN)) == 5


@pytest.mark.parametrize(("saved", "asked"), [(PLAIN, SE), (SE, PLAIN)], ids=["plain-to-se", "se-to-plain"])
def test_a_resume_with_the_other_shape_is_refused_naming_the_setting(
        tmp_path: Path, saved: NetworkConfig, asked: NetworkConfig) -> None:
    rundir, config = _run(tmp_path, saved)
    path = save_checkpoint(rundir, AlphaZeroNet(saved), None, 7, config)
    message = rf"checkpoint has network\.se_ratio={saved.se_ratio}, run config says {asked.se_ratio}"
    with pytest.raises(UserError, match=message):
        load_checkpoint(path, expected=asked)  # the learner's resume
    with pytest.raises(UserError, match=message):
        load_latest_weights(rundir, AlphaZeroNet(asked))  # an actor's weight poll
    with pytest.raises(UserError, match=rf"network\.se_ratio: run has {saved.se_ratio}, requested {asked.se_ratio}"):
        RunDir.create_or_open(rundir.root, dataclasses.replace(config, network=asked))  # reopening the run
    with pytest.raises(UserError, match=r"network\.se_ratio differs"):
        load_weights(AlphaZeroNet(asked), AlphaZeroNet(saved).state_dict(), path)


# --- the bench -------------------------------------------------------------------------------------------------


def test_bench_network_measures_an_se_variant(capsys: pytest.CaptureFixture[str]) -> None:
    from alphazero.app import cli

    assert cli.main(["bench", "network", "--preset", "tiny", "--batch-sizes", "2", "--seconds", "0.05",
                     "--device", "cpu", "--precision", "float32", "--set", "network.se_ratio=4"]) == 0
    assert "tiny on cpu" in capsys.readouterr().out
    # The setting reaches the measured network: one it refuses stops the bench, saying why.
    assert cli.main(["bench", "network", "--preset", "tiny", "--device", "cpu", "--set", "network.se_ratio=64"]) == 2
    assert "network.se_ratio (64) must be at most network.filters (32)" in capsys.readouterr().err
