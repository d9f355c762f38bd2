"""The network: shapes and ranges, compact input, the Evaluator, model files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from alphazero.config import NetworkConfig, get_preset
from alphazero.errors import UserError
from alphazero.network import (
    POLICY_SIZE, AlphaZeroNet, Evaluator, build_network, load_model, pick_device, save_model,
)
from alphazero.planes import COMPACT_PLANES, NUM_SCALARS, compact_to_torch

SMALL_NET = NetworkConfig(blocks=1, filters=8, policy_filters=8, policy_kernel=3, value_filters=2, value_hidden=16)


@pytest.fixture(autouse=True)
def _two_threads() -> None:
    torch.set_num_threads(min(2, torch.get_num_threads()))


def positions(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    planes = rng.integers(0, np.iinfo(np.uint64).max, size=(n, COMPACT_PLANES), dtype=np.uint64, endpoint=True)
    scalars = rng.integers(0, 100, size=(n, NUM_SCALARS)).astype(np.float32)
    return planes, scalars


def trained_a_little(model: AlphaZeroNet) -> AlphaZeroNet:
    """Moves batch-norm statistics and zero-initialized scales off their defaults, so outputs differ."""
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    model.train()
    model(*compact_to_torch(*positions(8, seed=3), "cpu"))
    return model.eval()


@pytest.mark.parametrize("value_head", ["scalar", "wdl"])
def test_output_shapes_and_value_range(value_head: str) -> None:
    model = trained_a_little(AlphaZeroNet(dataclasses.replace(SMALL_NET, value_head=value_head)))
    with torch.no_grad():
        out = model(*compact_to_torch(*positions(5), "cpu"))
    assert out.policy_logits.shape == (5, POLICY_SIZE) and out.policy_logits.dtype == torch.float32
    assert out.value.shape == (5,) and out.value.dtype == torch.float32
    assert bool(((out.value >= -1) & (out.value <= 1)).all())
    if value_head == "wdl":
        assert out.wdl_logits is not None and out.wdl_logits.shape == (5, 3)
        probabilities = out.wdl_logits.softmax(1)
        torch.testing.assert_close(out.value, probabilities[:, 0] - probabilities[:, 2])
    else:
        assert out.wdl_logits is None


@pytest.mark.parametrize("kernel", [1, 3])
def test_policy_index_is_plane_times_64_plus_square(kernel: int) -> None:
    model = AlphaZeroNet(dataclasses.replace(SMALL_NET, policy_kernel=kernel)).eval()
    x = torch.randn(2, SMALL_NET.filters, 8, 8)
    with torch.no_grad():
        planes_out = model.policy_out(torch.relu(model.policy_conv(x)))  # [N, 73, 8, 8]
        out = model(*compact_to_torch(*positions(2), "cpu"))
    assert planes_out.shape == (2, 73, 8, 8)
    plane, row, col = 60, 5, 2
    assert planes_out.flatten(1)[1, plane * 64 + 8 * row + col] == planes_out[1, plane, row, col]
    assert out.policy_logits.shape == (2, 73 * 64)


def test_model_expands_compact_input_itself() -> None:
    model = trained_a_little(AlphaZeroNet(SMALL_NET))
    planes, scalars = positions(4)
    planes_t, scalars_t = compact_to_torch(planes, scalars, "cpu")
    with torch.no_grad():
        out = model(planes_t, scalars_t)
        changed = planes_t.clone()
        changed[:, 0] ^= 1  # one bit of one plane
        out_changed = model(changed, scalars_t)
    assert not torch.equal(out.policy_logits, out_changed.policy_logits)
    with pytest.raises(ValueError, match="int64"):
        model(planes_t.float(), scalars_t)


def test_evaluator_returns_float32_numpy() -> None:
    evaluator = Evaluator(AlphaZeroNet(SMALL_NET), "cpu")
    logits, values = evaluator.evaluate(*positions(3))
    assert isinstance(logits, np.ndarray) and logits.dtype == np.float32 and logits.shape == (3, POLICY_SIZE)
    assert isinstance(values, np.ndarray) and values.dtype == np.float32 and values.shape == (3,)
    empty_logits, empty_values = evaluator.evaluate(*positions(0))
    assert empty_logits.shape == (0, POLICY_SIZE) and empty_values.shape == (0,)
    with pytest.raises(ValueError, match="uint64"):
        evaluator.evaluate(positions(2)[0].astype(np.int64), positions(2)[1])


def test_evaluator_set_weights_swaps_in_place() -> None:
    source = trained_a_little(AlphaZeroNet(SMALL_NET))
    evaluator = Evaluator(AlphaZeroNet(SMALL_NET), "cpu")
    batch = positions(3)
    evaluator.set_weights({f"_orig_mod.{k}": v for k, v in source.state_dict().items()})  # a compiled model's names
    with torch.no_grad():
        expected = source(*compact_to_torch(*batch, "cpu"))
    logits, values = evaluator.evaluate(*batch)
    np.testing.assert_allclose(logits, expected.policy_logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, expected.value.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(UserError, match="do not fit"):
        evaluator.set_weights(AlphaZeroNet(dataclasses.replace(SMALL_NET, filters=4)).state_dict())


def test_save_load_round_trip_gives_identical_outputs(tmp_path: Path) -> None:
    model = trained_a_little(AlphaZeroNet(dataclasses.replace(SMALL_NET, value_head="wdl")))
    save_model(tmp_path / "net.pt", model, step=42, note="hello")
    loaded, extra = load_model(tmp_path / "net.pt", "cpu")
    assert extra == {"step": 42, "note": "hello"}
    assert loaded.config == model.config and not loaded.training
    batch = positions(4)
    np.testing.assert_array_equal(Evaluator(model).evaluate(*batch)[0], Evaluator(loaded).evaluate(*batch)[0])
    np.testing.assert_array_equal(Evaluator(model).evaluate(*batch)[1], Evaluator(loaded).evaluate(*batch)[1])
    assert [p.name for p in tmp_path.iterdir()] == ["net.pt"]


def test_loading_into_another_architecture_names_the_field(tmp_path: Path) -> None:
    save_model(tmp_path / "net.pt", AlphaZeroNet(SMALL_NET))
    other = dataclasses.replace(SMALL_NET, blocks=2)
    with pytest.raises(UserError, match=r"checkpoint has network\.blocks=1, run config says 2"):
        load_model(tmp_path / "net.pt", expected=other)


@pytest.mark.parametrize("content", [b"", b"garbage" * 100, "truncate"])
def test_garbage_file_raises_user_error(tmp_path: Path, content: bytes | str) -> None:
    path = tmp_path / "net.pt"
    if content == "truncate":
        save_model(path, AlphaZeroNet(SMALL_NET))
        path.write_bytes(path.read_bytes()[:-200])
    else:
        path.write_bytes(content)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="is corrupt or not a checkpoint"):
        load_model(path)
    with pytest.raises(UserError, match="does not exist"):
        load_model(tmp_path / "absent.pt")


def test_a_torch_file_that_is_not_a_model_raises(tmp_path: Path) -> None:
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    with pytest.raises(UserError, match="is corrupt or not a checkpoint"):
        load_model(tmp_path / "other.pt")


def test_pick_device() -> None:
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("auto").type in ("cpu", "cuda")
    with pytest.raises(UserError, match="unknown device|unsupported device"):
        pick_device("tpu7")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="CUDA is not available"):
            pick_device("cuda:1")


def test_preset_networks_build() -> None:
    for name in ("tiny", "small", "cf-tiny", "cf-6m"):
        model = build_network(get_preset(name).network).eval()
        with torch.no_grad():
            out = model(*compact_to_torch(*positions(2), "cpu"))
        assert out.policy_logits.shape == (2, POLICY_SIZE)
