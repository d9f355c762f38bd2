"""The learner's loop: sample the replay window, train, log, checkpoint, publish.

``run_learner`` is the whole learner for the command line and for
``alphazero train`` (which runs it in a thread beside self-play):

- **Resume**: it starts from the run's LATEST checkpoint when there is one
  (same step, optimiser state, RNG states, replay counters); the window is
  rebuilt from the shards on disk. A fresh run saves step 0 at once, so that
  self-play and the learner start from the same weights.
- **Waiting**: while the window holds fewer than ``min_window_positions``, or
  the reuse cap is reached, it says so (once per reason) and looks for new
  shards every ``learner.poll_seconds``.
- **Batches** are made on a thread while the step before them trains
  (learner.feed: new shards read, the window sampled, the batch staged for the
  device, pinned on CUDA); their dense targets are scattered on the device
  (learner.batch_device). A seed gives the same batches as without the thread.
- **Checkpoints** every ``checkpoint_every`` steps (alphazero.store.checkpoint:
  atomic, LATEST, thinned), then ``on_checkpoint(step, path)`` so the caller
  can push the weights to self-play actors. A clean stop (the ``stop`` event,
  Ctrl-C, ``steps`` done, ``training_steps`` reached) saves the last step too;
  a batch being made stops reading a backlog of new shards between two.
  Ctrl-C in the main thread finishes the step in flight first; a second Ctrl-C
  quits at once, without saving. An error saves nothing (the weights may be
  half updated): the last checkpoint stands.
- **TensorBoard** in ``run/tb/learner/`` every ``log_every`` steps: means over
  the steps since the last log of loss/total, loss/policy, loss/value,
  loss/value_mse, policy/entropy, value/accuracy and grad_norm (and
  loss/action_value with an action-value head, loss/reply_policy with
  learner.reply_policy_weight, loss/moves_left with
  learner.moves_left_weight); the learning_rate; loss/weight_decay (c *
  ||theta||^2); throughput/samples_per_s (training time only, waits excluded); replay/window_positions (held),
  replay/window_size (the most it may hold now: it grows with the run under
  learner.window_exponent), replay/average_reuse, replay/positions_added,
  replay/corrupt_shards, replay/skipped_shards, replay/validation_positions
  and replay/waiting_s. At every checkpoint, a text summary ``probes`` of the
  net's value and top-3 moves in a few fixed positions (learner.probes).
- **Validation** every ``validate_every`` steps and at the end of ``steps``
  (a stop saves and cuts it): the held-out
  games' positions (ReplayWindow: never trained on) and an equal-size sample
  of the window, both in eval mode, as ``validation/policy_loss``,
  ``policy_top1``, ``value_loss``, ``value_mse``, ``value_accuracy`` (with
  an action-value head and targets, ``action_value_loss`` and ``action_value_mae``) and
  ``validation/train_*`` (the same on the window sample); the gap between the
  two is what the window has been memorised beyond what generalises. A
  custom-scalars layout plots each pair with the training curve.
- **Progress**: a live line on a terminal (step, losses, samples/s, window,
  reuse); elsewhere one line per ``log_every`` steps.

Example::

    run, config = RunDir.open("runs/x")
    final_step = run_learner(run, config, steps=1000, progress=False)
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from alphazero.config import Config
from alphazero.console import fit_line
from alphazero.errors import UserError
from alphazero.nn.network import build_network, pick_device
from alphazero.store.checkpoint import (
    KEPT_NAME,
    checkpoint_name,
    checkpoint_steps,
    keep_step,
    latest_checkpoint,
    load_checkpoint,
    restore_checkpoint,
    rewind_checkpoints,
    save_checkpoint,
    step_of,
    thin_checkpoints,
)
from alphazero.store.rundir import RunDir
from learner.batch_device import pins
from learner.feed import BatchFeed
from learner.interrupts import stop_on_interrupt
from learner.probes import PROBES, Probe, encode_probes, probe_report
from learner.replay import WAIT_POSITIONS, GameTargets, ReplayWindow
from learner.reporting import TB_NAMES, VALIDATION_LAYOUT, Progress, Running
from learner.trainer import VALIDATION_FIGURES, Trainer, weight_decay_term

__all__ = ["PROBES", "Learner", "OnCheckpoint", "Probe", "probe_report", "run_learner"]

log = logging.getLogger(__name__)

OnCheckpoint = Callable[[int, Path], None]  # (step, checkpoint path), called after each checkpoint
TB_SUBDIR = "learner"
PROGRESS_SECONDS = 0.25  # the live line is redrawn (and the device synced for it) at most this often
MIX_WINDOW_POSITIONS = 100_000_000  # learner.mix_dir is read whole

# --- the learner -----------------------------------------------------------------------------------

class Learner:
    """The network, its optimiser and the replay window of one run, trained step by step.

    Build it, ``resume()``, then ``train()``; ``close()`` (or ``with``) at the end.

    Args:
        run: the run directory (shards in run/selfplay, checkpoints, tb).
        config: the run's config (RunDir.open / create_or_open).
        device: overrides ``learner.device`` ('auto', 'cpu', 'cuda', 'cuda:N').
        on_checkpoint: called as ``on_checkpoint(step, path)`` after every checkpoint.
        progress: show progress on stderr; False logs messages instead.
        shards: the folder the replay window reads (default run/selfplay;
            ``alphazero pretrain`` passes run/pretrain). A given folder is
            fixed data: its window is window_positions from the start.

    Raises:
        UserError: an unknown or missing device.
    """

    def __init__(self, run: RunDir, config: Config, *, device: str | None = None,
                 on_checkpoint: OnCheckpoint | None = None, progress: bool = False,
                 shards: Path | None = None) -> None:
        self.run = run
        self.config = config
        self.settings = config.learner
        self.device = pick_device(device or self.settings.device)
        self.on_checkpoint = on_checkpoint
        with torch.random.fork_rng(devices=[]):  # the initial weights from the seed; torch's own RNG untouched
            torch.manual_seed(self.settings.seed)  # (a resumed run loads its own weights)
            network = build_network(config.network)
        # Only a network with the head learns every move's value: a head-less one (pretraining on Stockfish
        # labels, say) keeps no win probabilities and builds no dense [B, 4672] array per batch.
        self.action_values = config.network.action_value_head != "none"
        self.trainer = Trainer(network, self.settings, self.device,
                               clip_grad_norm=self.settings.clip_grad_norm or None, compile=self.settings.compile)
        # Self-play's window grows with the run (learner.window_growth, window_exponent: KataGo's shuffler);
        # g = e = 1 is the fixed window_positions, which also reads a backlog of shards up to it at the start.
        grows = shards is None and (self.settings.window_growth, self.settings.window_exponent) != (1.0, 1.0)
        self.window = ReplayWindow(shards or run.selfplay, window_positions=self.settings.window_positions,
                                   max_sample_reuse=self.settings.max_sample_reuse,
                                   min_positions=self.settings.min_window_positions,
                                   window_size=self.settings.window_size if grows else None, seed=self.settings.seed,
                                   validation_share=self.settings.validation_share,
                                   validation_positions=self.settings.validation_positions,
                                   action_values=self.action_values, targets=GameTargets.of(self.settings),
                                   surprise_share=self.settings.policy_surprise_weight)
        self.step = 0
        # The run's wall time at the sitting's start (from the resumed checkpoint) and when this sitting
        # began: each checkpoint stores their sum as run_seconds, the x axis of `alphazero curve`.
        self._run_seconds_before = 0.0
        self._sitting_started = time.monotonic()
        self._kept_mark = 0  # the stretches of keep_every_minutes whose first checkpoint is kept
        self.saved_step: int | None = None
        # time.time() at this sitting's first training step and at the first checkpoint after one: `alphazero
        # train` says how soon a run learns (EXPERIMENTS.md, "A run that learns early, the CPU part").
        self.first_step_time: float | None = None
        self.first_checkpoint: tuple[int, float] | None = None  # (step, time.time())
        self.resumed_from: Path | None = None  # the checkpoint resume() loaded
        self.resume_notes: list[str] = []  # what resume() said (callers without progress output print it)
        self._start_step = 0  # TensorBoard hides events a killed learner wrote from here on
        self._progress = Progress(progress, log)
        self._progress.message(f"learner: {self.precision_text()}")
        self.mix = self._mix_window()
        self._feed = BatchFeed(self.window, self.mix, self.settings, pin=pins(self.device),
                               describe_wait=self._waiting_text)
        self._running = Running()
        self._writer: Any = None
        self._probes = encode_probes(PROBES)
        self._last_status = 0.0
        self._announced: str | None = None  # the last waiting reason printed
        self.validation: dict[str, float] | None = None  # the last validation/* figures
        self._validated_step = -1
        self._layout_written = False

    def _mix_window(self) -> ReplayWindow | None:
        """Opens learner.mix_dir as a window of every position it holds (no reuse cap), or None.

        Raises:
            UserError: mix_dir is set but holds no shard.
        """
        if not self.settings.mix_dir or self.settings.mix_share <= 0:
            return None
        folder = self.run.root / Path(self.settings.mix_dir).expanduser()
        mix = ReplayWindow(folder, window_positions=MIX_WINDOW_POSITIONS, max_sample_reuse=0,
                           seed=self.settings.seed + 1, action_values=self.action_values,
                           targets=GameTargets.of(self.settings))
        if not folder.is_dir() or mix.refresh(force=True) == 0:
            raise UserError(f"learner.mix_dir {str(folder)!r} holds no shards to mix into the batches; "
                            f"set learner.mix_share=0 or point learner.mix_dir at a pretrain/ folder")
        self._progress.message(f"mixing {len(mix):,} positions of {folder} into the batches "
                               f"({self.settings.mix_share:.0%} of each at the start)")
        return mix

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def model(self) -> torch.nn.Module:
        return self.trainer.model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.trainer.optimizer

    # --- checkpoints ------------------------------------------------------------------------------

    def resume(self, from_step: int | None = None) -> int:
        """Loads the run's newest checkpoint (or ``from_step``'s), if any, and reads the window; returns the step.

        With ``from_step``, the checkpoints newer than it are moved aside (see
        checkpoint.rewind_checkpoints; nothing is deleted) once it has loaded,
        and LATEST names it again, so that actors, evaluation and later
        restarts follow the resumed line of training.

        Raises:
            UserError: the checkpoint is missing, corrupt, of another
                architecture, or its optimiser state does not fit (the message
                says what to do).
        """
        path = self._checkpoint_to_resume(from_step)
        if path is not None:
            try:
                payload = load_checkpoint(path, "cpu", expected=self.config.network)
                self.step = restore_checkpoint(payload, self.model, self.optimizer)
                self.window.restore(payload.get("replay") or {})
                before = payload.get("run_seconds")
                self._run_seconds_before = float(before) if isinstance(before, (int, float)) else 0.0
                if self.settings.keep_every_minutes > 0:
                    self._kept_mark = int(self._run_seconds_before // (60.0 * self.settings.keep_every_minutes))
            except (UserError, ValueError) as error:
                raise UserError(f"cannot resume the learner: {error}. {self._earlier_checkpoints_hint(path)}") from None
            self.saved_step = self._start_step = self.step
            self.resumed_from = path
            self.resume_notes.append(f"resumed from {path} (step {self.step:,})")
            if from_step is not None:
                moved = rewind_checkpoints(self.run, from_step)
                if moved:
                    steps = ", ".join(f"{step_of(p):,}" for p in moved)
                    which = f"checkpoint (step {steps})" if len(moved) == 1 else f"checkpoints (steps {steps})"
                    self.resume_notes.append(f"moved the newer {which} to {moved[0].parent}, untouched; "
                                             f"LATEST names step {from_step:,} again")
            for note in self.resume_notes:
                self._progress.message(note)
        with self._feed.lock:
            self.window.refresh(force=True)
        return self.step

    def _checkpoint_to_resume(self, from_step: int | None) -> Path | None:
        """Gets the file to resume from: LATEST's, or step ``from_step``'s (None: a fresh run).

        Raises:
            UserError: the run has no checkpoint at ``from_step``.
        """
        if from_step is None:
            return latest_checkpoint(self.run)
        path = self.run.checkpoints / checkpoint_name(from_step)
        if not path.is_file():
            have = ", ".join(f"{step}" for step in checkpoint_steps(self.run)) or "none"
            raise UserError(f"run {self.run.root} has no checkpoint at step {from_step} (its checkpoints: {have})")
        return path

    def _earlier_checkpoints_hint(self, path: Path) -> str:
        """Says how to go on without the unusable checkpoint ``path``."""
        unusable = step_of(path)
        earlier = [step for step in checkpoint_steps(self.run) if unusable is None or step < unusable]
        if not earlier:
            return "Use a new run directory"
        return (f"Resume from an earlier checkpoint with --from-checkpoint STEP (this run has steps "
                f"{', '.join(str(step) for step in earlier[-5:])}), or use a new run directory")

    def save(self) -> Path:
        """Writes a checkpoint of the current step, thins old ones, logs the probes, calls on_checkpoint.

        Raises:
            UserError: the disk is full or the folder unwritable (nothing of
                the run is lost: the previous checkpoint stands), or the loss
                is no longer finite (nothing is saved).
        """
        self._check_finite()
        try:
            path = save_checkpoint(self.run, self.model, self.optimizer, self.step, self.config,
                                   replay=self._feed.window_state(), run_seconds=self.run_seconds)
        except UserError as error:
            last = f"step {self.saved_step:,}" if self.saved_step is not None else "the start"
            raise UserError(f"{error}; the learner stopped at step {self.step:,}, and a restart resumes from "
                            f"{last}") from None
        self._keep_by_time(self.step)
        thin_checkpoints(self.run.checkpoints, self.settings.keep_checkpoints,
                         keep_every=self.settings.keep_every_steps)
        self.saved_step = self.step
        if self.first_checkpoint is None and self.first_step_time is not None:
            self.first_checkpoint = (self.step, time.time())
        self._tensorboard(lambda w: w.add_text("probes", self._probe_text(), self.step))
        self._tensorboard(lambda w: w.flush())
        if self.on_checkpoint is not None:
            self.on_checkpoint(self.step, path)
        return path

    def _keep_by_time(self, step: int) -> None:
        """Marks the first checkpoint after each learner.keep_every_minutes of the run as kept (KEPT), so that
        `alphazero curve` finds one per stretch of the run however many steps it made."""
        minutes = self.settings.keep_every_minutes
        if minutes <= 0:
            return
        mark = int(self.run_seconds // (60.0 * minutes))
        if mark > self._kept_mark:
            try:
                keep_step(self.run.checkpoints, step)
            except OSError as error:
                raise UserError(f"cannot write {self.run.checkpoints / KEPT_NAME}: {error.strerror or error}") from None
            self._kept_mark = mark

    @property
    def run_seconds(self) -> float:
        """The run's wall time so far: every sitting's, from its learner's start (waits for games included)."""
        return self._run_seconds_before + time.monotonic() - self._sitting_started

    def _probe_text(self) -> str:
        return probe_report(self.model, self.device, _encoded=self._probes)

    def _check_finite(self) -> None:
        means = self._running.means()
        if means and not np.isfinite(means["total"]):
            last = f"step {self.saved_step:,}" if self.saved_step is not None else "none"
            raise UserError(f"the loss is {means['total']} by step {self.step:,} (learning rate "
                            f"{self.settings.learning_rate(self.step):g} too high?); nothing was saved, "
                            f"the last checkpoint is {last}")

    # --- TensorBoard -------------------------------------------------------------------------------

    def _tensorboard(self, write: Callable[[Any], object]) -> None:
        """Runs ``write(writer)``, opening the writer on first use.

        Raises:
            UserError: the event file cannot be written (a full disk, say).
        """
        directory = self.run.tb / TB_SUBDIR
        try:
            if self._writer is None:
                from torch.utils.tensorboard import SummaryWriter

                # purge_step hides events a killed learner wrote after its last checkpoint.
                self._writer = SummaryWriter(str(directory), purge_step=self._start_step or None, flush_secs=30)
            write(self._writer)
        except OSError as error:
            full = " (no space left on device)" if error.errno == errno.ENOSPC else ""
            raise UserError(f"cannot write TensorBoard events in {directory}{full}: "
                            f"{error.strerror or error}") from None

    def _log(self) -> dict[str, float]:
        """Writes the means since the last log to TensorBoard and starts new sums; returns them."""
        running, self._running = self._running, Running()
        means = running.means()
        window = self.window
        # loss/action_value, loss/reply_policy and loss/moves_left (learner.reporting has no tag for them) only
        # where trained.
        scalars = {TB_NAMES.get(name, f"loss/{name}"): value for name, value in means.items()
                   if name not in self.trainer.untrained_figures}
        scalars.update({
            "learning_rate": self.settings.learning_rate(self.step - 1),
            "loss/weight_decay": weight_decay_term(self.model, self.settings),
            "throughput/samples_per_s": running.samples_per_s,
            "replay/window_positions": len(window),
            "replay/window_size": window.window_size,
            "replay/average_reuse": self._feed.average_reuse,
            "replay/positions_added": window.positions_added,
            "replay/corrupt_shards": window.corrupt_shards,
            "replay/skipped_shards": window.skipped_shards,
            "replay/validation_positions": window.validation_size,
            "replay/waiting_s": running.waited,
        })

        def write(writer: Any) -> None:
            for tag, value in scalars.items():
                writer.add_scalar(tag, value, self.step)

        self._tensorboard(write)
        if not np.isfinite(means.get("total", 0.0)):
            self._running = running  # keeps the evidence for _check_finite
            self._check_finite()
        return scalars

    # --- training ----------------------------------------------------------------------------------

    def _target(self, steps: int | None) -> float:
        target: float = self.settings.training_steps if self.settings.training_steps > 0 else float("inf")
        if steps is not None:
            target = min(target, self.step + steps)
        return target

    def train(self, steps: int | None = None, *, stop: threading.Event | None = None) -> int:
        """Trains until ``steps`` more steps, ``training_steps``, or ``stop``; saves the last step; returns it.

        Raises:
            UserError: a checkpoint or event file cannot be written, or the loss is not finite.
            KeyboardInterrupt: after a Ctrl-C (the step was finished and saved
                first), or at once after a second one.
        """
        stop = stop if stop is not None else threading.Event()
        if self.saved_step is None:
            self.save()  # step 0 of a fresh run: self-play and learner start from the same weights
        if self.settings.start_anchor_weight > 0 and self.trainer.anchor is None:
            self._load_anchor()
        target = self._target(steps)
        if 0 < self.settings.training_steps <= self.step:
            self._progress.message(f"training is finished: step {self.step:,} reached learner.training_steps")
        interrupted = threading.Event()
        with stop_on_interrupt(stop, interrupted, self._progress):
            if self.step < target and not stop.is_set():
                self._train_steps(target, stop)
            due = self.settings.validate_every and self._validated_step != self.step and self.step > 0
            if due and not stop.is_set():
                self.validate()
            if self.saved_step != self.step:
                self.save()  # a stop's save comes first: it is bounded (Docker gives 10 s), validation is not
            if due and stop.is_set():
                self._progress.message(f"the stop cuts the final validation at step {self.step:,} (a restart "
                                       f"validates within its first {self.settings.validate_every:,} steps)")
        self._progress.message(f"stopped at step {self.step:,}; checkpoint saved in {self.run.checkpoints}")
        if interrupted.is_set():
            raise KeyboardInterrupt
        return self.step

    def _train_steps(self, target: float, stop: threading.Event) -> None:
        """Trains until step ``target`` or ``stop``, on batches made ahead on the feed's thread (learner.feed)."""
        with self._feed.prefetching(self.step) as feed:
            while self.step < target and not stop.is_set():
                started = time.perf_counter()
                batch, waited = feed.next(stop, self._on_wait)
                self._running.waited += waited
                if batch is None:
                    break
                stats = self.trainer.step(batch, self.step)
                self.step += 1
                if self.first_step_time is None:
                    self.first_step_time = time.time()
                self._running.add(stats, len(batch), time.perf_counter() - started - waited)
                self._after_step()

    def _on_wait(self, reason: str, text: str) -> None:
        # A learner ahead of self-play waits every few steps: say so when the reason changes, not every
        # time; the live line and the waited seconds tell the rest.
        if reason != self._announced:
            self._progress.message(text)
            self._announced = reason
        self._progress.status(text)

    def _load_anchor(self) -> None:
        """Gives the trainer the run's step-0 network as the anchor's start (learner.start_anchor_weight).

        Raises:
            UserError: the run has no step-0 checkpoint (runs thinned before step 0 was always kept).
        """
        path = self.run.checkpoints / checkpoint_name(0)
        if not path.is_file():
            raise UserError(f"learner.start_anchor_weight pulls towards the run's start, but {path} is gone; "
                            f"set learner.start_anchor_weight=0 for this run")
        payload = load_checkpoint(path, "cpu", expected=self.config.network)
        self.trainer.set_anchor(payload["model"])
        self._progress.message(f"anchor: pulling towards the start ({path.name}) with weight "
                               f"{self.settings.start_anchor_weight:g}")

    def _after_step(self) -> None:
        milestone = self.step % self.settings.log_every == 0
        now = time.monotonic()
        if milestone or now - self._last_status >= PROGRESS_SECONDS:
            self._last_status = now
            self._progress.status(self._status_line(self._running, self._progress.width), milestone=milestone)
        if milestone:
            self._log()
        if self.settings.validate_every and self.step % self.settings.validate_every == 0:
            self.validate()
        if self.step % self.settings.checkpoint_every == 0:
            self.save()

    def status(self, width: int | None = None) -> str:
        """The learner's progress line as it stands (step, losses, samples/s, window, reuse), fitted to ``width``."""
        return self._status_line(self._running, width)

    # --- validation ----------------------------------------------------------------------------

    def validate(self) -> dict[str, float] | None:
        """Rates the net on the held-out positions and on a window sample of the same size; logs validation/*.

        Returns the figures (None while no game is held out yet).
        """
        self._validated_step = self.step
        size = self.settings.batch_size
        with self._feed.lock:  # the feed's thread reads shards and samples the window meanwhile
            self.window.refresh()
            held_out = self.trainer.validate(self.window.validation_batches(size))
            if held_out is None:
                return None
            sample = self.trainer.validate(self.window.training_sample_batches(int(held_out["positions"]), size,
                                                                               seed=self.step))
            games = len(self.window.validation_game_ids())
        scalars = {f"validation/{name}": value for name, value in held_out.items()}
        scalars["validation/games"] = float(games)
        if sample is not None:
            scalars.update({f"validation/train_{name}": sample[name] for name in VALIDATION_FIGURES
                            + ("action_value_loss", "action_value_mae") if name in sample})
        self.validation = scalars

        def write(writer: Any) -> None:
            if not self._layout_written:
                writer.add_custom_scalars(VALIDATION_LAYOUT)
                self._layout_written = True
            for tag, value in scalars.items():
                writer.add_scalar(tag, value, self.step)

        self._tensorboard(write)
        return scalars

    def validation_text(self) -> str:
        """Formats the last validation figures for a progress line ('' before the first)."""
        v = self.validation
        if not v:
            return ""
        gap = (f" (window sample {v['validation/train_policy_loss']:.3f} / {v['validation/train_value_loss']:.3f})"
               if "validation/train_policy_loss" in v else "")
        return (f"step {self._validated_step:,}: held-out policy {v['validation/policy_loss']:.3f} / "
                f"value {v['validation/value_loss']:.3f}{gap}, top-1 {v['validation/policy_top1']:.0%}, "
                f"value acc {v['validation/value_accuracy']:.0%} on {v['validation/positions']:,.0f} positions")

    def _status_line(self, running: Running, width: int | None = None) -> str:
        means = running.means()
        window = self.window
        cap = f"/{window.max_sample_reuse:g}" if window.max_sample_reuse > 0 else ""
        total = f"/{self.settings.training_steps:,}" if self.settings.training_steps else ""
        losses = (f"loss {means['total']:.3f} (policy {means['policy']:.3f}, value {means['value']:.3f})"
                  if means else "loss -")
        parts = [f"step {self.step:,}{total}", losses, f"{running.samples_per_s:,.0f} samples/s",
                 f"window {len(window):,}", f"reuse {self._feed.average_reuse:.2f}{cap}",
                 f"lr {self.settings.learning_rate(max(self.step - 1, 0)):.3g}"]
        if running.waited >= 0.5:
            parts.append(f"waited {running.waited:,.0f} s")
        line = fit_line(parts, width)
        if self.validation:
            line += "\n" + fit_line([f"validation at {self.validation_text()}"], width)
        return line

    def precision_text(self) -> str:
        """Says where and in what precision the learner trains, and why ('trains on cpu in bf16 (...)')."""
        return f"trains on {self.device} in {self.trainer.precision_choice.reason}"

    def waiting_text(self) -> str:
        """Says why the learner could not take its next batch now ('' when it could): the window's size against
        learner.min_window_positions, or the reuse cap."""
        size = self.settings.batch_size - (self.settings.mix_rows(self.step) if self.mix is not None else 0)
        with self._feed.lock:
            self.window.refresh(force=True)
            return self._waiting_text(size) if self.window.waiting_reason(size) is not None else ""

    def _waiting_text(self, size: int) -> str:
        window = self.window
        if window.waiting_reason(size) == WAIT_POSITIONS:
            return (f"waiting for self-play: {len(window):,} of {window.min_positions:,} positions "
                    f"(learner.min_window_positions) in {window.directory}; self-play writes them "
                    f"(alphazero selfplay --run {self.run.root})")
        return (f"waiting for new self-play positions: the reuse cap of {window.max_sample_reuse:g} samples per "
                f"position is reached ({window.samples_drawn:,} samples of {window.positions_added:,} positions; "
                f"learner.max_sample_reuse)")

    def close(self) -> None:
        """Closes the TensorBoard writer and the progress line."""
        self._progress.close()
        if self._writer is not None:
            with contextlib.suppress(OSError):
                self._writer.close()
            self._writer = None


def run_learner(run: RunDir, config: Config, *, steps: int | None = None, device: str | None = None,
                stop: threading.Event | None = None, on_checkpoint: OnCheckpoint | None = None,
                progress: bool = True, from_step: int | None = None) -> int:
    """Resumes or starts the run's learner and trains it; returns the final step.

    Trains ``steps`` more steps (None: until ``learner.training_steps``, or for
    ever when that is 0) or until ``stop`` is set; resumes from checkpoint
    ``from_step`` instead of the newest (Learner.resume); the other arguments
    are Learner's.

    Raises:
        UserError: an unusable device, a corrupt checkpoint, a full disk, a
            non-finite loss.
        KeyboardInterrupt: after a Ctrl-C in the main thread (the last step saved first).
    """
    with Learner(run, config, device=device, on_checkpoint=on_checkpoint, progress=progress) as learner:
        learner.resume(from_step)
        return learner.train(steps, stop=stop)
