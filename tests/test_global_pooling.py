"""KataGo's global pooling in the resnet's blocks (issue 81, network.global_pool_channels): which blocks pool, the
bias's numbers, a square hearing of the far side of the board within one block, a whole network on real positions
and the CPU's fast paths, and the settings, hash and old weights."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from alphazero.config import NetworkConfig, apply_overrides
from alphazero.errors import UserError
from alphazero.nn.network import (
    AlphaZeroNet,
    GlobalPoolingBias,
    ResidualBlock,
    build_network,
    global_pooling_blocks,
    load_weights,
)
from alphazero.presets import get_preset
from alphazero.store.checkpoint import load_checkpoint, save_checkpoint
from alphazero.store.rundir import RunDir
from alphazero.store.sources import read_weights
from tests.helpers import (
    assert_a_tower_setting_hashes_apart,
    assert_evaluates_real_positions,
    assert_runs_folded_bf16_and_compiled,
    old_tiny,
    trained_a_little,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PLAIN = NetworkConfig(blocks=2, filters=8, policy_filters=8, value_filters=2, value_hidden=16)
POOLED = dataclasses.replace(PLAIN, global_pool_channels=3)  # block 1 pools 3 channels into the other 5


def _randomise(module: torch.nn.Module) -> None:
    """Random weights, batch-norm scales and statistics everywhere: a block that is not at its start."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_()
        for norm in module.modules():
            if isinstance(norm, torch.nn.BatchNorm2d):
                norm.running_mean.normal_()
                norm.running_var.uniform_(0.5, 2.0)


# --- the block ---------------------------------------------------------------------------------------------


def test_every_third_block_from_the_second_pools_and_the_rest_are_plain() -> None:
    assert global_pooling_blocks(2) == [1] and global_pooling_blocks(6) == [1, 4] and global_pooling_blocks(1) == []
    model = AlphaZeroNet(dataclasses.replace(PLAIN, blocks=6, global_pool_channels=2))
    pooling = [k for k, block in enumerate(model.tower) if block.pool is not None]
    assert pooling == [1, 4]
    block = model.tower[1]
    assert block.first[0].out_channels == 6 and block.pool_conv[0].out_channels == 2
    assert block.second[0].in_channels == 6 and block.second[0].out_channels == 8
    assert block.pool.fc.weight.shape == (6, 4)  # mean and max of 2 channels -> a bias for each of 6
    assert all(model.tower[k].pool is None and model.tower[k].first[0].out_channels == 8 for k in (0, 2, 3, 5))
    assert block(torch.relu(torch.randn(3, 8, 8, 8))).shape == (3, 8, 8, 8)


def test_a_fresh_pooling_block_starts_as_the_identity_and_its_bias_at_zero() -> None:
    torch.manual_seed(1)
    x = torch.relu(torch.randn(4, 8, 8, 8))  # a block's input comes out of a ReLU
    for mode in (True, False):
        block = ResidualBlock(8, global_pool=3).train(mode)
        assert block.pool is not None and not block.pool.fc.weight.any() and not block.pool.fc.bias.any()
        with torch.no_grad():
            torch.testing.assert_close(block(x), x, rtol=0, atol=0)
            h = torch.randn(4, 5, 8, 8)
            torch.testing.assert_close(block.pool(h, torch.randn(4, 3, 8, 8)), h, rtol=0, atol=0)


def test_the_bias_matches_katagos_formula_by_hand() -> None:
    torch.manual_seed(2)
    pool = GlobalPoolingBias(3, 5)
    _randomise(pool)
    x, g = torch.randn(2, 5, 8, 8), torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        relu = torch.clamp(g, min=0.0)
        features = [relu[:, c].reshape(2, 64).sum(1) / 64.0 for c in range(3)]
        features += [relu[:, c].reshape(2, 64).max(1).values for c in range(3)]
        bias = torch.stack(features, 1) @ pool.fc.weight.T + pool.fc.bias
        torch.testing.assert_close(pool(x, g), x + bias[:, :, None, None])
        # Per position: one board's pooled channels do not leak into another's.
        torch.testing.assert_close(pool(x[1:], g[1:]), pool(x, g)[1:])


def test_within_one_block_a_corner_hears_of_the_far_corner_only_through_the_pooling() -> None:
    # Two 3x3 convolutions reach two squares: a1's output of a plain block cannot depend on h8's input.
    torch.manual_seed(3)
    pooled, plain = ResidualBlock(8, global_pool=3).eval(), ResidualBlock(8).eval()
    for block in (pooled, plain):
        _randomise(block)
    x = torch.relu(torch.randn(1, 8, 8, 8))
    moved = x.clone()
    moved[0, :, 7, 7] += 3.0  # h8, from the side to move's view: the far corner from a1 at [0, 0]
    with torch.no_grad():
        assert torch.equal(plain(x)[0, :, 0, 0], plain(moved)[0, :, 0, 0])
        assert not torch.allclose(pooled(x)[0, :, 0, 0], pooled(moved)[0, :, 0, 0])
        assert pooled.pool is not None
        pooled.pool.fc.weight.zero_()
        pooled.pool.fc.bias.zero_()
        assert torch.equal(pooled(x)[0, :, 0, 0], pooled(moved)[0, :, 0, 0])  # the pooling, nothing else


# --- a whole network ------------------------------------------------------------------------------------------


def test_a_pooling_network_evaluates_real_positions() -> None:
    model = trained_a_little(build_network(POOLED))
    assert sum(".pool" in name for name in model.state_dict()) == 8  # tower.1's pool_conv.{0,1}.* and pool.fc.*
    assert_evaluates_real_positions(model)


def test_pooling_costs_about_a_plain_block() -> None:
    # KataGo's split: the pooled channels come out of the first convolution's width, not beside it.
    tiny = old_tiny().network  # 2 blocks of 32 channels
    plain = AlphaZeroNet(tiny)
    pooled = AlphaZeroNet(dataclasses.replace(tiny, global_pool_channels=8))
    extra = sum(p.numel() for p in pooled.parameters()) - sum(p.numel() for p in plain.parameters())
    # the second conv reads 8 fewer channels; the linear layer: 16 features -> 24 biases
    assert extra == -8 * 32 * 9 + (16 * 24 + 24)


def test_the_pooling_network_runs_folded_in_channels_last_bf16_and_compiled() -> None:
    # Folding takes the pooled channels' conv-BN pair too: no batch norm is left in the tower.
    assert_runs_folded_bf16_and_compiled(trained_a_little(build_network(POOLED)))


# --- settings, the architecture hash and old weights ----------------------------------------------------------


def test_bad_settings_are_refused() -> None:
    with pytest.raises(UserError, match=r"network\.global_pool_channels must be at least 0"):
        dataclasses.replace(PLAIN, global_pool_channels=-1)
    with pytest.raises(UserError, match=r"network\.global_pool_channels \(8\) must be below network\.filters \(8\)"):
        dataclasses.replace(PLAIN, global_pool_channels=8)
    with pytest.raises(UserError, match=r"network\.global_pool_channels = 4 .*network\.kind = 'chessformer' has none"):
        apply_overrides(get_preset("cf-tiny"), ["network.global_pool_channels=4"])
    with pytest.raises(UserError, match=r"network\.global_pool_channels = 8 .*a tower of 1 block has none"):
        apply_overrides(get_preset("tiny"), ["network.global_pool_channels=8"])  # tiny is one block
    two_blocks = apply_overrides(get_preset("tiny"), ["network.blocks=2", "network.global_pool_channels=8"])
    assert global_pooling_blocks(two_blocks.network.blocks) == [1]  # the second block pools


def test_the_setting_changes_the_architecture_hash_and_none_keeps_the_old_one() -> None:
    assert_a_tower_setting_hashes_apart("global_pool_channels", (8, 16))


def test_the_builtin_network_refuses_a_pooling_network_naming_the_setting() -> None:
    builtin = read_weights("builtin")
    assert builtin.network.global_pool_channels == 0
    assert not any("global_pool" in item for item in builtin.overrides())  # left to the run
    pooled = dataclasses.replace(builtin.network, global_pool_channels=8)
    with pytest.raises(UserError, match=r"builtin: the weights do not fit the model \(network\.global_pool_channels "
                                        r"differs"):
        load_weights(build_network(pooled), builtin.state, "builtin")


def test_a_resume_with_the_other_shape_is_refused_naming_the_setting(tmp_path: Path) -> None:
    rundir, config = RunDir.create_or_open(tmp_path / "run", dataclasses.replace(old_tiny(), network=PLAIN))
    path = save_checkpoint(rundir, AlphaZeroNet(PLAIN), None, 7, config)
    with pytest.raises(UserError, match=r"checkpoint has network\.global_pool_channels=0, run config says 3"):
        load_checkpoint(path, expected=POOLED)
    with pytest.raises(UserError, match=r"network\.global_pool_channels: run has 0, requested 3"):
        RunDir.create_or_open(rundir.root, dataclasses.replace(config, network=POOLED))
