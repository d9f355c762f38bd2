"""A batch on its way to the training device: staged on the host, its dense targets scattered on the device.

The replay window's batches keep each position's moves sparse (learner.batch).
``stage`` turns one into host tensors: the compact positions, each move's
flat index row * 4672 + move and visit share, and the action-value targets
(row, move, label) of the moves that have a win probability, which the
action-value loss takes as they are (NaN never reaches the device). On CUDA
they go into pinned memory, so that ``StagedBatch.to`` copies them without
blocking. On the device the [B, 4672] visit shares and legal-move mask are
zeros with the entries scattered in: a few hundred KB cross the bus instead of
B x 4672 x 5 bytes (EXPERIMENTS.md, "The learner's targets sparse on
the device, a prefetch thread"); on a CPU, whose memory is the host's, numpy
builds them (``scattered``). The learner stages on its prefetch thread
(learner.feed); ``on_device`` takes a batch in any of the three forms. A
batch's reply targets (learner.game_targets) travel and are scattered the
same way (DeviceBatch.reply), its short-term value and moves-left targets
as z does.

Example::

    staged = stage(batch, pin=pins(device))    # host tensors (pinned on CUDA)
    tensors = staged.to(device)                # DeviceBatch: planes, scalars, policy, legal, z, q, action values
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from alphazero.chess.moves import NUM_MOVES
from alphazero.nn.planes import check_compact_numpy
from learner.batch import Batch

__all__ = [
    "ActionValueTargets", "DeviceBatch", "ReplyTargets", "StagedBatch", "action_value_triples", "on_device", "pins",
    "scattered", "stage",
]


class ActionValueTargets(NamedTuple):
    """The moves with a win probability: rows int64 [M], moves int64 [M], labels float32 [M] clipped to [0, 1]."""

    rows: torch.Tensor
    moves: torch.Tensor
    labels: torch.Tensor


class ReplyTargets(NamedTuple):
    """The reply targets on the device (learner.game_targets): the next position's visit shares and legal moves,
    zero (False) in the rows without a target, and which rows have one."""

    policy: torch.Tensor  # float32 [B, 4672]
    legal: torch.Tensor  # bool [B, 4672]
    has: torch.Tensor  # bool [B]


class DeviceBatch(NamedTuple):
    """A batch on the training device (a tuple: planes and scalars first, as the network takes them).

    ``len()`` of it counts its fields, as of any tuple: ``size`` counts its positions.
    """

    planes: torch.Tensor  # int64 [B, 112] compact bitboards
    scalars: torch.Tensor  # float32 [B, 7]
    policy: torch.Tensor  # float32 [B, 4672] visit shares (zero off the legal moves)
    legal: torch.Tensor  # bool [B, 4672]
    z: torch.Tensor  # float32 [B] value targets, NaN: none
    q: torch.Tensor | None  # float32 [B] root values (None: unknown)
    action_values: ActionValueTargets | None  # None: no position of the batch has a win probability
    reply: ReplyTargets | None = None  # None: the batch carries no reply targets
    short_term: torch.Tensor | None = None  # float32 [B] short-term value targets (None: not carried)
    moves_left: torch.Tensor | None = None  # float32 [B] plies left in the game, NaN: none (None: not carried)

    @property
    def size(self) -> int:
        return int(self.planes.shape[0])


@dataclass(frozen=True)
class StagedBatch:
    """A batch's host tensors (pinned on CUDA), ready to copy to the device."""

    planes: torch.Tensor  # int64 [B, 112]
    scalars: torch.Tensor  # float32 [B, 7]
    flat: torch.Tensor  # int64 [E]: row * 4672 + move of each legal move
    shares: torch.Tensor  # float32 [E]
    z: torch.Tensor  # float32 [B]
    q: torch.Tensor | None  # float32 [B]
    action_values: ActionValueTargets | None  # on the host
    reply_flat: torch.Tensor | None = None  # int64 [R]: row * 4672 + move of each reply entry (None: no targets)
    reply_shares: torch.Tensor | None = None  # float32 [R]
    reply_has: torch.Tensor | None = None  # bool [B]: the rows with a reply target
    short_term: torch.Tensor | None = None  # float32 [B]
    moves_left: torch.Tensor | None = None  # float32 [B]

    def __len__(self) -> int:
        return int(self.planes.shape[0])

    def to(self, device: torch.device) -> DeviceBatch:
        """Copies the tensors to ``device`` (without blocking from pinned memory) and scatters the dense targets.

        The pinned blocks are not reused before their copy is done (torch's
        caching host allocator records the copy's stream), so the staged
        batch may be dropped as soon as this returns.
        """
        def moved(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.to(device, non_blocking=tensor.is_pinned())

        cells = len(self) * NUM_MOVES
        flat = moved(self.flat)
        host = device.type == "cpu"
        policy = scattered(cells, flat, moved(self.shares), host=host)
        legal = scattered(cells, flat, None, host=host)
        targets = None if self.action_values is None else ActionValueTargets(*map(moved, self.action_values))
        reply = None
        if self.reply_flat is not None and self.reply_shares is not None and self.reply_has is not None:
            reply_flat = moved(self.reply_flat)
            reply = ReplyTargets(scattered(cells, reply_flat, moved(self.reply_shares), host=host).view(len(self), -1),
                                 scattered(cells, reply_flat, None, host=host).view(len(self), -1),
                                 moved(self.reply_has))
        return DeviceBatch(moved(self.planes), moved(self.scalars), policy.view(len(self), NUM_MOVES),
                           legal.view(len(self), NUM_MOVES), moved(self.z),
                           None if self.q is None else moved(self.q), targets, reply,
                           None if self.short_term is None else moved(self.short_term),
                           None if self.moves_left is None else moved(self.moves_left))


def scattered(cells: int, flat: torch.Tensor, values: torch.Tensor | None, *, host: bool) -> torch.Tensor:
    """Gets zeros [cells] (float32; bool without ``values``) with ``values`` (True) at ``flat``, on flat's
    device: by numpy with ``host`` (flat on the CPU), else by torch's scatter_.

    On a CPU the device is the host, and numpy's zeros are calloc's pages,
    zeroed by the kernel as they are first written; torch.zeros writes every
    byte of a fresh mapping, several times slower at these sizes (the CPU has
    no caching allocator to reuse one: EXPERIMENTS.md, "The
    learner's targets sparse on the device, a prefetch thread").
    """
    if host:
        out: np.ndarray = np.zeros(cells, np.float32 if values is not None else np.bool_)
        out[flat.numpy()] = values.numpy() if values is not None else True
        return torch.from_numpy(out)
    if values is None:
        return torch.zeros(cells, dtype=torch.bool, device=flat.device).scatter_(0, flat, True)
    return torch.zeros(cells, dtype=torch.float32, device=flat.device).scatter_(0, flat, values)


def pins(device: torch.device) -> bool:
    """Checks whether batches for ``device`` are staged in pinned memory: on CUDA only (a CPU build of torch
    cannot pin, and a CPU device reads the host arrays where they are)."""
    return device.type == "cuda" and torch.cuda.is_available()


def _host(array: np.ndarray, pin: bool) -> torch.Tensor:
    array = np.ascontiguousarray(array)
    if not array.flags.writeable:  # torch.from_numpy needs writeable memory
        array = array.copy()
    tensor = torch.from_numpy(array)
    return tensor.pin_memory() if pin else tensor


def action_value_triples(batch: Batch, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Picks the moves with a win probability: (rows int64 [M], moves int64 [M], labels float32 [M] clipped to
    [0, 1]) in row-major order, as np.nonzero over the dense array orders them (so that the loss sums them in
    the same order); None for a batch without ``wins``."""
    if batch.wins is None:
        return None
    finite = np.isfinite(batch.wins)
    cells, labels = flat[finite], batch.wins[finite].astype(np.float32)
    if len(cells) > 1 and not bool(np.all(cells[1:] > cells[:-1])):  # (a shard's moves need not be sorted)
        order = np.argsort(cells, kind="stable")
        cells, labels = cells[order], labels[order]
    return cells // NUM_MOVES, cells % NUM_MOVES, np.clip(labels, 0.0, 1.0)


def stage(batch: Batch, *, pin: bool = False) -> StagedBatch:
    """Turns a batch into host tensors, in pinned memory with ``pin`` (see ``pins``).

    Raises:
        ValueError: the planes or scalars have the wrong dtype or shape.
    """
    check_compact_numpy(batch.planes, batch.scalars)
    flat = batch.rows * NUM_MOVES + batch.moves.astype(np.int64)
    triples = action_value_triples(batch, flat)
    targets = None if triples is None else ActionValueTargets(*(_host(a, pin) for a in triples))
    q = None if batch.q is None else _host(np.asarray(batch.q, np.float32), pin)
    staged = StagedBatch(_host(batch.planes.view(np.int64), pin), _host(batch.scalars, pin), _host(flat, pin),
                         _host(np.asarray(batch.shares, np.float32), pin), _host(np.asarray(batch.z, np.float32), pin),
                         q, targets)
    if batch.short_term is not None:
        staged = dataclasses.replace(staged, short_term=_host(np.asarray(batch.short_term, np.float32), pin))
    if batch.moves_left is not None:
        staged = dataclasses.replace(staged, moves_left=_host(np.asarray(batch.moves_left, np.float32), pin))
    if batch.reply_offsets is not None and batch.reply_moves is not None and batch.reply_shares is not None:
        reply_flat = batch.reply_rows * NUM_MOVES + batch.reply_moves.astype(np.int64)
        staged = dataclasses.replace(staged, reply_flat=_host(reply_flat, pin),
                                     reply_shares=_host(np.asarray(batch.reply_shares, np.float32), pin),
                                     reply_has=_host(np.diff(batch.reply_offsets) > 0, pin))
    return staged


def on_device(batch: Batch | StagedBatch | DeviceBatch, device: torch.device) -> DeviceBatch:
    """Gets a batch on ``device``, staging (without pinning) and copying it as far as it still needs."""
    if isinstance(batch, DeviceBatch):
        return batch
    staged = batch if isinstance(batch, StagedBatch) else stage(batch)
    return staged.to(device)
