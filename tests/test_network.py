"""The network: shapes and ranges, compact input, the Evaluator, model files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from alphazero.chess.moves import NUM_MOVES
from alphazero.config import NetworkConfig
from alphazero.errors import UserError
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import AlphaZeroNet, build_network, fold_batch_norm, pick_device
from alphazero.nn.planes import compact_to_torch
from alphazero.presets import get_preset
from alphazero.store.checkpoint import load_model, save_model
from tests.helpers import random_compact, trained_a_little

SMALL_NET = NetworkConfig(blocks=1, filters=8, policy_filters=8, policy_kernel=3, value_filters=2, value_hidden=16)


@pytest.fixture(autouse=True)
def _two_threads() -> None:
    torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.mark.parametrize("value_head", ["scalar", "wdl"])
def test_output_shapes_and_value_range(value_head: str) -> None:
    model = trained_a_little(AlphaZeroNet(dataclasses.replace(SMALL_NET, value_head=value_head)))
    with torch.no_grad():
        out = model(*compact_to_torch(*random_compact(5), "cpu"))
    assert out.policy_logits.shape == (5, NUM_MOVES) and out.policy_logits.dtype == torch.float32
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
        out = model(*compact_to_torch(*random_compact(2), "cpu"))
    assert planes_out.shape == (2, 73, 8, 8)
    plane, row, col = 60, 5, 2
    assert planes_out.flatten(1)[1, plane * 64 + 8 * row + col] == planes_out[1, plane, row, col]
    assert out.policy_logits.shape == (2, 73 * 64)


def test_model_expands_compact_input_itself() -> None:
    model = trained_a_little(AlphaZeroNet(SMALL_NET))
    planes, scalars = random_compact(4)
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
    logits, values = evaluator.evaluate(*random_compact(3))
    assert isinstance(logits, np.ndarray) and logits.dtype == np.float32 and logits.shape == (3, NUM_MOVES)
    assert isinstance(values, np.ndarray) and values.dtype == np.float32 and values.shape == (3,)
    empty_logits, empty_values = evaluator.evaluate(*random_compact(0))
    assert empty_logits.shape == (0, NUM_MOVES) and empty_values.shape == (0,)
    with pytest.raises(ValueError, match="uint64"):
        evaluator.evaluate(random_compact(2)[0].astype(np.int64), random_compact(2)[1])


def test_evaluator_set_weights_swaps_in_place() -> None:
    source = trained_a_little(AlphaZeroNet(SMALL_NET))
    evaluator = Evaluator(AlphaZeroNet(SMALL_NET), "cpu")
    batch = random_compact(3)
    evaluator.set_weights({f"_orig_mod.{k}": v for k, v in source.state_dict().items()})  # a compiled model's names
    with torch.no_grad():
        expected = source(*compact_to_torch(*batch, "cpu"))
    logits, values = evaluator.evaluate(*batch)
    np.testing.assert_allclose(logits, expected.policy_logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, expected.value.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(UserError, match="do not fit"):
        evaluator.set_weights(AlphaZeroNet(dataclasses.replace(SMALL_NET, filters=4)).state_dict())


def legal_batch(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Legal move lists as gather() writes them: [n, 256] indices, junk beyond each row's count."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 60, size=n).astype(np.int32)
    indices = rng.integers(-10_000, 10_000, size=(n, 256)).astype(np.int32)  # junk, out of range too
    for row, count in enumerate(counts):
        indices[row, :count] = rng.choice(NUM_MOVES, size=count, replace=False)
    return indices, counts


def test_evaluate_legal_gathers_the_legal_logits_of_evaluate() -> None:
    evaluator = Evaluator(trained_a_little(AlphaZeroNet(SMALL_NET)), "cpu")
    planes, scalars = random_compact(7, seed=4)
    indices, counts = legal_batch(7, seed=5)
    logits, values = evaluator.evaluate(planes, scalars)
    legal, legal_values = evaluator.evaluate_legal(planes, scalars, indices, counts)
    assert legal.dtype == np.float32 and legal.shape == (7, counts.max())
    assert np.array_equal(legal_values, values)
    for row, count in enumerate(counts):
        assert np.array_equal(legal[row, :count], logits[row, indices[row, :count]])  # bitwise


def test_folding_the_batch_norms_keeps_the_outputs_and_set_weights_folds_again() -> None:
    model = trained_a_little(AlphaZeroNet(SMALL_NET))
    folded = fold_batch_norm(model)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())  # the original is untouched
    planes, scalars = random_compact(6, seed=7)
    indices, counts = legal_batch(6, seed=8)
    plain = Evaluator(model, "cpu")
    fast = Evaluator(trained_a_little(AlphaZeroNet(SMALL_NET)), "cpu")
    fast.set_weights(model.state_dict())
    assert fast.fold_batch_norm() and fast.folded
    for got, expected in zip(fast.evaluate_legal(planes, scalars, indices, counts),
                             [a.copy() for a in plain.evaluate_legal(planes, scalars, indices, counts)]):
        np.testing.assert_allclose(got, expected, atol=1e-4)
    other = AlphaZeroNet(SMALL_NET)
    fast.set_weights(other.state_dict())  # folds the new weights
    np.testing.assert_allclose(fast.evaluate(planes, scalars)[0], Evaluator(other, "cpu").evaluate(planes, scalars)[0],
                               atol=1e-4)


def test_batches_of_two_lanes_in_flight_keep_their_own_results() -> None:
    evaluator = Evaluator(trained_a_little(AlphaZeroNet(SMALL_NET)), "cpu")
    (planes_a, scalars_a), (planes_b, scalars_b) = random_compact(5, seed=1), random_compact(3, seed=2)
    (indices_a, counts_a), (indices_b, counts_b) = legal_batch(5, seed=3), legal_batch(3, seed=4)
    expected_a = [a.copy() for a in evaluator.evaluate_legal(planes_a, scalars_a, indices_a, counts_a)]
    expected_b = [b.copy() for b in evaluator.evaluate_legal(planes_b, scalars_b, indices_b, counts_b)]
    first = evaluator.submit_legal(planes_a, scalars_a, indices_a, counts_a, lane=0)
    second = evaluator.submit_legal(planes_b, scalars_b, indices_b, counts_b, lane=1)
    for pending, expected in ((second, expected_b), (first, expected_a)):
        got = pending.wait()
        assert all(np.array_equal(g, e) for g, e in zip(got, expected))
    assert evaluator.gpu_seconds == 0.0  # no CUDA events on the CPU


def test_evaluate_legal_refuses_bad_indices_and_counts() -> None:
    evaluator = Evaluator(AlphaZeroNet(SMALL_NET), "cpu")
    planes, scalars = random_compact(3)
    indices, counts = legal_batch(3, seed=6)
    indices[1, 0] = NUM_MOVES
    with pytest.raises(ValueError, match="legal move indices must lie in"):
        evaluator.evaluate_legal(planes, scalars, indices, counts)
    with pytest.raises(ValueError, match="legal_counts must lie in"):
        evaluator.evaluate_legal(planes, scalars, indices, np.full(3, 257, np.int32))
    with pytest.raises(ValueError, match="int32"):
        evaluator.evaluate_legal(planes, scalars, indices.astype(np.int64), counts)
    with pytest.raises(ValueError, match=r"\[>=3, W\]"):
        evaluator.evaluate_legal(planes, scalars, indices[:2], counts)
    legal, values = evaluator.evaluate_legal(planes[:0], scalars[:0], indices, counts)
    assert legal.shape == (0, 1) and values.shape == (0,)


def test_profile_legal_times_the_three_stages() -> None:
    evaluator = Evaluator(AlphaZeroNet(SMALL_NET), "cpu")
    indices, counts = legal_batch(4, seed=7)
    times = evaluator.profile_legal(*random_compact(4), indices, counts)
    assert set(times) == {"input", "forward", "output"} and all(t >= 0 for t in times.values())
    assert evaluator.pin((indices,))[0] is indices  # nothing to pin on the CPU


def test_input_expansion_constants_are_made_once_per_device() -> None:
    from alphazero.nn.planes import _constants_on

    assert _constants_on(torch.device("cpu"))[1] is _constants_on(torch.device("cpu"))[1]


def test_save_load_round_trip_gives_identical_outputs(tmp_path: Path) -> None:
    model = trained_a_little(AlphaZeroNet(dataclasses.replace(SMALL_NET, value_head="wdl")))
    save_model(tmp_path / "net.pt", model, step=42, note="hello")
    loaded, extra = load_model(tmp_path / "net.pt", "cpu")
    assert extra == {"step": 42, "note": "hello"}
    assert loaded.config == model.config and not loaded.training
    batch = random_compact(4)
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
            out = model(*compact_to_torch(*random_compact(2), "cpu"))
        assert out.policy_logits.shape == (2, NUM_MOVES)


def test_the_device_gather_and_the_host_gather_agree() -> None:
    from alphazero.nn.forward import gather_legal, gather_legal_numpy

    rng = np.random.default_rng(8)
    logits = rng.standard_normal((6, NUM_MOVES)).astype(np.float32)
    indices, counts = legal_batch(6, seed=9)
    width = int(counts.max())
    host = np.empty((6, width), np.float32)
    assert not gather_legal_numpy(logits, indices, counts, host)
    device, flag = gather_legal(torch.from_numpy(logits), torch.from_numpy(indices[:, :width]),
                                torch.from_numpy(counts))
    assert not bool(flag)
    for row, count in enumerate(counts):  # padding columns may differ; the search never reads them
        assert np.array_equal(device.numpy()[row, :count], host[row, :count])
        assert np.array_equal(host[row, :count], logits[row, indices[row, :count]])
    indices[2, counts[2] - 1] = -1
    assert gather_legal_numpy(logits, indices, counts, host)
    assert bool(gather_legal(torch.from_numpy(logits), torch.from_numpy(indices[:, :width]),
                             torch.from_numpy(counts))[1])
