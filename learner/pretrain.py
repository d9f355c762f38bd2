"""Supervised pretraining with the run's learner: Stockfish labels or PGN games in RUN/pretrain/, then training.

``alphazero pretrain`` (learner.cli) writes the data (``label_stockfish``;
PGN games: learner.pgn_data.convert_pgn) into ``RUN/pretrain/``, apart from
the self-play data, then ``pretrain_network`` trains the run's network on
every position there with the learner (learner.loop.Learner: checkpoints in
RUN/checkpoints, TensorBoard in RUN/tb/learner; a network with an action-value
head, ``network.action_value_head``, learns Stockfish's value of every move
the labels scored as well) until ``learner.training_steps``
(or the given steps, or minutes). The replay window covers all of
run/pretrain (about 1.2 KB a position in memory) with no reuse cap:
pretraining runs epochs over fixed data. An export path then saves the
weights as a model file (the built-in network is made this way). Given init
weights (``--init``: learner.init_weights) a new run's training starts from
them instead of the seed's random ones.

Everything resumes: a rerun skips the PGN games and the labelled chunks
already written (a killed run loses only the shard in progress) and resumes
training from the newest checkpoint. Games and labelled positions carry an
``id`` in their shard's game list (``FILE:NUMBER`` or ``sf:SEED:CHUNK:GAME``),
stable across reruns, for the learner's held-out validation split.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from alphazero.config import Config
from alphazero.console import LiveDisplay
from alphazero.errors import UserError
from alphazero.store.rundir import RunDir

if TYPE_CHECKING:
    from alphazero.store.sources import Weights
    from learner.labels import LabelSettings
    from learner.loop import Learner

__all__ = ["label_stockfish", "pretrain_network"]


def label_stockfish(directory: Path, settings: LabelSettings, *, workers: int, progress: bool = True) -> None:
    """Labels the missing chunks of ``settings.positions`` positions with Stockfish into ``directory``, with
    a progress bar, and says what was done.

    Raises:
        UserError: as learner.labels.label_positions.
    """
    from learner.labels import label_positions

    started = time.monotonic()
    with _LabelProgress(settings.positions, enabled=progress) as bar:
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


def _start_from(trainer: Learner, init: Weights) -> None:
    """Loads the init weights into a learner that resumed no checkpoint (train then saves them as step 0).

    Raises:
        UserError: the run has a checkpoint now (written since read_init looked), or the weights do not fit.
    """
    from learner.init_weights import start_from

    if trainer.resumed_from is not None:
        raise UserError(f"--init starts a new run, but {trainer.run.root} has a checkpoint now "
                        f"({trainer.resumed_from.name}); leave out --init to resume it")
    for line in start_from(trainer.model, init):
        print(f"pretrain: {line}", flush=True)


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


def pretrain_network(run: RunDir, config: Config, *, steps: int | None = None, minutes: float | None = None,
                     device: str | None = None, export: Path | None = None, notice: str | None = None,
                     progress: bool = True, init: Weights | None = None) -> int:
    """Trains the run's network on run/pretrain until ``steps`` (default learner.training_steps) or
    ``minutes`` of training, whichever comes first; saves it to ``export`` when given (with ``notice``, the
    data's attribution and licence, in the file); returns the step. ``init``: the weights a run without
    checkpoints starts from (learner.init_weights.read_init; the config's network is theirs).

    Raises:
        UserError: no data, no end, an unusable device, a corrupt checkpoint, a full disk, init weights
            that do not fit the network or a run that has checkpoints after all.
    """
    from alphazero.config import to_toml
    from alphazero.store.checkpoint import save_model
    from learner.loop import Learner

    positions = _positions_in(run.pretrain)
    if positions == 0:
        raise UserError(f"{run.pretrain} holds no positions to train on: give --pgn FILES or "
                        f"--stockfish NODES --positions P")
    learner = config.learner
    steps = steps if steps is not None else learner.training_steps
    if steps <= 0 and minutes is None:
        raise UserError("pretraining needs an end: give --steps N, --minutes M or set learner.training_steps")
    steps = max(steps, 0)  # 0: no step limit, minutes end it
    # Epochs over fixed data: the window holds all of it, and no reuse cap makes the learner wait. All of
    # it is on disk before training starts, so the first read takes it whole: there is no minimum to wait
    # for (the held-out games never enter the window, so `positions` itself would never be reached).
    learner = dataclasses.replace(learner, window_positions=positions, max_sample_reuse=0.0, training_steps=steps,
                                  min_window_positions=1)
    config = dataclasses.replace(config, learner=learner)
    if progress:
        until = [f"step {steps:,} ({steps * learner.batch_size / positions:.1f} epochs)"] if steps else []
        until += [f"{minutes:g} minutes"] if minutes is not None else []
        print(f"pretrain: training on {positions:,} positions of {run.pretrain} until {' or '.join(until)} "
              f"(batch {learner.batch_size})", flush=True)
    # The same learner as self-play's, on run/pretrain: its checkpoints, TensorBoard and (once the learner
    # holds games out for validation) its held-out split, which goes by each game's stable "game_id".
    with Learner(run, config, device=device, progress=progress, shards=run.pretrain) as trainer:
        trainer.resume()
        if init is not None:
            _start_from(trainer, init)
        # Minutes: equal training time for runs compared at equal wall time; the timer starts after the data.
        stop = threading.Event()
        timer = threading.Timer(minutes * 60.0, stop.set) if minutes is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            trainer.train(stop=stop)
        finally:
            if timer is not None:
                timer.cancel()
        if export is not None:
            summary = (f"pretrained by alphazero pretrain on {positions:,} positions of {run.pretrain.name}/ "
                       f"for {trainer.step:,} steps" + (f" from {init.summary}" if init is not None else ""))
            extra = {"notice": notice.strip()} if notice else {}
            try:
                save_model(export, trainer.model, step=trainer.step, config_toml=to_toml(config),
                           summary=summary, positions=positions, **extra)
            except OSError as error:
                raise UserError(f"cannot write {export}: {error.strerror or error}") from None
            print(f"pretrain: exported the network at step {trainer.step:,} to {export}", flush=True)
        return trainer.step
