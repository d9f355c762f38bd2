"""`alphazero pretrain`: supervised training from PGN games or Stockfish labels, with the run's learner.

::

    alphazero pretrain --run DIR --pgn FILE [FILE ...]                 # games: played move, game result
    alphazero pretrain --run DIR --stockfish NODES --positions P       # Stockfish-labelled positions
                       [--positions-from FILE ...] [--workers W]

Both write shards (alphazero.store.shards) into ``DIR/pretrain/``, apart from the
self-play data, then train the run's network on every position there with
the learner (learner.loop.Learner: checkpoints in DIR/checkpoints,
TensorBoard in DIR/tb/learner) until ``learner.training_steps`` (``--steps``
overrides it). The replay window covers all of run/pretrain (about 1.2 KB a
position in memory) with no reuse cap: pretraining runs epochs over fixed
data. ``--export FILE`` then saves the weights as a model file (the built-in
network is made this way).

Everything resumes: a rerun of the same command skips the PGN games and the
labelled chunks already written (a killed run loses only the shard in
progress) and resumes training from the newest checkpoint. Start self-play
from the result with ``alphazero train --run NEW --init DIR``.

Games and labelled positions carry an ``id`` in their shard's game list
(``FILE:NUMBER`` or ``sf:SEED:CHUNK:GAME``), stable across reruns, for the
learner's held-out validation split.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from alphazero.console import LiveDisplay
from alphazero.errors import UserError
from alphazero.store.rundir import add_run_arguments, open_run_from_args

__all__ = ["PGN_KIND", "PgnReport", "add_arguments", "convert_pgn", "run"]

PGN_KIND = "pgn"  # meta["kind"] of shards converted from PGN games


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the options of `alphazero pretrain` to ``parser``."""
    add_run_arguments(parser)
    data = parser.add_argument_group("data (written to RUN/pretrain/; give --pgn, --stockfish, or both)")
    data.add_argument("--pgn", nargs="+", default=[], metavar="FILE",
                      help="PGN files of games (.pgn, .pgn.gz, .pgn.bz2, .pgn.zst): each mainline position, "
                           "its played move (pretrain.pgn_smoothing) and the game's result")
    data.add_argument("--stockfish", type=int, default=None, metavar="NODES",
                      help="label positions with Stockfish's MultiPV scores at NODES nodes each")
    data.add_argument("--positions", type=int, default=None, metavar="P",
                      help="positions to label with --stockfish (a rerun labels only those not yet written)")
    data.add_argument("--positions-from", nargs="+", default=[], metavar="FILE",
                      help="label the positions of these PGN or EPD files (in order) instead of random-opening "
                           "games")
    data.add_argument("--workers", type=int, default=0, metavar="W",
                      help="Stockfish processes (default: one per CPU core)")
    training = parser.add_argument_group("training")
    training.add_argument("--steps", type=int, default=None, metavar="N",
                          help="train until step N (overrides learner.training_steps; a rerun resumes towards it)")
    training.add_argument("--minutes", type=float, default=None, metavar="M",
                          help="stop training after M minutes of this command's training (saving the step "
                               "reached), or at --steps, whichever comes first")
    training.add_argument("--data-only", action="store_true", help="write the data, do not train")
    training.add_argument("--export", type=Path, default=None, metavar="FILE",
                          help="when training is done, save the network as a model file (e.g. "
                               "alphazero/weights/builtin.pt)")
    training.add_argument("--device", default=None, help="training device: auto, cpu, cuda or cuda:N")
    training.add_argument("--threads", type=int, default=0, metavar="N",
                          help="torch CPU threads for training (default: torch's choice)")
    parser.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress bars")


def _check(args: argparse.Namespace) -> None:
    """Checks option values argparse cannot.

    Raises:
        UserError: a missing or out-of-range value.
    """
    if (args.stockfish is None) != (args.positions is None):
        raise UserError("--stockfish NODES and --positions P go together")
    if args.positions_from and args.stockfish is None:
        raise UserError("--positions-from names positions to label: add --stockfish NODES --positions P")
    if args.workers < 0 or args.threads < 0:
        raise UserError("--workers and --threads must be 0 (the default) or more")
    if args.steps is not None and args.steps < 0:
        raise UserError(f"--steps must be 0 or more, got {args.steps}")
    if args.minutes is not None and not args.minutes > 0:
        raise UserError(f"--minutes must be positive, got {args.minutes}")
    for path in [*args.pgn, *args.positions_from]:
        if not Path(path).is_file():
            what = "is a directory, not a file" if Path(path).is_dir() else "does not exist"
            raise UserError(f"{path} {what}")
        if not os.access(path, os.R_OK):
            raise UserError(f"cannot read {path}: permission denied")


def run(args: argparse.Namespace) -> None:
    """Runs `alphazero pretrain`: data into RUN/pretrain, then training, then the export.

    Raises:
        UserError: bad options or input files, a missing Stockfish, labels of
            other settings in the run, no data to train on, a full disk.
        KeyboardInterrupt: after Ctrl-C (written shards and the last training step are kept).
    """
    _check(args)
    run_dir, config = open_run_from_args(args, announce=not args.quiet)
    if args.pgn:
        report = convert_pgn(run_dir.pretrain, args.pgn, smoothing=config.pretrain.pgn_smoothing,
                             shard_positions=config.pretrain.shard_positions, progress=not args.quiet)
        print(report.summary(run_dir.pretrain), flush=True)
    if args.stockfish is not None:
        _label(run_dir.pretrain, config, args)
    if args.data_only:
        return
    _train(run_dir, config, args)


# --- PGN games ----------------------------------------------------------------------------------------


@dataclasses.dataclass
class PgnReport:
    """What converting PGN files did: games and positions written, games skipped by reason."""

    games: int = 0
    positions: int = 0
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

    def __init__(self, directory: Path, key: str, size: int, shard_positions: int, first_game: int) -> None:
        self.directory, self.key, self.size = directory, key, size
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
        try:
            write_shard(self.directory / shard_name("pgn"), shard_from_records(self.records, meta))
        except OSError as error:
            raise UserError(f"cannot write into {self.directory}: {error.strerror or error}") from None
        self.records, self.positions, self.skipped = [], 0, Counter()
        self.games_from = games_to + 1


def convert_pgn(directory: str | os.PathLike[str], files: list[str], *, smoothing: float = 0.0,
                shard_positions: int = 1024, progress: bool = True) -> PgnReport:
    """Converts the games of PGN files into shards in ``directory``, resuming where an earlier call stopped.

    A damaged file (a corrupt or truncated archive) is reported, its games up
    to the damage kept. Skipped games are counted by reason (alphazero.chess.pgn_reader).

    Raises:
        UserError: a file is missing or unreadable, or changed size since an
            earlier call converted part of it; the folder cannot be written.
    """
    from alphazero.chess.pgn_reader import READ_ERRORS, SKIP_START, PgnGame, game_record, open_text, read_games

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
            writer = _PgnShardWriter(directory, key, size, shard_positions, before["games"] + 1)
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
                            record = game_record(item, smoothing=smoothing, game_id=f"{Path(path).name}:{number}")
                        except ValueError:
                            writer.skipped[SKIP_START] += 1
                            report.skipped[SKIP_START] += 1
                            continue
                        writer.add(record)
                        report.games += 1
                        report.positions += int(record["plies"])
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


# --- Stockfish labels -------------------------------------------------------------------------------------


def _label(directory: Path, config: Any, args: argparse.Namespace) -> None:
    """Labels the missing chunks of --positions positions with Stockfish, with a progress bar.

    Raises:
        UserError: as learner.labels.label_positions.
    """
    from learner.labels import LabelSettings, label_positions

    settings = LabelSettings.of(config.pretrain, nodes=args.stockfish, positions=args.positions,
                                files=args.positions_from)
    workers = args.workers or os.cpu_count() or 1
    started = time.monotonic()
    with _LabelProgress(settings.positions, enabled=not args.quiet) as bar:
        report = label_positions(directory, settings, workers=workers, progress=bar.update)
    seconds = time.monotonic() - started
    rate = f" in {seconds:,.0f} s ({report.labelled / seconds:,.1f} positions/s, {workers} Stockfish processes)" \
        if report.labelled else ""
    print(f"stockfish: {report.labelled:,} positions labelled at {settings.nodes:,} nodes{rate}; "
          f"{report.total:,} of {settings.positions:,} in {directory}", flush=True)
    if report.skipped:
        reasons = ", ".join(f"{count:,} {reason}" for reason, count in report.skipped.most_common())
        print(f"stockfish: skipped in the position files: {reasons}", flush=True)
    if report.exhausted:
        print(f"stockfish: the position files hold fewer than {settings.positions:,} positions; all were labelled",
              flush=True)


class _LabelProgress:
    """A progress bar of labelled positions with positions/s; nothing when disabled."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self._bar = LiveDisplay(enabled=enabled, bar=("label", "bar", "count", "text", "remaining"), label="labels",
                                total=total, bar_width=16)
        self._first: int | None = None
        self._started = time.monotonic()

    def __enter__(self) -> _LabelProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def update(self, done: int, total: int) -> None:
        if not self._bar.live:
            return
        if self._first is None:
            self._first, self._started = done, time.monotonic()
        rate = (done - self._first) / max(time.monotonic() - self._started, 1e-9)
        self._bar.update(completed=done, total=total, text=f"{rate:,.1f} positions/s")


# --- training ----------------------------------------------------------------------------------------------


def _positions_in(directory: Path) -> int:
    """Counts the positions of the complete shards in ``directory`` (from their meta, else by reading them)."""
    from alphazero.store.shards import ShardError, list_shards, read_shard, read_shard_meta

    total = 0
    for path in list_shards(directory):
        try:
            meta = read_shard_meta(path)
            total += int(meta["positions"]) if "positions" in meta else len(read_shard(path))
        except (ShardError, ValueError, TypeError):
            continue  # the learner skips it and counts it
    return total


def _train(run_dir: Any, config: Any, args: argparse.Namespace) -> None:
    """Trains the run's network on run/pretrain until learner.training_steps (or --steps); exports it.

    Raises:
        UserError: no data, an unusable device, a corrupt checkpoint, a full disk.
    """
    import torch

    from alphazero.config import to_toml
    from alphazero.store.checkpoint import save_model
    from learner.loop import Learner

    positions = _positions_in(run_dir.pretrain)
    if positions == 0:
        raise UserError(f"{run_dir.pretrain} holds no positions to train on: give --pgn FILES or "
                        f"--stockfish NODES --positions P")
    learner = config.learner
    steps = args.steps if args.steps is not None else learner.training_steps
    if steps <= 0 and args.minutes is None:
        raise UserError("pretraining needs an end: give --steps N, --minutes M or set learner.training_steps")
    steps = max(steps, 0)  # 0: no step limit, --minutes ends it
    # Epochs over fixed data: the window holds all of it, and no reuse cap makes the learner wait. All of
    # it is on disk before training starts, so the first read takes it whole: there is no minimum to wait
    # for (the held-out games never enter the window, so `positions` itself would never be reached).
    learner = dataclasses.replace(learner, window_positions=positions, max_sample_reuse=0.0, training_steps=steps,
                                  min_window_positions=1)
    config = dataclasses.replace(config, learner=learner)
    if not args.quiet:
        until = [f"step {steps:,} ({steps * learner.batch_size / positions:.1f} epochs)"] if steps else []
        until += [f"{args.minutes:g} minutes"] if args.minutes is not None else []
        print(f"pretrain: training on {positions:,} positions of {run_dir.pretrain} until {' or '.join(until)} "
              f"(batch {learner.batch_size})", flush=True)
    # The same learner as self-play's, on run/pretrain: its checkpoints, TensorBoard and (once the learner
    # holds games out for validation) its held-out split, which goes by each game's stable "game_id".
    if args.threads:
        torch.set_num_threads(args.threads)  # this process's, set by the command
    with Learner(run_dir, config, device=args.device, progress=not args.quiet, shards=run_dir.pretrain) as trainer:
        trainer.resume()
        # --minutes: equal training time for runs compared at equal wall time; the timer starts after the data.
        stop = threading.Event()
        timer = threading.Timer(args.minutes * 60.0, stop.set) if args.minutes is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            trainer.train(stop=stop)
        finally:
            if timer is not None:
                timer.cancel()
        if args.export is not None:
            summary = (f"pretrained by alphazero pretrain on {positions:,} positions of {run_dir.pretrain.name}/ "
                       f"for {trainer.step:,} steps")
            try:
                save_model(args.export, trainer.model, step=trainer.step, config_toml=to_toml(config),
                           summary=summary, positions=positions)
            except OSError as error:
                raise UserError(f"cannot write {args.export}: {error.strerror or error}") from None
            print(f"pretrain: exported the network at step {trainer.step:,} to {args.export}", flush=True)
    print(f"pretrain: done; start self-play from it with `alphazero train --run NEW_RUN --init {run_dir.root}`",
          file=sys.stdout, flush=True)
