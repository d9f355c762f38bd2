"""PGN games as pretraining data: each mainline position, its played move and its value, into shards.

The value target is the game's result, or, with ``use_evals``
(``pretrain.pgn_value = "eval"``), the engine's evaluation in the comment
after the previous move where there is one (alphazero.chess.pgn_reader says
which comments count and which position each values); such shards say
``meta["value_target"] = VALUE_FROM_ROOT`` and hold the values in
``root_values`` (``results`` keep the game's result).

``convert_pgn`` writes them into a folder (``alphazero pretrain --pgn`` uses
RUN/pretrain/), skipping the files and games a previous run already wrote, so
a rerun resumes; each game carries a stable ``FILE:NUMBER`` id for the
learner's held-out split.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from alphazero.console import LiveDisplay
from alphazero.errors import UserError

__all__ = ["PGN_KIND", "PgnReport", "convert_pgn"]

PGN_KIND = "pgn"  # meta["kind"] of shards converted from PGN games


@dataclasses.dataclass
class PgnReport:
    """What converting PGN files did: games and positions written, games skipped by reason, evaluations read."""

    games: int = 0
    positions: int = 0
    evaluated: int = 0  # positions whose value target came from an engine's evaluation
    malformed_evals: int = 0  # comments of the games written whose evaluation could not be read
    skipped: Counter[str] = dataclasses.field(default_factory=Counter)
    files_done_before: int = 0  # files a previous run had converted completely
    damaged: list[str] = dataclasses.field(default_factory=list)  # "FILE: reason" of files that stopped early

    def summary(self, directory: Path) -> str:
        """Formats the report as a few lines for the terminal."""
        lines = [f"pgn: {self.games:,} games ({self.positions:,} positions) written to {directory}"]
        if self.files_done_before:
            lines[0] += f"; {self.files_done_before} file(s) were converted before"
        if self.skipped:
            reasons = ", ".join(f"{count:,} {reason}" for reason, count in self.skipped.most_common())
            lines.append(f"pgn: skipped {sum(self.skipped.values()):,} games: {reasons}")
        if self.evaluated or self.malformed_evals:
            lines.append(f"pgn: {self.evaluated:,} of {self.positions:,} positions valued by an engine's evaluation; "
                         f"{self.malformed_evals:,} malformed evaluations ignored")
        lines += [f"pgn: warning: {text}" for text in self.damaged]
        return "\n".join(lines)


def _pgn_progress(directory: Path) -> dict[str, dict[str, Any]]:
    """Reads how far earlier runs converted each file: key -> {games, size, complete}."""
    from alphazero.store.shards import ShardError, list_shards, read_shard_meta

    done: dict[str, dict[str, Any]] = {}
    for path in list_shards(directory):
        try:
            meta = read_shard_meta(path)
        except ShardError:
            continue
        if meta.get("kind") != PGN_KIND:
            continue
        entry = done.setdefault(str(meta.get("file")), {"games": 0, "size": meta.get("size"), "complete": False})
        entry["games"] = max(entry["games"], int(meta.get("games_to", 0)))
        entry["complete"] = entry["complete"] or bool(meta.get("complete"))
    return done


class _PgnShardWriter:
    """Collects game records of one file and writes them a shard at a time, with how far the file was read."""

    def __init__(self, directory: Path, key: str, size: int, shard_positions: int, first_game: int,
                 value_target: str | None = None) -> None:
        self.directory, self.key, self.size = directory, key, size
        self.value_target = value_target  # meta["value_target"], when not the results
        self.shard_positions = shard_positions
        self.records: list[dict[str, Any]] = []
        self.positions = 0
        self.games_from = first_game  # games before this number were written before
        self.skipped: Counter[str] = Counter()

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        self.positions += int(record["plies"])

    @property
    def full(self) -> bool:
        return self.positions >= self.shard_positions

    def flush(self, games_to: int, *, complete: bool = False) -> None:
        """Writes the collected games (and the file's progress up to game ``games_to``) as one shard.

        Raises:
            UserError: the folder cannot be written.
        """
        from alphazero.store.shards import shard_from_records, shard_name, write_shard

        if not self.records and not complete:
            return
        meta = {"writer": "alphazero pretrain", "kind": PGN_KIND, "file": self.key, "size": self.size,
                "games_from": self.games_from, "games_to": games_to, "positions": self.positions,
                "complete": complete, "skipped": dict(self.skipped)}
        if self.value_target is not None:
            meta["value_target"] = self.value_target
        try:
            write_shard(self.directory / shard_name("pgn"), shard_from_records(self.records, meta))
        except OSError as error:
            raise UserError(f"cannot write into {self.directory}: {error.strerror or error}") from None
        self.records, self.positions, self.skipped = [], 0, Counter()
        self.games_from = games_to + 1


def convert_pgn(directory: str | os.PathLike[str], files: list[str], *, smoothing: float = 0.0,
                shard_positions: int = 1024, progress: bool = True, use_evals: bool = True) -> PgnReport:
    """Converts the games of PGN files into shards in ``directory``, resuming where an earlier call stopped.

    A damaged file (a corrupt or truncated archive) is reported, its games up
    to the damage kept. Skipped games are counted by reason (alphazero.chess.pgn_reader).
    With ``use_evals``, a position's value target is the evaluation in the
    comment after the previous move where there is one (game_record), and the
    shards say so (VALUE_FROM_ROOT); without, the game's result.

    Raises:
        UserError: a file is missing or unreadable, or changed size since an
            earlier call converted part of it; the folder cannot be written.
    """
    from alphazero.chess.pgn_reader import READ_ERRORS, SKIP_START, PgnGame, game_record, open_text, read_games
    from alphazero.store.shards import VALUE_FROM_ROOT

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    done = _pgn_progress(directory)
    report = PgnReport()
    sizes = {path: Path(path).stat().st_size for path in files}
    with _PgnProgress(sum(sizes.values()), enabled=progress) as bar:
        for path in files:
            key, size = str(Path(path).resolve()), sizes[path]
            before = done.get(key, {"games": 0, "size": size, "complete": False})
            if before["size"] != size:
                raise UserError(f"{path} changed since an earlier run converted part of it ({before['size']} "
                                f"bytes then, {size} now); use a new run directory")
            if before["complete"]:
                report.files_done_before += 1
                bar.advance_file(size)
                continue
            writer = _PgnShardWriter(directory, key, size, shard_positions, before["games"] + 1,
                                     VALUE_FROM_ROOT if use_evals else None)
            number = before["games"]
            try:
                with open_text(path) as handle:
                    for number, item in enumerate(read_games(handle), 1):
                        bar.update(handle.raw_position())  # type: ignore[attr-defined]
                        if number <= before["games"]:
                            continue  # written by an earlier run
                        if not isinstance(item, PgnGame):
                            writer.skipped[item] += 1
                            report.skipped[item] += 1
                            continue
                        try:
                            record = game_record(item, smoothing=smoothing, game_id=f"{Path(path).name}:{number}",
                                                 use_evals=use_evals)
                        except ValueError:
                            writer.skipped[SKIP_START] += 1
                            report.skipped[SKIP_START] += 1
                            continue
                        writer.add(record)
                        report.games += 1
                        report.positions += int(record["plies"])
                        report.evaluated += int(record["evals"])
                        report.malformed_evals += item.malformed_evals
                        bar.count(games=1, positions=int(record["plies"]))
                        if writer.full:
                            writer.flush(number)
            except READ_ERRORS as error:
                report.damaged.append(f"{path}: stopped reading at game {number + 1}: {error}")
            writer.flush(number, complete=True)
            bar.advance_file(size)
    return report


class _PgnProgress:
    """A progress bar over the input's bytes, with games/s and positions/s; nothing when disabled."""

    def __init__(self, total_bytes: int, *, enabled: bool) -> None:
        self.total = max(1, total_bytes)
        self.base = 0  # bytes of the files already finished
        self.games = self.positions = 0
        self.started = time.monotonic()
        self._last = 0.0
        self._bar = LiveDisplay(enabled=enabled, bar=("label", "bar", "percent", "text", "elapsed"), label="pgn",
                                total=self.total, bar_width=16)

    def __enter__(self) -> _PgnProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar.live:
            self._redraw(self.base)
        self._bar.stop()

    def count(self, *, games: int, positions: int) -> None:
        self.games += games
        self.positions += positions

    def update(self, file_bytes: int) -> None:
        now = time.monotonic()
        if self._bar.live and now - self._last >= 0.25:
            self._last = now
            self._redraw(self.base + file_bytes)

    def advance_file(self, size: int) -> None:
        self.base += size

    def _redraw(self, completed: int) -> None:
        seconds = max(time.monotonic() - self.started, 1e-9)
        text = (f"{self.games:,} games, {self.positions:,} positions | {self.games / seconds:,.0f} games/s, "
                f"{self.positions / seconds:,.0f} positions/s")
        self._bar.update(completed=min(completed, self.total), text=text)
