"""Expands the compact network input (112 bitboards + 7 scalars) into 119 float planes.

The compact form is what search produces and shards store: per position,
``planes`` uint64[112] (bit ``8*row + col`` of plane ``p`` is cell ``[p, row, col]``)
and ``scalars`` float32[7] holding raw values (colour, full-move number,
castling rights, half-move clock). This module is the one place that knows how
raw scalars are scaled for the network (``SCALAR_SCALE``); see docs/encodings.md.

Two expansions give the same float32 [N, 119, 8, 8] tensor:

- ``expand_numpy``: on the CPU, by ``np.unpackbits`` on the bytes of the bitboards.
- ``expand_torch``: on the tensors' own device (the network's first step), by
  shift-and-mask on an int64 view of the bitboards.

Example::

    x = expand_numpy(planes, scalars)         # planes uint64 [N, 112], scalars float32 [N, 7]
    p, s = compact_to_torch(planes, scalars, torch.device("cuda"))
    y = expand_torch(p, s)                    # same values as x, on the GPU
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

HISTORY_STEPS = 8  # positions of history, newest first
PLANES_PER_STEP = 14  # us P N B R Q K, them P N B R Q K, seen once before, seen twice before
COMPACT_PLANES = HISTORY_STEPS * PLANES_PER_STEP  # 112 bitboards per position
NUM_SCALARS = 7  # colour, move count, 4 castling rights, no-progress count
INPUT_PLANES = COMPACT_PLANES + NUM_SCALARS  # 119 planes of 8x8 fed to the network

# Multiplies the raw scalars so that each lies in about [0, 1]: the full-move
# number rarely passes 256 (the ply limit is 512) and the half-move clock ends
# the game at 100.
SCALAR_SCALE = np.array([1.0, 1.0 / 256.0, 1.0, 1.0, 1.0, 1.0, 1.0 / 100.0], dtype=np.float32)
SCALAR_SCALE.setflags(write=False)

_SCALE_TUPLE = tuple(float(v) for v in SCALAR_SCALE)
# SCALAR_SCALE and the 64 bit shifts as tensors, one pair per device, made on
# the first expansion there: building them on every call copied a CPU tensor
# to the GPU inside the forward pass, which a CUDA graph cannot capture.
_DEVICE_CONSTANTS: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _check_compact_shapes(planes_shape: tuple[int, ...], scalars_shape: tuple[int, ...]) -> None:
    if len(planes_shape) != 2 or planes_shape[1] != COMPACT_PLANES:
        raise ValueError(f"planes must have shape (N, {COMPACT_PLANES}), got {tuple(planes_shape)}")
    if len(scalars_shape) != 2 or scalars_shape[1] != NUM_SCALARS:
        raise ValueError(f"scalars must have shape (N, {NUM_SCALARS}), got {tuple(scalars_shape)}")
    if planes_shape[0] != scalars_shape[0]:
        raise ValueError(f"planes and scalars hold different batch sizes: {planes_shape[0]} and {scalars_shape[0]}")


def check_compact_numpy(planes: np.ndarray, scalars: np.ndarray) -> None:
    """Checks that ``planes`` is uint64 (N, 112) and ``scalars`` float32 (N, 7).

    Raises:
        ValueError: a wrong type, dtype or shape; the message quotes what it got.
    """
    if not isinstance(planes, np.ndarray) or not isinstance(scalars, np.ndarray):
        raise ValueError(f"planes and scalars must be numpy arrays, got {type(planes).__name__} "
                         f"and {type(scalars).__name__}")
    if planes.dtype != np.uint64:
        raise ValueError(f"planes must be uint64 bitboards, got dtype {planes.dtype}")
    if scalars.dtype != np.float32:
        raise ValueError(f"scalars must be float32, got dtype {scalars.dtype}")
    _check_compact_shapes(planes.shape, scalars.shape)


def expand_numpy(planes: np.ndarray, scalars: np.ndarray) -> np.ndarray:
    """Expands compact positions into float32 input planes on the CPU.

    Args:
        planes: uint64 [N, 112] bitboards.
        scalars: float32 [N, 7] raw scalars.

    Returns:
        float32 [N, 119, 8, 8]: plane p < 112 at [row, col] is bit 8*row + col of
        planes[:, p]; plane 112 + j is scalars[:, j] * SCALAR_SCALE[j] everywhere.

    Raises:
        ValueError: wrong dtypes or shapes.
    """
    check_compact_numpy(planes, scalars)
    n = planes.shape[0]
    # Little-endian bytes put bit 8*row + col in byte `row` at bit `col`, so
    # unpacking each byte least significant bit first yields row-major cells.
    as_bytes = np.ascontiguousarray(planes, dtype="<u8").view(np.uint8)
    bits = np.unpackbits(as_bytes, axis=1, bitorder="little")
    out = np.empty((n, INPUT_PLANES, 8, 8), dtype=np.float32)
    out[:, :COMPACT_PLANES] = bits.reshape(n, COMPACT_PLANES, 8, 8)
    out[:, COMPACT_PLANES:] = (scalars * SCALAR_SCALE)[:, :, None, None]
    return out


def _check_compact_torch(planes: torch.Tensor, scalars: torch.Tensor) -> None:
    if not isinstance(planes, torch.Tensor) or not isinstance(scalars, torch.Tensor):
        raise ValueError(f"planes and scalars must be torch tensors, got {type(planes).__name__} "
                         f"and {type(scalars).__name__}")
    if planes.dtype != torch.int64:
        raise ValueError(f"planes must be int64 (the bits of the uint64 bitboards), got {planes.dtype}")
    if scalars.dtype != torch.float32:
        raise ValueError(f"scalars must be float32, got {scalars.dtype}")
    if planes.device != scalars.device:
        raise ValueError(f"planes are on {planes.device} but scalars on {scalars.device}")
    _check_compact_shapes(tuple(planes.shape), tuple(scalars.shape))


def _constants_on(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Gets the bit shifts (int64 [64]) and SCALAR_SCALE (float32 [7]) on ``device``, cached."""
    constants = _DEVICE_CONSTANTS.get(device)
    if constants is None:
        # Made outside inference mode, so that training may use them too.
        with torch.inference_mode(False):
            constants = (torch.arange(64, dtype=torch.int64).to(device),
                         torch.tensor(_SCALE_TUPLE, dtype=torch.float32).to(device))
        _DEVICE_CONSTANTS[device] = constants
    return constants


def make_device_constants(device: torch.device) -> None:
    """Makes expand_torch's constants on ``device`` now, before a CUDA graph's capture or torch.compile's
    trace reads them: made inside a trace, their cache's change forces a second compilation."""
    _constants_on(torch.empty(0, device=device).device)  # as expand_torch looks it up: 'cuda:0', not 'cuda'


def expand_torch(planes: torch.Tensor, scalars: torch.Tensor) -> torch.Tensor:
    """Expands compact positions into float32 input planes on the tensors' device.

    Args:
        planes: int64 [N, 112], the uint64 bitboards reinterpreted (see compact_to_torch).
        scalars: float32 [N, 7] raw scalars, on the same device.

    Returns:
        float32 [N, 119, 8, 8], equal to expand_numpy of the same positions.

    Raises:
        ValueError: wrong dtypes, shapes or mismatched devices.
    """
    _check_compact_torch(planes, scalars)
    n = planes.shape[0]
    shifts, scale = _constants_on(planes.device)
    # >> on int64 is arithmetic: bit 63 (a negative number) shifts in ones, but
    # the mask keeps only the lowest bit, so every bit comes out right.
    bits = (planes.unsqueeze(-1) >> shifts) & 1
    board = bits.to(torch.float32).reshape(n, COMPACT_PLANES, 8, 8)
    constant = (scalars * scale)[:, :, None, None].expand(n, NUM_SCALARS, 8, 8)
    return torch.cat([board, constant], dim=1)


def compact_to_torch(
    planes_np: np.ndarray, scalars_np: np.ndarray, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Moves compact numpy positions to ``device`` as (int64 planes, float32 scalars) tensors.

    The uint64 bitboards are reinterpreted as int64 without a copy (``.view``);
    a copy is made only when the arrays are read-only or not contiguous (torch
    cannot share those). The transfer is asynchronous only from pinned memory to
    CUDA, where it is safe; the caller must keep the arrays unchanged until the
    tensors have been used in that case.

    Raises:
        ValueError: wrong dtypes or shapes.
    """
    check_compact_numpy(planes_np, scalars_np)
    device = torch.device(device)
    tensors = []
    for array in (planes_np.view(np.int64), scalars_np):
        if not array.flags.c_contiguous or not array.flags.writeable:
            array = np.array(array, order="C")  # torch.from_numpy needs writeable, contiguous memory
        tensor = torch.from_numpy(array)
        non_blocking = device.type == "cuda" and tensor.is_pinned()
        tensors.append(tensor.to(device, non_blocking=non_blocking))
    return tensors[0], tensors[1]


def encode_position(fen: str | None = None, moves: Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Encodes the position after UCI ``moves`` from ``fen`` (default: the start), with that history.

    Returns (planes uint64 [1, 112], scalars float32 [1, 7]), the compact form.

    Raises:
        mcts_ext.InvalidFenError / IllegalMoveError: a bad FEN or move.
    """
    from mcts_ext import STARTING_FEN, Board
    from mcts_ext.encode import encode_board, new_batch

    board = Board.from_moves(list(moves), fen or STARTING_FEN, ply_limit=None)
    planes, scalars = new_batch(1)
    encode_board(board, planes, scalars)
    return planes, scalars
