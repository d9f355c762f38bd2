"""The replay store: positions' compact arrays in arrival order, in blocks, of which the newest are in view.

Only the compact arrays of a shard are kept (planes, scalars, the sparse
policy, value targets, root values, Stockfish's win probability after each
move where the shard has it; for held-out games, each position's game; where
the learner trains them, learner.game_targets': each position's next
position's row, its short-term value, and the plies left in its game).
Small shards are joined into blocks of about 1/32 of the view, so a batch
gathers from a few dozen arrays; a block leaves whole once none of it is in
view. learner.replay's window holds two stores: the training positions and the
held-out ones.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from alphazero.nn.planes import COMPACT_PLANES, NUM_SCALARS
from alphazero.store.shards import Shard, value_targets
from learner.batch import Batch
from learner.game_targets import NO_GAME_TARGETS, GameTargets, next_rows, plies_left, short_term_values

__all__ = ["Block", "Store", "arrays_outside_the_heap"]

_BLOCKS_PER_WINDOW = 32  # see Store
# The win probabilities after each move are kept in half precision: its rounding (under 0.0005 in [0, 1]) is
# well inside an action-value bin (1/128), and a window of labels holds about 30 of them a position.
_WINS_DTYPE = np.float16


def _no_wins() -> np.ndarray:
    return np.zeros(0, _WINS_DTYPE)


@dataclass(frozen=True)
class Block:
    """The compact arrays of some positions of the store; ``start`` is the number of row 0.

    ``game`` indexes ``games`` (the games' ids) for held-out blocks; training
    blocks leave both empty.
    """

    name: str
    start: int  # position number (over all positions that ever entered the store) of row 0
    planes: np.ndarray
    scalars: np.ndarray
    policy_offsets: np.ndarray
    policy_indices: np.ndarray
    policy_probs: np.ndarray
    results: np.ndarray  # value targets: int8 results, or float32 (alphazero.store.shards.value_targets)
    root_values: np.ndarray
    game: np.ndarray
    games: tuple[str, ...] = ()
    # Aligned with policy_indices: the mover's win probability after each move (NaN: none), or empty when no
    # position of the block has one (self-play's).
    policy_wins: np.ndarray = field(default_factory=_no_wins)
    # learner.game_targets' (empty when not kept): int32 [n] the row of each position's next position in this
    # block, -1 for none; float32 [n] each position's short-term value target; float32 [n] the plies left in each
    # position's game (NaN: none).
    next_row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    short_term: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    moves_left: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))

    @property
    def has_wins(self) -> bool:
        return len(self.policy_wins) > 0

    @property
    def has_next(self) -> bool:
        return len(self.next_row) > 0

    @property
    def has_short_term(self) -> bool:
        return len(self.short_term) > 0

    @property
    def has_moves_left(self) -> bool:
        return len(self.moves_left) > 0

    @property
    def end(self) -> int:
        return self.start + len(self.results)

    @classmethod
    def of(cls, name: str, start: int, shard: Shard, rows: np.ndarray, ids: Sequence[str] = (), *,
           wins: bool = True, targets: GameTargets = NO_GAME_TARGETS) -> Block:
        """Takes the samples ``rows`` (sorted indices) of ``shard``; with ``ids``, notes each one's game; with
        ``wins``, the win probability after each move where the shard has it; the game's ``targets``
        (learner.game_targets) of each: ``rows`` holds whole games, so a next position is among them. A row
        may repeat (policy surprise weighting, learner.surprise): each copy is a position of the block.

        Keeps only these arrays (the shard's others are freed with it); all
        rows take the shard's arrays as they are, a subset copies.
        """
        next_row, short_term, moves_left = _game_targets(shard, rows, targets)
        if len(rows) == len(shard) and np.array_equal(rows, np.arange(len(shard))):
            take: np.ndarray | slice = slice(None)
            offsets, entries = shard.policy_offsets, take
        else:
            take = rows
            lo, hi = shard.policy_offsets[rows], shard.policy_offsets[rows + 1]
            entries = np.repeat(lo, hi - lo) + _ranges(hi - lo)
            offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(hi - lo)])
        games: tuple[str, ...] = ()
        game = np.zeros(0, np.int32)
        if ids:
            used, inverse = np.unique(shard.game[rows], return_inverse=True)
            games, game = tuple(ids[g] for g in used), inverse.astype(np.int32)
        arrays = [np.ascontiguousarray(a) for a in (
            shard.planes[take], shard.scalars[take], offsets, shard.policy_indices[entries],
            shard.policy_probs[entries], value_targets(shard)[take], shard.root_values[take])]
        planes, scalars, offsets, indices, probs, results, root_values = arrays
        kept = _no_wins() if shard.policy_wins is None or not wins else shard.policy_wins[entries].astype(_WINS_DTYPE)
        return cls(name, start, planes, scalars, offsets, indices, probs, results, root_values, game, games,
                   kept, next_row, short_term, moves_left)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.planes, self.scalars, self.policy_offsets, self.policy_indices,
                                      self.policy_probs, self.results, self.root_values, self.game,
                                      self.policy_wins, self.next_row, self.short_term, self.moves_left))

    def wins_or_nan(self) -> np.ndarray:
        """Gets policy_wins, NaN for every move of a block without them."""
        return self.policy_wins if self.has_wins else np.full(len(self.policy_indices), np.nan, _WINS_DTYPE)

    @classmethod
    def merge(cls, blocks: Sequence[Block]) -> Block:
        """Joins consecutive blocks into one (their policy offsets and game indices renumbered)."""
        bases = np.cumsum([0] + [int(b.policy_offsets[-1]) for b in blocks[:-1]])
        offsets = [blocks[0].policy_offsets[:1]] + [b.policy_offsets[1:] + base for b, base in zip(blocks, bases)]
        game_bases = np.cumsum([0] + [len(b.games) for b in blocks[:-1]])
        return cls(
            blocks[-1].name, blocks[0].start,
            np.concatenate([b.planes for b in blocks]), np.concatenate([b.scalars for b in blocks]),
            np.concatenate(offsets), np.concatenate([b.policy_indices for b in blocks]),
            np.concatenate([b.policy_probs for b in blocks]), np.concatenate([b.results for b in blocks]),
            np.concatenate([b.root_values for b in blocks]),
            np.concatenate([b.game + base for b, base in zip(blocks, game_bases)]).astype(np.int32),
            tuple(game_id for b in blocks for game_id in b.games),
            np.concatenate([b.wins_or_nan() for b in blocks]) if any(b.has_wins for b in blocks) else _no_wins(),
            # (a store's blocks all keep the game's targets, or none does)
            np.concatenate([np.where(b.next_row >= 0, b.next_row + base, -1) for b, base in
                            zip(blocks, np.cumsum([0] + [len(b.results) for b in blocks[:-1]]))]).astype(np.int32)
            if all(b.has_next for b in blocks) else np.zeros(0, np.int32),
            np.concatenate([b.short_term for b in blocks]) if all(b.has_short_term for b in blocks)
            else np.zeros(0, np.float32),
            np.concatenate([b.moves_left for b in blocks]) if all(b.has_moves_left for b in blocks)
            else np.zeros(0, np.float32),
        )


def _game_targets(shard: Shard, rows: np.ndarray,
                  targets: GameTargets) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gets the rows' next-position rows among ``rows`` (int32, -1: none), short-term values (float32) and plies
    left (float32, NaN: none), each empty when ``targets`` leaves it out."""
    next_row, short_term, moves_left = np.zeros(0, np.int32), np.zeros(0, np.float32), np.zeros(0, np.float32)
    if targets.reply:
        following = next_rows(shard.game, shard.ply)[rows]
        position = np.full(len(shard), -1, np.int64)
        position[rows] = np.arange(len(rows))  # a sample's row in the block
        next_row = np.where(following >= 0, position[following], -1).astype(np.int32)
    if targets.short_term_plies > 0:
        short_term = np.ascontiguousarray(short_term_values(shard, targets.short_term_plies)[rows])
    if targets.moves_left:
        moves_left = np.ascontiguousarray(plies_left(shard)[rows])
    return next_row, short_term, moves_left


def _ranges(lengths: np.ndarray) -> np.ndarray:
    """Concatenated aranges [0..l0), [0..l1), ... for the lengths l."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    return np.arange(total, dtype=np.int64) - np.repeat(ends - lengths, lengths)


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


@functools.cache
def arrays_outside_the_heap() -> None:
    """Makes glibc give every allocation of 128 KiB or more its own mapping, returned to the system when freed.

    A shard's arrays (about 1 MB each) are freed when their block is merged
    into a bigger one; glibc's default raises its mmap threshold after the
    first such free, so later ones land on the heap, where the long-lived
    merged blocks pin them, and a large window's read holds far more memory
    than its arrays (EXPERIMENTS.md, "A stronger built-in network, the data").
    Elsewhere than glibc this does nothing.
    """
    try:
        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):
        pass


class Store:
    """Positions in arrival order, of which the newest ``capacity`` are in view.

    Small appends are joined into blocks of about capacity / 32 positions, so a
    batch gathers from a few dozen arrays, not thousands; a block leaves whole,
    so up to that many stale positions stay in memory.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.blocks: list[Block] = []
        self._block_target = max(1, capacity // _BLOCKS_PER_WINDOW)

    @property
    def total(self) -> int:
        """Gets the number of the position after the newest."""
        return self.blocks[-1].end if self.blocks else 0

    @property
    def first(self) -> int:
        """Gets the number of the oldest position in view."""
        return max(self.blocks[0].start if self.blocks else 0, self.total - self.capacity)

    def __len__(self) -> int:
        return self.total - self.first

    @property
    def nbytes(self) -> int:
        return sum(block.nbytes for block in self.blocks)

    def grow(self, capacity: int) -> None:
        """Widens the view to the newest ``capacity`` positions (never narrows it); blocks to come are sized for it."""
        if capacity > self.capacity:
            self.capacity = capacity
            self._block_target = max(1, capacity // _BLOCKS_PER_WINDOW)

    def append_block(self, block: Block | None) -> int:
        """Adds a block made by Block.of (its ``start`` is set here); returns its samples (0 for None)."""
        if block is None:
            return 0
        self.blocks.append(dataclasses.replace(block, start=self.total))
        self._join_small_blocks()
        return len(block.results)

    def _join_small_blocks(self) -> None:
        """Joins the newest run of small blocks into one once together they reach the block size."""
        run, size = 0, 0
        for block in reversed(self.blocks):
            if len(block.results) >= self._block_target:
                break
            run += 1
            size += len(block.results)
        if run > 1 and size >= self._block_target:
            self.blocks[-run:] = [Block.merge(self.blocks[-run:])]

    def evict(self) -> None:
        """Drops the blocks wholly out of view."""
        first = self.total - self.capacity
        drop = 0
        while drop < len(self.blocks) - 1 and self.blocks[drop].end <= first:
            drop += 1
        del self.blocks[:drop]

    def game_ids(self) -> set[str]:
        """Gets the ids of the games with a position in view (held-out stores only)."""
        first, ids = self.first, set[str]()
        for block in self.blocks:
            rows = block.game[max(0, first - block.start):]
            ids.update(block.games[g] for g in np.unique(rows))
        return ids

    def gather(self, numbers: np.ndarray) -> Batch:
        """Builds the batch of the positions numbered ``numbers`` (sorted, in view): their compact arrays and
        their moves sparse, as the blocks keep them (the dense targets are built on the training device)."""
        size = len(numbers)
        planes = np.empty((size, COMPACT_PLANES), np.uint64)
        scalars = np.empty((size, NUM_SCALARS), np.float32)
        z = np.empty(size, np.float32)
        q = np.empty(size, np.float32)
        starts = np.array([block.start for block in self.blocks], dtype=np.int64)
        owner = np.searchsorted(starts, numbers, side="right") - 1
        # numbers are sorted, so each block's positions are one slice of the batch.
        bounds = np.searchsorted(owner, np.arange(len(self.blocks) + 1))
        used = [b for b in range(len(self.blocks)) if bounds[b] < bounds[b + 1]]
        with_wins = any(self.blocks[b].has_wins for b in used)  # shards without a head have none
        reply = _ReplyParts() if any(self.blocks[b].has_next for b in used) else None
        short_term = np.empty(size, np.float32) if any(self.blocks[b].has_short_term for b in used) else None
        moves_left = np.empty(size, np.float32) if any(self.blocks[b].has_moves_left for b in used) else None
        counts, moves, shares, wins = [], [], [], []
        for b in used:
            block = self.blocks[b]
            lo_out, hi_out = int(bounds[b]), int(bounds[b + 1])
            rows = numbers[lo_out:hi_out] - block.start
            planes[lo_out:hi_out] = block.planes[rows]
            scalars[lo_out:hi_out] = block.scalars[rows]
            z[lo_out:hi_out] = block.results[rows]
            q[lo_out:hi_out] = block.root_values[rows]
            lo, hi = block.policy_offsets[rows], block.policy_offsets[rows + 1]
            entries = np.repeat(lo, hi - lo) + _ranges(hi - lo)
            counts.append(hi - lo)
            moves.append(block.policy_indices[entries])
            shares.append(block.policy_probs[entries])
            if with_wins:
                kept = block.policy_wins[entries] if block.has_wins else None
                wins.append(kept if kept is not None else np.full(len(entries), np.nan, _WINS_DTYPE))
            if reply is not None:
                reply.add(block, rows)
            if short_term is not None:
                short_term[lo_out:hi_out] = block.short_term[rows] if block.has_short_term else block.results[rows]
            if moves_left is not None:
                moves_left[lo_out:hi_out] = block.moves_left[rows] if block.has_moves_left else np.nan
        offsets = np.zeros(size + 1, np.int64)
        np.cumsum(_joined(counts, np.int64), out=offsets[1:])
        reply_offsets, reply_moves, reply_shares = reply.arrays(size) if reply is not None else (None, None, None)
        return Batch(planes, scalars, offsets, _joined(moves, np.int16), _joined(shares, np.float32), z, q,
                     _joined(wins, _WINS_DTYPE) if with_wins else None, reply_offsets=reply_offsets,
                     reply_moves=reply_moves, reply_shares=reply_shares, short_term=short_term,
                     moves_left=moves_left)


class _ReplyParts:
    """The reply targets of a batch as Store.gather collects them, block by block (learner.game_targets)."""

    def __init__(self) -> None:
        self.counts: list[np.ndarray] = []
        self.moves: list[np.ndarray] = []
        self.shares: list[np.ndarray] = []

    def add(self, block: Block, rows: np.ndarray) -> None:
        """Adds the next positions' moves and shares of the block's ``rows`` (none where a row has none)."""
        following = block.next_row[rows] if block.has_next else np.full(len(rows), -1, np.int32)
        has = following >= 0
        safe = np.where(has, following, 0)
        lo, hi = block.policy_offsets[safe], np.where(has, block.policy_offsets[safe + 1], block.policy_offsets[safe])
        entries = np.repeat(lo, hi - lo) + _ranges(hi - lo)
        self.counts.append(hi - lo)
        self.moves.append(block.policy_indices[entries])
        self.shares.append(block.policy_probs[entries])

    def arrays(self, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gets (reply_offsets int64 [size + 1], reply_moves int16, reply_shares float32)."""
        offsets = np.zeros(size + 1, np.int64)
        np.cumsum(_joined(self.counts, np.int64), out=offsets[1:])
        return offsets, _joined(self.moves, np.int16), _joined(self.shares, np.float32)


def _joined(parts: list[np.ndarray], dtype: type[np.generic]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype)
