"""Plane expansion: numpy and torch agree, bits land where SPEC.md says, inputs are checked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alphazero.nn.planes import (
    COMPACT_PLANES,
    INPUT_PLANES,
    NUM_SCALARS,
    SCALAR_SCALE,
    compact_to_torch,
    expand_numpy,
    expand_torch,
)


def random_positions(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    planes = rng.integers(0, np.iinfo(np.uint64).max, size=(n, COMPACT_PLANES), dtype=np.uint64, endpoint=True)
    planes[0, 0] = np.uint64(1) << np.uint64(63)  # bit 63 alone: a negative int64
    planes[0, 1] = np.iinfo(np.uint64).max  # every bit, -1 as int64
    scalars = rng.integers(0, 200, size=(n, NUM_SCALARS)).astype(np.float32)
    return planes, scalars


def test_constants() -> None:
    assert (COMPACT_PLANES, NUM_SCALARS, INPUT_PLANES) == (112, 7, 119)
    assert SCALAR_SCALE.dtype == np.float32
    np.testing.assert_allclose(SCALAR_SCALE, [1, 1 / 256, 1, 1, 1, 1, 1 / 100])


def test_numpy_and_torch_agree_including_bit_63() -> None:
    planes, scalars = random_positions(17)
    expected = expand_numpy(planes, scalars)
    got = expand_torch(*compact_to_torch(planes, scalars, "cpu"))
    assert got.dtype == torch.float32 and got.shape == (17, INPUT_PLANES, 8, 8)
    np.testing.assert_array_equal(got.numpy(), expected)
    assert expected[0, 0, 7, 7] == 1 and expected[0, 0].sum() == 1
    assert expected[0, 1].sum() == 64


@pytest.mark.parametrize("square", [0, 1, 7, 8, 27, 56, 62, 63])
def test_bit_lands_at_row_and_column(square: int) -> None:
    planes = np.zeros((1, COMPACT_PLANES), np.uint64)
    planes[0, 5] = np.uint64(1) << np.uint64(square)
    scalars = np.zeros((1, NUM_SCALARS), np.float32)
    for expanded in (expand_numpy(planes, scalars), expand_torch(*compact_to_torch(planes, scalars, "cpu")).numpy()):
        row, col = divmod(square, 8)
        assert expanded[0, 5, row, col] == 1
        assert expanded.sum() == 1


def test_scalars_are_scaled_and_constant_over_the_board() -> None:
    planes = np.zeros((2, COMPACT_PLANES), np.uint64)
    scalars = np.array([[1, 40, 1, 0, 1, 0, 50], [0, 256, 0, 1, 0, 1, 100]], np.float32)
    for expanded in (expand_numpy(planes, scalars), expand_torch(*compact_to_torch(planes, scalars, "cpu")).numpy()):
        constant = expanded[:, COMPACT_PLANES:]
        expected = np.broadcast_to((scalars * SCALAR_SCALE)[:, :, None, None], constant.shape)
        np.testing.assert_allclose(constant, expected)
        np.testing.assert_allclose(constant[1, :, 3, 4], [0, 1, 0, 1, 0, 1, 1])


def test_compact_to_torch_views_without_copy_and_accepts_read_only() -> None:
    planes, scalars = random_positions(3)
    planes_t, scalars_t = compact_to_torch(planes, scalars, "cpu")
    assert planes_t.dtype == torch.int64 and scalars_t.dtype == torch.float32
    assert planes_t.data_ptr() == planes.ctypes.data  # zero-copy view of the bitboards
    planes.setflags(write=False)
    copied, _ = compact_to_torch(planes, scalars, "cpu")
    np.testing.assert_array_equal(copied.numpy().view(np.uint64), planes)


def test_empty_batch() -> None:
    planes = np.zeros((0, COMPACT_PLANES), np.uint64)
    scalars = np.zeros((0, NUM_SCALARS), np.float32)
    assert expand_numpy(planes, scalars).shape == (0, INPUT_PLANES, 8, 8)
    assert expand_torch(*compact_to_torch(planes, scalars, "cpu")).shape == (0, INPUT_PLANES, 8, 8)


@pytest.mark.parametrize(
    ("planes", "scalars", "message"),
    [
        (np.zeros((2, 111), np.uint64), np.zeros((2, 7), np.float32), "planes must have shape"),
        (np.zeros((112,), np.uint64), np.zeros((1, 7), np.float32), "planes must have shape"),
        (np.zeros((2, 112), np.uint64), np.zeros((2, 8), np.float32), "scalars must have shape"),
        (np.zeros((2, 112), np.uint64), np.zeros((3, 7), np.float32), "different batch sizes"),
        (np.zeros((2, 112), np.int64), np.zeros((2, 7), np.float32), "uint64"),
        (np.zeros((2, 112), np.uint64), np.zeros((2, 7), np.float64), "float32"),
    ],
)
def test_bad_inputs_raise(planes: np.ndarray, scalars: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand_numpy(planes, scalars)
    with pytest.raises(ValueError, match=message):
        compact_to_torch(planes, scalars, "cpu")


def test_torch_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="int64"):
        expand_torch(torch.zeros(2, 112, dtype=torch.int32), torch.zeros(2, 7))
    with pytest.raises(ValueError, match="planes must have shape"):
        expand_torch(torch.zeros(2, 100, dtype=torch.int64), torch.zeros(2, 7))
    with pytest.raises(ValueError, match="float32"):
        expand_torch(torch.zeros(2, 112, dtype=torch.int64), torch.zeros(2, 7, dtype=torch.float64))
