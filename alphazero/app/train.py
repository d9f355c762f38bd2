"""`alphazero train`: self-play actors and the learner together on this machine.

Part of the command line (like cli.py, the only place that brings selfplay
and learner together): a local Ray with one self-play actor per core, and
the learner in a thread of this process. The learner's checkpoints are pushed
to the actors as they are written (and, with eval.every_steps, rated in the
background); Ctrl-C stops both cleanly (finished games and the last training
step are saved) and a rerun resumes.

``--init FILE_OR_RUN`` starts a new run from given weights (a model file, a
checkpoint, a run's latest checkpoint, or ``builtin``): the run takes that
network's architecture, and its first checkpoint (step 0, fresh optimiser)
holds those weights, so self-play starts from them. A run that already has
checkpoints is refused: it resumes from its own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from alphazero.arguments import gpu_count, positive_float
from alphazero.config import DEFAULT_PRESET, Config, apply_overrides
from alphazero.console import fit_line
from alphazero.errors import UserError
from alphazero.presets import INIT_DEFAULTS, get_preset
from alphazero.store.rundir import RunDir, add_run_arguments, learner_lock, open_run_from_args

if TYPE_CHECKING:  # imported where used: `alphazero perft` must not load torch
    from alphazero.store.sources import Weights
    from eval.evaluate import PeriodicEvaluation
    from learner.loop import Learner
    from selfplay.driver import Totals


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from learner.cli import add_from_checkpoint_argument

    add_run_arguments(parser)
    parser.add_argument("--minutes", type=positive_float, default=None,
                        help="stop after this many minutes (default: Ctrl-C)")
    parser.add_argument("--actors", type=int, default=None,
                        help="self-play actors (default: selfplay.actors, 0 = one per CPU core)")
    parser.add_argument("--device", default=None, help="learner device: auto, cpu, cuda or cuda:N")
    parser.add_argument("--gpus", type=gpu_count, default=0.0,
                        help="GPUs for self-play inference (default 0); the preset's selfplay.gpu_* defaults apply")
    parser.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no live progress lines")
    add_from_checkpoint_argument(parser)
    parser.add_argument("--init", metavar="FILE_OR_RUN", default=None,
                        help="start a new run from these weights: a model file, a checkpoint, a run directory "
                             "(its latest checkpoint), 'builtin' (the network that ships) or 'builtin-DATE' "
                             "(one that shipped before)")


def run(args: argparse.Namespace) -> None:
    """Trains until --minutes pass, the learner reaches learner.training_steps, or Ctrl-C; prints what was done.

    Holds the run's learner lock (alphazero.store.rundir.learner_lock) throughout.

    Raises:
        UserError: bad options, a run of another configuration, another
            learner on the run, a corrupt checkpoint, or a failure in the
            learner or an actor.
    """
    launched = time.time()  # the run's milestones count from here (compilation and Ray's start included)
    if args.from_checkpoint is not None and args.from_checkpoint < 0:
        raise UserError(f"--from-checkpoint takes a step (0 or more), got {args.from_checkpoint}")
    if args.init is not None and args.from_checkpoint is not None:
        raise UserError("--init starts a new run and --from-checkpoint resumes an old one: give one of them")
    from learner.init_weights import check_init_settings, read_init  # (`alphazero pretrain --init` too)

    init = read_init(args.init, args.run) if args.init is not None else None
    if init is not None:
        check_init_settings(init, args.preset, args.overrides)
    defaults = init_defaults(init, args.preset, args.overrides) if init is not None else []
    run_dir, config = open_run_from_args(args, init.overrides() if init is not None else (), defaults=defaults)
    if init is not None:
        print(f"train: fine-tuning defaults for --init (--set changes any): {' '.join(defaults)}", flush=True)
    with learner_lock(run_dir, "alphazero train"):
        _train(args, run_dir, config, init, launched)


def _train(args: argparse.Namespace, run_dir: RunDir, config: Config, init: Weights | None, launched: float) -> None:
    """Runs self-play and the learner on an open run (the learner lock held)."""
    from selfplay.cli import actor_count
    from selfplay.driver import connect_ray

    actors = actor_count(args.actors, config.selfplay.actors, gpus=args.gpus,
                         gpu_configured=config.selfplay.gpu_actors)
    # The machine's cores, not the actors asked: more actors than fit are not started (selfplay.driver says so).
    started_ray = connect_ray(None, num_cpus=os.cpu_count() or 1, num_gpus=args.gpus or None)
    try:
        with checkpoint_hooks(run_dir, config, publish=True) as hooks:
            _learn_and_play(args, run_dir, config, init, actors, hooks, launched)
    finally:
        if started_ray:
            import ray

            ray.shutdown()


def _learn_and_play(args: argparse.Namespace, run_dir: RunDir, config: Config, init: Weights | None, actors: int,
                    hooks: CheckpointHooks, launched: float) -> None:
    """Runs the learner in a thread and self-play in this one until the end; prints what was done."""
    import torch

    from learner.init_weights import start_from
    from learner.loop import Learner
    from selfplay.driver import run_selfplay

    stop = hooks.stopping  # set by the learner's end, the deadline or a signal: no push to actors that go
    failure: list[BaseException] = []
    # One torch thread in this process, the learner's: the cores belong to the self-play actors.
    torch.set_num_threads(1)
    learner = Learner(run_dir, config, device=args.device, on_checkpoint=hooks, progress=False)
    learner.resume(args.from_checkpoint)
    print(f"train: learner {learner.precision_text()}", flush=True)
    for note in learner.resume_notes:
        print(f"train: learner {note}", flush=True)
    if learner.resumed_from is None:
        if init is not None:
            for line in start_from(learner.model, init):
                print(f"train: {line}", flush=True)
        else:
            print("train: no checkpoint yet: the learner starts at step 0", flush=True)
        learner.save()  # actors and learner start from the same weights
    if (head := action_value_line(config)) is not None:
        print(f"train: {head}", flush=True)

    def learn() -> None:
        try:
            learner.train(stop=stop)
        except BaseException as error:  # noqa: BLE001 - handed to the main thread
            failure.append(error)
        stop.set()  # a failure, or learner.training_steps reached: self-play for no learner stops too

    thread = threading.Thread(target=learn, name="learner", daemon=True)
    thread.start()
    seen: list[Totals] = []  # the driver's totals (one object, updated in place), for the live line's milestones

    def keep(totals: Totals) -> None:
        if not seen:
            seen.append(totals)

    def suffix(width: int | None) -> str:
        first = milestones_text(launched, seen[0] if seen else None, learner)
        return (f"{learner.status(width)}\n{fit_line([hooks.evaluation.status()], width)}\n"
                f"{fit_line([first], width)}")

    try:
        totals = run_selfplay(run_dir, config, actors=actors, gpus=args.gpus, minutes=args.minutes,
                              progress=not args.quiet, stop=stop, on_update=keep,
                              status_suffix=suffix)
    finally:
        stop.set()  # hooks.stopping: ends the evaluation too, and no new one starts for the last checkpoint
        thread.join()
        learner.close()
    if failure:
        raise failure[0]
    if 0 < config.learner.training_steps <= learner.step:
        print(f"train: training is finished: step {learner.step:,} reached learner.training_steps", flush=True)
    print(f"train: {totals.games} games, {totals.moves:,} positions; learner at step {learner.step:,}; "
          f"run in {run_dir.root} (tensorboard --logdir {run_dir.tb})")
    print(f"train: {milestones_text(launched, totals, learner)}")
    waiting = learner.waiting_text()
    if waiting:  # with many games in flight (GPU presets) the first ones finish late: say so, not just "step 0"
        print(f"train: the learner is {waiting}")
    print(f"train: {totals.resign_status}")
    if totals.lost_actors:
        print(f"train: {totals.lost_text()}")
    if learner.validation:
        print(f"train: validation at {learner.validation_text()}")
    print(f"train: {hooks.evaluation.status()}")


def action_value_line(config: Config) -> str | None:
    """Says that self-play teaches the run's action-value head (docs/methods.md, "Self-play teaches the
    head"); None for a network without one, the default: a user who did not ask for the head hears nothing
    of it."""
    if config.network.action_value_head == "none":
        return None
    return ("the action-value head learns the search's value of every move self-play visits "
            "(docs/methods.md, \"Self-play teaches the head\")")


def milestones_text(launched: float, totals: Totals | None, learner: Learner) -> str:
    """Says how many seconds after ``launched`` (time.time()) the run's first game ended, its learner made its first
    step and wrote its first checkpoint after one: how soon a run learns (issue 48), 'not yet' for each still to come.

    Counted in this sitting: a resumed run's learner counts its first step since the restart.
    """
    def after(moment: float | None) -> str:
        return f"{moment - launched:.0f} s" if moment is not None else "not yet"

    checkpoint = learner.first_checkpoint
    saved = f"{after(checkpoint[1])} (step {checkpoint[0]:,})" if checkpoint is not None else "not yet"
    return (f"from the start: first game {after(totals.first_game_time if totals is not None else None)}, "
            f"first learner step {after(learner.first_step_time)}, first checkpoint after it {saved}")


class CheckpointHooks:
    """What runs after each new checkpoint (the learner's on_checkpoint): the weights pushed to the run's
    self-play actors through Ray (when publishing), then the quick evaluation (eval.every_steps).

    Once ``stopping`` is set (`alphazero train`'s stop: self-play is writing its last games and ending its
    actors) no checkpoint is pushed: the learner's last one would wait on actors that are going. It is the
    evaluation's own stop, so that a running evaluation ends after its current move as the stop begins, not
    after self-play's end (a stop is bounded: issue 80).
    """

    def __init__(self, evaluation: PeriodicEvaluation, publish: Callable[[int, Path], object] | None) -> None:
        self.evaluation = evaluation
        self.publish = publish
        self.stopping = evaluation.stopping

    def __call__(self, step: int, path: Path) -> None:
        if self.publish is not None and not self.stopping.is_set():
            self.publish(step, path)
        self.evaluation(step, path)


@contextlib.contextmanager
def checkpoint_hooks(run_dir: RunDir, config: Config, *, publish: bool,
                     address: str | None = None) -> Iterator[CheckpointHooks]:
    """Builds the checkpoint hooks of `alphazero train` and `alphazero learn`, the one place they are built.

    ``publish``: push each checkpoint's weights to the run's named self-play
    actors on the Ray cluster at ``address`` (None: the one this process is
    connected to, or a new local one). At the end the evaluation in progress
    is waited for and a Ray the publisher started is shut down.
    """
    from eval.evaluate import PeriodicEvaluation

    with contextlib.ExitStack() as stack:
        evaluation = PeriodicEvaluation(run_dir, config, config.eval.every_steps)
        stack.callback(evaluation.close)
        publisher = None
        if publish:
            from selfplay.publish import WeightPublisher

            publisher = stack.enter_context(WeightPublisher(run_dir.root, address)).publish
        yield CheckpointHooks(evaluation, publisher)


def init_defaults(init: Weights, preset: str | None, overrides: Sequence[str]) -> list[str]:
    """Gets the config a run started from ``--init`` takes before the user's --set overrides.

    INIT_DEFAULTS (alphazero.presets: each cites its experiment), and a
    constant learning rate continuing from where the weights' own training
    ended (Weights.final_learning_rate, scaled to this run's batch size)
    unless the overrides set the learning-rate schedule themselves or the
    weights do not say how they were trained.
    """
    defaults = list(INIT_DEFAULTS)
    schedule_keys = ("learner.learning_rates", "learner.lr_boundaries", "learner.scale_lr", "learner.warmup_steps")
    if any(item.split("=", 1)[0].strip() in schedule_keys for item in overrides):
        return defaults
    base = apply_overrides(get_preset(preset or DEFAULT_PRESET), [*defaults, *overrides])  # a --set may need them
    rate = init.final_learning_rate(base.learner.batch_size)
    if rate is not None and rate > 0:
        defaults += [f"learner.learning_rates={rate:.6g}", "learner.lr_boundaries=", "learner.scale_lr=false",
                     "learner.warmup_steps=0"]
    return defaults
