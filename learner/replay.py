"""The replay window: the newest self-play positions, sampled uniformly for training.

Self-play writes shard files into ``run/selfplay/`` (alphazero.store.shards); their
names start with the write time, so sorting them sorts them by age. The window:

- holds the newest ``window_positions`` positions, in arrival order; or, given
  ``window_size`` (alphazero.config.LearnerConfig.window_size: KataGo's
  power-law window), the newest ``window_size(positions_added)`` of them, a
  window that starts at ``min_positions`` and grows with the positions that
  ever entered it (never shrinking) up to ``window_positions``. Only the
  compact arrays are kept (planes, scalars, the sparse policy, results: under
  1 KB a position; Stockfish labels' win probability after each move, in half
  precision, where a shard has it), and batches keep them sparse: the dense
  targets are built on the training device (learner.batch_device). Small shards are
  joined into blocks of about 1/32 of the window, so a batch gathers from a
  few dozen arrays; the oldest block may be partly outside the window (never
  sampled there) and is dropped once none of it is inside.
- remembers every shard name it has seen, so a scan only reads new names.
  Among new names it reads the newest first and stops once they alone fill the
  window (a growing one as large as the positions read make it: without a
  restored state it starts at ``min_positions``): a learner that fell behind
  skips old data (``skipped_shards``) instead of reading files it would evict
  at once.
- skips a shard that cannot be read, logs it once and counts it
  (``corrupt_shards``); the name is never retried.
- enforces a reuse cap: at most ``max_sample_reuse`` samples may be drawn per
  position that ever entered the window (``positions_added``). A learner ahead
  of self-play gets None from ``sample`` and waits for new shards, instead of
  overfitting the few games there are. ``max_sample_reuse`` <= 0 means no cap.

- builds, where asked (``targets``, learner.game_targets.GameTargets), each
  position's targets from its game as its shard enters: the next position's
  row (the reply target), the short-term value target and the plies left.
- holds out a share of the games (``validation_share``, by a hash of each
  game's id: ``is_validation_game``): their positions never enter the window,
  and the newest ``validation_positions`` of them form the validation set
  (``validation_batches``). The split is a pure function of the id, so a
  restarted learner holds out the same games; older shards are read for their
  held-out games (up to a few windows back) so that its validation set is the
  one it had.

``sample`` never blocks: it returns None and ``waiting_reason`` says why (too
few positions, or the reuse cap). The training loop does the waiting.

The counters and the sampler's generator are plain data (``state``), saved in
checkpoints; ``restore`` puts them back before the first scan, so positions of
shards seen before a restart are not counted twice.

Example::

    window = ReplayWindow(run.selfplay, window_positions=100_000, max_sample_reuse=4.0, seed=0)
    window.refresh()
    batch = window.sample(256)        # a Batch of numpy arrays, or None
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from alphazero.store.rundir import is_temporary
from alphazero.store.shards import SHARD_SUFFIX, Shard, ShardError, game_ids, read_shard
from learner.batch import Batch, concatenate_batches
from learner.game_targets import NO_GAME_TARGETS, GameTargets
from learner.replay_store import Block, Store, arrays_outside_the_heap
from learner.surprise import copies, frequency_weights, shard_rng

__all__ = [
    "Batch", "GameTargets", "ReplayWindow", "SamplerState", "WAIT_POSITIONS", "WAIT_REUSE", "concatenate_batches",
    "is_validation_game",
]

log = logging.getLogger(__name__)

WAIT_POSITIONS = "positions"  # waiting_reason: fewer positions than min_positions
WAIT_REUSE = "reuse"  # waiting_reason: the reuse cap is reached
_VALIDATION_LOOKBACK = 4  # windows' worth of shards read back for held-out games (see refresh)


def is_validation_game(game_id: str, share: float) -> bool:
    """Checks whether a game is held out of training: sha256 of its id, read as a fraction, below ``share``.

    A pure function of the id, so every process and every restart splits the
    same way.
    """
    digest = hashlib.sha256(game_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < share


@dataclass(frozen=True)
class SamplerState:
    """The training sampler's generator state and the samples drawn by then (ReplayWindow.sampler_state)."""

    rng: Mapping[str, Any]
    drawn: int


@dataclass(frozen=True)
class _Read:
    """What refresh keeps of a shard it read until it appends it: the stores' blocks, not the shard."""

    name: str
    train: bool                 # whether its training games enter the window
    held_out: Block | None      # its held-out games' samples (None: none)
    training: Block | None      # the others' (None: none, or not wanted)


def _scan_names(directory: Path) -> list[str]:
    """Lists the complete shard names in ``directory``, oldest first (no stat per file: scandir's types)."""
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries
                     if e.name.endswith(SHARD_SUFFIX) and not is_temporary(e.name) and e.is_file()]
    except FileNotFoundError:
        return []
    return sorted(names)


class ReplayWindow:
    """The newest ``window_positions`` self-play positions of a folder of shards, and the held-out games.

    Args:
        directory: the folder self-play writes shards into (``run.selfplay``).
        window_positions: the most positions sampled from (the newest).
        max_sample_reuse: the most samples drawn per position that ever
            entered the window; <= 0 for no cap.
        min_positions: ``sample`` returns None while the window holds fewer.
        window_size: the window's size once n positions entered it
            (LearnerConfig.window_size), kept within [min_positions,
            window_positions] and never shrinking; None: window_positions
            from the start.
        seed: seeds the sampler's generator (``restore`` replaces its state).
        scan_interval_s: ``refresh`` lists the folder at most this often
            unless forced.
        validation_share: the share of games held out (``is_validation_game``):
            their positions never enter the window.
        validation_positions: the newest held-out positions kept.
        action_values: keep the win probability after each move of the shards
            that have it and give batches Batch.action_values; False (for a
            network without an action-value head) keeps neither.
        targets: the targets built from each position's game
            (learner.game_targets; none by default); held-out positions get
            the short-term value alone (validation's value target).
        surprise_share: policy surprise weighting (learner.surprise): each
            training position of a shard with ``policy_surprise`` enters the
            window as many times as its frequency weight draws (this share of
            each game's weight by surprise); 0 (default): once. A position
            drawn 0 times is no reply target either.

    Raises:
        ValueError: window_positions or validation_positions < 1.
    """

    def __init__(self, directory: str | os.PathLike[str], *, window_positions: int, max_sample_reuse: float,
                 min_positions: int = 1, window_size: Callable[[int], int] | None = None, seed: int = 0,
                 scan_interval_s: float = 1.0, validation_share: float = 0.0,
                 validation_positions: int = 50_000, action_values: bool = True,
                 targets: GameTargets = NO_GAME_TARGETS, surprise_share: float = 0.0) -> None:
        if window_positions < 1 or validation_positions < 1:
            raise ValueError(f"window_positions and validation_positions must be at least 1, "
                             f"got {window_positions} and {validation_positions}")
        arrays_outside_the_heap()
        self.directory = Path(directory)
        self.window_positions = window_positions
        self.max_sample_reuse = max_sample_reuse
        self.min_positions = max(1, min_positions)
        self._window_size = window_size
        self.scan_interval_s = scan_interval_s
        self.validation_share = validation_share
        self.action_values = action_values
        self.targets = targets
        self.surprise_share = surprise_share
        self._rng = np.random.default_rng(seed)
        self._train = Store(self._capacity(0))
        self._held_out = Store(validation_positions)
        self._known: set[str] = set()
        self._counted_up_to = ""  # names <= this entered the window before a restart
        self._newest_name = ""
        self._last_scan = -float("inf")
        self.positions_added = 0  # positions that ever entered the window
        self.samples_drawn = 0  # positions handed out in batches, over the life of the run
        self.shards_loaded = 0  # this session
        self.skipped_shards = 0  # too old to enter the window when first seen
        self.corrupt_shards = 0
        self.validation_added = 0  # held-out positions read, this session

    # --- size and state ---------------------------------------------------------------

    @property
    def total(self) -> int:
        """Gets the number of the position after the newest (positions are numbered by arrival, per session)."""
        return self._train.total

    @property
    def first(self) -> int:
        """Gets the number of the oldest position inside the window."""
        return self._train.first

    def __len__(self) -> int:
        """Counts the positions in the window."""
        return len(self._train)

    @property
    def window_size(self) -> int:
        """Gets the most positions the window holds now (window_positions, or less while a growing one grows)."""
        return self._train.capacity

    def _capacity(self, positions_added: int) -> int:
        """Gets the window's size once ``positions_added`` positions entered it (see the class's window_size)."""
        if self._window_size is None:
            return self.window_positions
        return min(self.window_positions, max(self.min_positions, self._window_size(positions_added)))

    @property
    def validation_size(self) -> int:
        """Counts the held-out positions in the validation set."""
        return len(self._held_out)

    def validation_game_ids(self) -> set[str]:
        """Gets the ids of the games in the validation set."""
        return self._held_out.game_ids()

    @property
    def nbytes(self) -> int:
        """Counts the bytes of the arrays held."""
        return self._train.nbytes + self._held_out.nbytes

    @property
    def average_reuse(self) -> float:
        """Gets the samples drawn per position that ever entered the window."""
        return self.samples_drawn / self.positions_added if self.positions_added else 0.0

    @property
    def reuse_budget(self) -> float:
        """Gets how many more samples the reuse cap allows now (inf without a cap)."""
        if self.max_sample_reuse <= 0:
            return float("inf")
        return self.max_sample_reuse * self.positions_added - self.samples_drawn

    def waiting_reason(self, batch_size: int) -> str | None:
        """Says why ``sample(batch_size)`` would return None: WAIT_POSITIONS, WAIT_REUSE, or None if it would not."""
        if len(self) < self.min_positions:
            return WAIT_POSITIONS
        if self.reuse_budget < batch_size:
            return WAIT_REUSE
        return None

    def state(self, sampler: SamplerState | None = None) -> dict[str, Any]:
        """Gets the counters and the sampler's generator state as plain data (for a checkpoint); with ``sampler``
        (a ``sampler_state()`` taken earlier), the sampler as it was then: a learner that drew batches ahead of
        the steps it trained saves the draws of those steps alone."""
        sampler = sampler or self.sampler_state()
        return {
            "positions_added": self.positions_added,
            "samples_drawn": sampler.drawn,
            "corrupt_shards": self.corrupt_shards,
            "skipped_shards": self.skipped_shards,
            "newest_shard": max(self._newest_name, self._counted_up_to),
            "rng": json.dumps(sampler.rng),
        }

    def sampler_state(self) -> SamplerState:
        """Gets the sampler's generator state and the samples drawn so far (``rewind`` puts them back)."""
        return SamplerState(self._rng.bit_generator.state, self.samples_drawn)

    def rewind(self, sampler: SamplerState) -> None:
        """Puts the sampler back as ``sampler_state()`` found it: the draws since are undone (the positions that
        entered the window since stay)."""
        self._rng.bit_generator.state = sampler.rng
        self.samples_drawn = sampler.drawn

    def restore(self, state: dict[str, Any]) -> None:
        """Puts back counters saved by ``state``; call before the first ``refresh``.

        Shards whose names sort at or before the saved newest shard were
        counted before the restart and are not counted again when reloaded.

        Raises:
            ValueError: the state is malformed.
        """
        try:
            self.positions_added = int(state["positions_added"])
            self.samples_drawn = int(state["samples_drawn"])
            self.corrupt_shards = int(state.get("corrupt_shards", 0))
            self.skipped_shards = int(state.get("skipped_shards", 0))
            self._counted_up_to = str(state.get("newest_shard", ""))
            if state.get("rng"):
                self._rng.bit_generator.state = json.loads(state["rng"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"malformed replay state: {error!r}") from None
        self._train.grow(self._capacity(self.positions_added))  # the first scan reads back the window it had

    # --- loading ------------------------------------------------------------------------

    def refresh(self, *, force: bool = False, cancelled: Callable[[], bool] | None = None) -> int:
        """Reads the shards that appeared since the last scan; returns how many positions entered the window.

        Lists the folder at most every ``scan_interval_s`` unless ``force``.
        Unreadable shards are logged once, counted and never retried.
        ``cancelled`` is asked before each shard: once it says True the
        shards of this scan are left unread, as if not yet seen (the next
        scan, or the next sitting, reads them), so that a stop never waits
        for a backlog of shards to be read.
        """
        now = time.monotonic()
        if not force and now - self._last_scan < self.scan_interval_s:
            return 0
        self._last_scan = now
        new = [name for name in _scan_names(self.directory) if name not in self._known]
        if not new:
            return 0
        self._known.update(new)
        counters = (self.skipped_shards, self.corrupt_shards)
        # Only what the stores keep of each shard is held until it is appended (the shards themselves are let
        # go at once): a backlog of millions of positions is read within about the memory its window takes.
        loaded: list[_Read] = []
        covered = held_out = 0  # training and held-out positions of the shards read
        counted = 0  # of the training positions, those that count as new (add to positions_added)
        # Newest first, until the new shards alone fill the window (as large as the positions read
        # would make it): older ones would be evicted at once. Older shards are still read for their
        # held-out games, up to a few windows back, so that a restarted learner validates on the same
        # games as before.
        for name in reversed(new):
            wanted_for_training = covered < self._capacity(self.positions_added + counted)
            wanted_for_validation = (self.validation_share > 0 and held_out < self._held_out.capacity
                                     and covered < _VALIDATION_LOOKBACK * self.window_positions)
            if not wanted_for_training:
                self.skipped_shards += name > self._counted_up_to
            if not (wanted_for_training or wanted_for_validation):
                continue
            if cancelled is not None and cancelled():
                self._known.difference_update(new)
                self.skipped_shards, self.corrupt_shards = counters
                return 0
            shard = self._read(name)
            if shard is not None and len(shard):
                read = self._blocks_of(name, shard, wanted_for_training)
                loaded.append(read)
                in_held_out = len(read.held_out.results) if read.held_out is not None else 0
                covered += len(shard) - in_held_out
                held_out += in_held_out
                if wanted_for_training and name > self._counted_up_to:
                    counted += len(shard) - in_held_out
        added = 0
        while loaded:  # oldest first; each let go once appended (merged blocks copy it)
            added += self._append(loaded.pop())
        self._train.grow(self._capacity(self.positions_added))
        self._train.evict()
        self._held_out.evict()
        return added

    def _read(self, name: str) -> Shard | None:
        path = self.directory / name
        try:
            return read_shard(path)
        except ShardError as error:
            if not path.exists():
                return None  # removed between the listing and the read: nothing to report
            self.corrupt_shards += name > self._counted_up_to  # counted before a restart otherwise
            log.warning("skipping unreadable shard (%s)", error)
            return None

    def _held_out_rows(self, name: str, shard: Shard) -> tuple[np.ndarray, list[str]]:
        """Gets a bool per sample, True for the held-out games' samples, and the games' ids."""
        ids = game_ids(shard.games, name)
        if self.validation_share <= 0:
            return np.zeros(len(shard), np.bool_), ids
        held_out_games = np.array([is_validation_game(i, self.validation_share) for i in ids], dtype=np.bool_)
        return held_out_games[shard.game], ids

    def _blocks_of(self, name: str, shard: Shard, train: bool) -> _Read:
        """Takes from a shard what the stores keep: its held-out games' samples and (``train``) the others."""
        held_out, ids = self._held_out_rows(name, shard)
        held_out_rows, train_rows = np.flatnonzero(held_out), np.flatnonzero(~held_out)
        if train and self.surprise_share > 0 and shard.policy_surprise is not None:
            weights = frequency_weights(shard.game, shard.policy_surprise, self.surprise_share)
            train_rows = np.repeat(train_rows, copies(weights, shard_rng(name))[train_rows])
        wins, targets = self.action_values, self.targets
        held_out_targets = dataclasses.replace(targets, reply=False, moves_left=False)
        return _Read(name, train,
                     Block.of(name, 0, shard, held_out_rows, ids, wins=wins, targets=held_out_targets)
                     if len(held_out_rows) else None,
                     Block.of(name, 0, shard, train_rows, wins=wins, targets=targets)
                     if train and len(train_rows) else None)

    def _append(self, read: _Read) -> int:
        self.validation_added += self._held_out.append_block(read.held_out)
        if not read.train:
            return 0
        entered = self._train.append_block(read.training)
        self.shards_loaded += 1
        self._newest_name = max(self._newest_name, read.name)
        if read.name <= self._counted_up_to:
            return 0
        self.positions_added += entered
        return entered

    # --- sampling ---------------------------------------------------------------------------

    def sample(self, batch_size: int) -> Batch | None:
        """Draws ``batch_size`` positions uniformly (with replacement) from the window.

        Returns None, drawing nothing, while ``waiting_reason(batch_size)`` is
        not None: too few positions, or the reuse cap would be passed.

        Raises:
            ValueError: batch_size < 1.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if self.waiting_reason(batch_size) is not None:
            return None
        numbers = np.sort(self._rng.integers(self.first, self.total, size=batch_size))
        self.samples_drawn += batch_size
        return self._train.gather(numbers)

    def training_sample_batches(self, size: int, batch_size: int, seed: int) -> Iterator[Batch]:
        """Yields ``size`` positions drawn from the window, in batches, to set beside the validation set.

        Uses its own generator and counts nothing: the training sampler and the
        reuse cap do not notice. Yields nothing while the window is empty.

        Raises:
            ValueError: batch_size < 1.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if len(self) == 0 or size < 1:
            return
        numbers = np.sort(np.random.default_rng(seed).integers(self.first, self.total, size=size))
        for start in range(0, size, batch_size):
            yield self._train.gather(numbers[start:start + batch_size])

    def validation_batches(self, batch_size: int) -> Iterator[Batch]:
        """Yields the validation set in batches of at most ``batch_size``, oldest positions first.

        Raises:
            ValueError: batch_size < 1.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        store = self._held_out
        for start in range(store.first, store.total, batch_size):
            yield store.gather(np.arange(start, min(start + batch_size, store.total), dtype=np.int64))
