"""Stockfish labels: positions scored by Stockfish's MultiPV search, written as shards that resume.

Each position gets, from one Stockfish search of ``nodes`` nodes with MultiPV
over every legal move (``pretrain.multipv``, 0 = all):

- the win probability of each scored move for the mover, as Lichess turns
  centipawns into one: ``w = 1/2 + 1/2 * (2 / (1 + exp(-0.00368208 cp)) - 1)``;
  a mate for the mover is 1, against it 0 (alphazero.chess.scores.win_probability);
- the policy target, a softmax of w / ``pretrain.temperature`` over the scored
  moves (0: all on the best move), a mate in fewer than ``MATE_HORIZON``
  moves preferred by ``pretrain.mate_preference`` (learner.label_targets says
  why); moves Stockfish left unscored get 0;
- w itself for every legal move (NaN where Stockfish scored none), stored as
  the shard's ``policy_wins``: what eval.probe measures a policy's regret by;
- the value target, the best move's w mapped to [-1, 1] (``2 w - 1``), stored as
  the shard's ``root_values`` with ``meta["value_target"] = "root_values"``
  (alphazero.store.shards.value_targets); ``results`` hold its nearest result class.
  With ``pretrain.label_value`` false the shard says ``"none"`` instead
  (VALUE_NONE): the learner trains only the policy on its positions, and the
  value stays in ``root_values`` for analysis (eval.probe).

Where positions come from:

- **random-opening play** (the default; learner.label_games): games that
  open with up to ``pretrain.opening_plies`` random plies, then play moves
  drawn from their own labels; some are lopsided (one side plays at random:
  ``pretrain.random_side_fraction``), some start from a random won endgame
  (``pretrain.endgame_fraction``).
- **files** (``--positions-from``; learner.position_files): the mainline
  positions of PGN games, the positions of EPD lines and of Lichess puzzles
  (but those of the ``held_out`` CSVs, the puzzle yardstick by default), in
  file order.

Positions are cut into chunks of ``pretrain.shard_positions`` (the last one
shorter); chunk c is one shard, written when complete, by whichever
Stockfish process labelled it. Random-opening games of chunk c are drawn from
a generator seeded by (``pretrain.seed``, c), so a chunk is the same whoever
labels it and whenever. Stockfish runs with one thread, a fixed hash that is
cleared (``ucinewgame``) before every position, and a node limit, so its
scores do not depend on timing: the same seed, nodes and Stockfish binary
give the same shards. A restart reads the chunks already on disk (from their
shards' meta) and labels only the others; a killed labeller loses only the
chunks in flight. Settings that change the labels (nodes, temperature, the
source, Stockfish's version, ...) may not change between restarts.

The labelling's parts, by concern: learner.label_settings (what shapes the
labels), learner.label_targets (scores to targets), learner.labeller (one
Stockfish process), learner.label_games (the games of a chunk),
learner.position_files (positions from files). This module cuts the
positions into chunks, runs the labellers on them, and writes and resumes
the shards; it re-exports the names its callers use.

Example::

    settings = LabelSettings.of(config.pretrain, nodes=1000, positions=100_000)
    report = label_positions(run.root / "pretrain", settings, workers=4)
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alphazero.chess.scores import WIN_SLOPE, win_probability
from alphazero.chess.stockfish import require_stockfish
from alphazero.errors import UserError
from alphazero.store.shards import (
    LAB_KIND,
    VALUE_FROM_ROOT,
    VALUE_NONE,
    ShardError,
    list_shards,
    read_shard_meta,
    shard_from_records,
    shard_name,
    write_shard,
)
from learner.label_games import GameLabels, endgame_start, random_play_chunk, segments_chunk
from learner.label_settings import LABEL_FIELDS, LabelReport, LabelSettings
from learner.label_targets import MATE_HORIZON, mate_bonus, policy_target
from learner.labeller import Labeller
from learner.position_files import Segment, file_positions, puzzle_keys, segments_of

__all__ = [
    "LAB_KIND", "LABEL_FIELDS", "MATE_HORIZON", "LabelReport", "LabelSettings", "Labeller", "endgame_start",
    "label_positions", "puzzle_keys",
    "WIN_SLOPE", "mate_bonus", "policy_target", "win_probability",
]


# --- resuming --------------------------------------------------------------------------------------------


def _chunks_on_disk(directory: Path, identity: dict[str, Any], settings: LabelSettings) -> dict[int, int]:
    """Reads the chunks already labelled in ``directory``: chunk -> positions.

    Raises:
        UserError: the shards were labelled with other settings, or a chunk's
            size is not what these settings make it.
    """
    done: dict[int, int] = {}
    for path in list_shards(directory):
        try:
            meta = read_shard_meta(path)
        except ShardError:
            continue  # the learner reports unreadable shards; this chunk is labelled again
        if meta.get("kind") != LAB_KIND:
            continue
        saved = meta.get("labels")
        if saved != identity:
            changed = sorted(k for k in {**identity, **(saved or {})} if (saved or {}).get(k) != identity.get(k))
            raise UserError(f"{directory} holds Stockfish labels made with other settings (they differ in "
                            f"{', '.join(changed)}); rerun with the same settings, or use a new run directory")
        chunk, size = int(meta.get("chunk", -1)), int(meta.get("positions", -1))
        short_files = bool(meta.get("files_ended")) and size < settings.chunk_size(chunk)
        if chunk < settings.chunks and size != settings.chunk_size(chunk) and not short_files:
            raise UserError(f"{path.name} holds {size} positions of chunk {chunk}, but --positions "
                            f"{settings.positions} makes that chunk {settings.chunk_size(chunk)}: it was "
                            f"labelled with another --positions; use the same one, or a new run directory")
        done[chunk] = size
    return done


# --- all of it ----------------------------------------------------------------------------------------


class _Counter:
    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.value += 1


def label_positions(directory: str | os.PathLike[str], settings: LabelSettings, *, workers: int | None = None,
                    progress: Callable[[int, int], None] | None = None, stockfish: str | None = None,
                    stop: threading.Event | None = None) -> LabelReport:
    """Labels the chunks of ``settings`` not yet in ``directory`` with ``workers`` Stockfish processes.

    ``progress(done, total)`` is called from this thread about four times a
    second with the positions labelled (on disk included) and the target.
    Each chunk's shard is written as soon as it is complete.

    Raises:
        UserError: Stockfish is missing or fails; the directory holds labels of
            other settings; it cannot be written.
        KeyboardInterrupt: after Ctrl-C (chunks in flight are dropped; written ones stay).
    """
    directory = Path(directory)
    stop = stop if stop is not None else threading.Event()
    if not directory.parent.is_dir():
        raise UserError(f"cannot label into {directory}: {directory.parent} is not a folder")
    workers = max(1, workers or os.cpu_count() or 1)
    path = stockfish or require_stockfish()
    first = Labeller(settings, path)
    labellers: queue.Queue[Labeller] = queue.Queue()
    labellers.put(first)
    identity = settings.identity(first.name)
    report = LabelReport()
    counter = _Counter()
    try:
        done = _chunks_on_disk(directory, identity, settings)
        report.on_disk = sum(done.values())
        if progress is not None:
            progress(report.on_disk, settings.positions)
        pending = [c for c in range(settings.chunks) if c not in done]
        if not pending:
            return report
        directory.mkdir(parents=True, exist_ok=True)
        for _ in range(min(workers, len(pending)) - 1):
            labellers.put(Labeller(settings, path))

        def work(job: _Job) -> int:
            labeller = labellers.get()
            try:
                if job.segments is None:
                    games = random_play_chunk(labeller, job.chunk, settings.chunk_size(job.chunk), stop,
                                               counter.add)
                else:
                    games = segments_chunk(labeller, job.segments, stop, counter.add)
                return _write_chunk(directory, job, games, identity)
            finally:
                labellers.put(labeller)

        _run_jobs(_jobs(settings, pending, report), work, workers, report, counter, stop,
                  lambda done: progress(done, settings.positions) if progress is not None else None)
    finally:
        stop.set()
        while not labellers.empty():
            labellers.get().close()
    return report


@dataclass(frozen=True)
class _Job:
    """One chunk to label: its number, and its file segments (None for random-opening play)."""

    chunk: int
    segments: list[Segment] | None = None
    files_ended: bool = False  # the files ended inside this chunk: it is shorter than the others


def _jobs(settings: LabelSettings, pending: list[int], report: LabelReport) -> Iterator[_Job]:
    """Yields the jobs of the pending chunks, in order (reading the files, when they are the source)."""
    if not settings.files:
        for chunk in pending:
            yield _Job(chunk)
        return
    wanted = set(pending)
    items: list[tuple[str, str, list[str], str]] = []
    filled = chunk = 0
    held_out = puzzle_keys(settings.held_out) if settings.held_out else frozenset()
    for item in file_positions(settings.files, report.skipped, held_out, settings.pretrain.puzzle_alternatives):
        if chunk >= settings.chunks:
            break
        filled += 1
        if chunk in wanted:
            items.append(item)
        if filled == settings.chunk_size(chunk):
            if chunk in wanted:
                yield _Job(chunk, segments_of(items))
            items, filled, chunk = [], 0, chunk + 1
    if chunk < settings.chunks:
        report.exhausted = True
        if items and chunk in wanted:
            yield _Job(chunk, segments_of(items), files_ended=True)


def _run_jobs(jobs: Iterator[_Job], work: Callable[[_Job], int], workers: int, report: LabelReport,
              counter: _Counter, stop: threading.Event, progress: Callable[[int], object]) -> None:
    """Runs the jobs on ``workers`` threads, taking a few more jobs than there are threads at a time;
    reports the positions labelled about four times a second.

    Raises:
        Whatever a job raised (the others are stopped first).
    """
    in_flight: set[concurrent.futures.Future[int]] = set()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="labeller")
    try:
        more = True
        while True:
            while more and len(in_flight) < 2 * workers:
                job = next(jobs, None)
                if job is None:
                    more = False
                else:
                    in_flight.add(executor.submit(work, job))
            if not in_flight:
                break
            finished, in_flight = concurrent.futures.wait(in_flight, timeout=0.25,
                                                          return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                report.labelled += future.result()  # a job's error is raised here
                report.chunks_written += 1
            progress(report.on_disk + counter.value)
    except BaseException:
        stop.set()  # the jobs in flight stop at their next position
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _write_chunk(directory: Path, job: _Job, games: list[GameLabels], identity: dict[str, Any]) -> int:
    """Writes one chunk's shard; returns its positions.

    Raises:
        UserError: the folder cannot be written.
    """
    positions = sum(len(game.rows) for game in games)
    meta = {"writer": "alphazero pretrain", "kind": LAB_KIND, "chunk": job.chunk, "positions": positions,
            "files_ended": job.files_ended, "labels": identity,
            "value_target": VALUE_FROM_ROOT if identity.get("label_value", True) else VALUE_NONE}
    shard = shard_from_records([game.record() for game in games], meta)
    try:
        write_shard(directory / shard_name(f"sf-c{job.chunk:06d}"), shard)
    except OSError as error:
        raise UserError(f"cannot write labels into {directory}: {error.strerror or error}") from None
    return positions
