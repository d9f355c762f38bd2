"""Label settings: what shapes a run's Stockfish labels, and what a labelling call reports.

LabelSettings holds the command's figures (nodes, positions, the source
files) beside the run's ``pretrain`` section; its ``identity`` is what each
shard's meta records, so that a restart with other settings is refused
rather than mixed in (learner.labels).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alphazero.config import PretrainConfig
from alphazero.errors import UserError

__all__ = ["LABEL_FIELDS", "LabelReport", "LabelSettings"]

LABEL_FIELDS = ("temperature", "multipv", "hash_mb", "seed", "opening_plies", "random_move_fraction", "game_plies",
                "shard_positions", "mate_preference", "random_side_fraction", "endgame_fraction",
                "puzzle_alternatives", "label_value")
"""The PretrainConfig fields that shape Stockfish labels (pgn_smoothing shapes PGN targets only)."""

_RANDOM_PLAY_FIELDS = ("seed", "opening_plies", "random_move_fraction", "game_plies", "random_side_fraction",
                       "endgame_fraction")
"""The fields of random-opening play, which labels from files do not use."""

_NEWER_FIELDS = ("mate_preference", "random_side_fraction", "endgame_fraction", "puzzle_alternatives")
"""Fields added after the first labels were made: at 0 (off) they are left out of the identity."""


@dataclass(frozen=True)
class LabelSettings:
    """What to label: ``positions`` positions at ``nodes`` nodes, drawn as the run's ``pretrain`` section says.

    ``files`` (PGN, EPD or puzzle CSV paths) replace random-opening play as
    the source; the puzzles of the ``held_out`` CSVs are left out of them.
    """

    nodes: int
    positions: int
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    files: tuple[str, ...] = ()
    held_out: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: PretrainConfig, *, nodes: int, positions: int, files: Sequence[str | os.PathLike[str]] = (),
           held_out: Sequence[str | os.PathLike[str]] = ()) -> LabelSettings:
        """Builds the settings from the run's pretrain section and the command's figures.

        Raises:
            UserError: nodes or positions below 1.
        """
        if nodes < 1:
            raise UserError(f"--stockfish takes the nodes per position, at least 1, got {nodes}")
        if positions < 1:
            raise UserError(f"--positions must be at least 1, got {positions}")
        return cls(nodes, positions, config, tuple(str(Path(f).resolve()) for f in files),
                   tuple(str(Path(f).resolve()) for f in held_out) if files else ())

    @property
    def chunks(self) -> int:
        return -(-self.positions // self.pretrain.shard_positions)

    def chunk_size(self, chunk: int) -> int:
        """Positions of chunk ``chunk``: shard_positions, less for the last."""
        return min(self.pretrain.shard_positions, self.positions - chunk * self.pretrain.shard_positions)

    def identity(self, engine: str) -> dict[str, Any]:
        """Everything that shapes the labels (all but ``positions``), as saved in each shard's meta."""
        fields: dict[str, Any] = {"nodes": self.nodes}
        for name in LABEL_FIELDS:
            fields[name] = getattr(self.pretrain, name)
            if name == "shard_positions":
                fields["files"] = list(self.files)
        if self.files:  # random-play settings do not apply
            for name in _RANDOM_PLAY_FIELDS:
                del fields[name]
        else:  # nor do those of files to random play
            del fields["puzzle_alternatives"]
        if self.held_out:  # absent when none: labels made before puzzles were read still resume
            fields["held_out"] = list(self.held_out)
        for name in _NEWER_FIELDS:
            if fields.get(name) == 0:
                del fields[name]  # off: the labels of the settings before these existed, which still resume
        if self.pretrain.label_value:
            del fields["label_value"]  # likewise: labels with a value are the labels made before the choice
        return {**fields, "engine": engine}


@dataclass
class LabelReport:
    """What a labelling call did and found."""

    labelled: int = 0  # positions labelled by this call
    on_disk: int = 0  # positions in labelled shards before this call
    chunks_written: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # source games or lines skipped, by reason
    exhausted: bool = False  # the files held fewer positions than asked for

    @property
    def total(self) -> int:
        return self.labelled + self.on_disk
