"""The training batch: B positions as numpy arrays, each position's moves sparse, as the shards keep them.

Each position lists its legal moves (entries ``offsets[r]:offsets[r + 1]``
of ``moves``), with the search's visit share of each (``shares``, 0 for an
unvisited move) and, for Stockfish's labels, the mover's win probability
after it (``wins``). The dense [B, 4672] targets are built on the training
device (learner.batch_device), not here: the dense properties below are for
callers that read a batch (tests, probes), never for training (EXPERIMENTS.md,
"The learner's targets sparse on the device, a prefetch thread").

Where the learner trains them, a batch also carries learner.game_targets'
targets: each position's reply target, the next position's moves and visit
shares listed the same way (``reply_offsets``, ``reply_moves``,
``reply_shares``; a position without one lists none), its short-term
value target (``short_term``) and the plies left in its game
(``moves_left``, NaN where it has none).

The replay window (learner.replay) gathers batches; learner.batch_device stages
them for the device and scatters their targets there.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from alphazero.chess.moves import NUM_MOVES

__all__ = ["Batch", "concatenate_batches"]


@dataclass(frozen=True)
class Batch:
    """One training batch of B positions, as numpy arrays; E entries, one per legal move of each position.

    The moves of a position are distinct (its legal moves), so each dense
    target cell is written at most once.
    """

    planes: np.ndarray  # uint64 [B, 112] compact bitboards
    scalars: np.ndarray  # float32 [B, 7] raw scalars
    offsets: np.ndarray  # int64 [B + 1]: position r's moves are entries offsets[r]:offsets[r + 1]
    moves: np.ndarray  # integer [E] (int16 from shards): the policy index of each legal move
    shares: np.ndarray  # float32 [E] the search's visit share of each move (0: not visited)
    z: np.ndarray  # float32 [B] the value target for the side to move: a result 1, 0, -1 or a value; NaN: none
    q: np.ndarray | None = None  # float32 [B] the search's root value for the side to move (None: unknown)
    # float16 or float32 [E] the mover's win probability after each move (the shards' policy_wins: Stockfish
    # labels', or self-play's search values where its network has the head), NaN where there is none; None when
    # no position of the batch has one, as if all were NaN.
    wins: np.ndarray | None = None
    # The next position's legal moves and visit shares (the reply target, learner.game_targets), listed as moves
    # and shares are: position r's are entries reply_offsets[r]:reply_offsets[r + 1] (none: no target); all
    # three None when the batch carries no reply targets.
    reply_offsets: np.ndarray | None = None  # int64 [B + 1]
    reply_moves: np.ndarray | None = None  # integer [R], in the next position's mover's frame
    reply_shares: np.ndarray | None = None  # float32 [R]
    short_term: np.ndarray | None = None  # float32 [B] the short-term value target (None: not carried)
    moves_left: np.ndarray | None = None  # float32 [B] the plies left in the game, NaN: none (None: not carried)

    def __len__(self) -> int:
        return len(self.z)

    @property
    def rows(self) -> np.ndarray:
        """Gets the batch row of each entry (int64 [E])."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.offsets))

    # Cached: a test reads them row by row. (functools.cached_property writes the instance's __dict__, which a
    # frozen dataclass allows.)
    @functools.cached_property
    def policy(self) -> np.ndarray:
        """Gets the dense visit shares, float32 [B, 4672] (zero off the legal moves)."""
        return _dense(self, self.shares, np.float32, 0)

    @functools.cached_property
    def legal(self) -> np.ndarray:
        """Gets the dense legal-move mask, bool [B, 4672]."""
        return _dense(self, np.ones(len(self.moves), np.bool_), np.bool_, False)

    @property
    def reply_rows(self) -> np.ndarray:
        """Gets the batch row of each reply entry (int64 [R]; empty without reply targets)."""
        if self.reply_offsets is None:
            return np.zeros(0, np.int64)
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.reply_offsets))

    @functools.cached_property
    def action_values(self) -> np.ndarray | None:
        """Gets the dense win probabilities, float32 [B, 4672], NaN where none; None without ``wins``."""
        return None if self.wins is None else _dense(self, self.wins, np.float32, np.nan)


def _dense(batch: Batch, values: np.ndarray, dtype: type[np.generic], fill: float) -> np.ndarray:
    out: np.ndarray = np.full((len(batch), NUM_MOVES), fill, dtype)
    out[batch.rows, batch.moves.astype(np.int64)] = values
    return out


def concatenate_batches(first: Batch, second: Batch) -> Batch:
    """Joins two batches, rows of ``first`` first (root values kept when both have them; win probabilities when
    either has them, NaN for the other's moves)."""
    def joined(name: str) -> np.ndarray:
        return np.concatenate([getattr(first, name), getattr(second, name)])

    offsets = np.concatenate([first.offsets, second.offsets[1:] + first.offsets[-1]])
    q = None if first.q is None or second.q is None else np.concatenate([first.q, second.q])
    wins = None
    if first.wins is not None or second.wins is not None:
        wins = np.concatenate([batch.wins if batch.wins is not None else np.full(len(batch.moves), np.nan, np.float16)
                               for batch in (first, second)])
    return Batch(joined("planes"), joined("scalars"), offsets, joined("moves"), joined("shares"), joined("z"), q,
                 wins, *_joined_reply(first, second), _joined_short_term(first, second),
                 _joined_moves_left(first, second))


def _joined_reply(first: Batch, second: Batch) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """Joins the reply targets of two batches (a batch without them counts as one whose positions have none)."""
    if first.reply_offsets is None and second.reply_offsets is None:
        return None, None, None
    parts = [(b.reply_offsets, b.reply_moves, b.reply_shares) if b.reply_offsets is not None
             else (np.zeros(len(b) + 1, np.int64), np.zeros(0, np.int16), np.zeros(0, np.float32))
             for b in (first, second)]
    (offsets_1, moves_1, shares_1), (offsets_2, moves_2, shares_2) = parts
    return (np.concatenate([offsets_1, offsets_2[1:] + offsets_1[-1]]), np.concatenate([moves_1, moves_2]),
            np.concatenate([shares_1, shares_2]))


def _joined_short_term(first: Batch, second: Batch) -> np.ndarray | None:
    """Joins the short-term value targets of two batches (a batch without them takes its value targets)."""
    if first.short_term is None and second.short_term is None:
        return None
    return np.concatenate([np.asarray(b.short_term if b.short_term is not None else b.z, np.float32)
                           for b in (first, second)])


def _joined_moves_left(first: Batch, second: Batch) -> np.ndarray | None:
    """Joins the moves-left targets of two batches (a batch without them counts as one whose positions have none)."""
    if first.moves_left is None and second.moves_left is None:
        return None
    return np.concatenate([np.asarray(b.moves_left, np.float32) if b.moves_left is not None
                           else np.full(len(b), np.nan, np.float32) for b in (first, second)])
