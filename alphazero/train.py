"""`alphazero train`: self-play actors and the learner together on this machine.

Part of the command line (like cli.py, the only place that brings selfplay
and learner together): a local Ray with one self-play actor per core, and
the learner in a thread of this process. The learner's checkpoints are pushed
to the actors as they are written (and, with eval.every_steps, rated in the
background); Ctrl-C stops both cleanly (finished games and the last training
step are saved) and a rerun resumes.
"""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path

from alphazero.errors import UserError
from alphazero.rundir import add_run_arguments, open_run_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    parser.add_argument("--minutes", type=float, default=None, help="stop after this many minutes (default: Ctrl-C)")
    parser.add_argument("--actors", type=int, default=None,
                        help="self-play actors (default: selfplay.actors, 0 = one per CPU core)")
    parser.add_argument("--device", default=None, help="learner device: auto, cpu, cuda or cuda:N")
    parser.add_argument("--gpus", type=float, default=0.0,
                        help="GPUs for self-play inference (default 0); the preset's selfplay.gpu_* defaults apply")
    parser.add_argument("--quiet", action="store_true", help="no live progress lines")


def run(args: argparse.Namespace) -> None:
    """Trains until --minutes pass or Ctrl-C; prints what was done.

    Raises:
        UserError: bad options, a run of another configuration, a corrupt
            checkpoint, or a failure in the learner or an actor.
    """
    from eval.evaluate import PeriodicEvaluation
    from learner.loop import Learner
    from selfplay.cli import actor_count
    from selfplay.driver import connect_ray, run_selfplay
    from selfplay.publish import WeightPublisher

    if args.minutes is not None and args.minutes <= 0:
        raise UserError(f"--minutes must be positive, got {args.minutes}")
    run_dir, config = open_run_from_args(args)
    actors = actor_count(args.actors, config.selfplay.actors, gpus=args.gpus, gpu_configured=config.selfplay.gpu_actors)
    started_ray = connect_ray(None, num_cpus=max(actors + 1, os.cpu_count() or 1), num_gpus=args.gpus or None)
    stop = threading.Event()
    failure: list[BaseException] = []
    try:
        publisher = WeightPublisher(run_dir.root, None)
        evaluation = PeriodicEvaluation(run_dir, config, config.eval.every_steps)

        def on_checkpoint(step: int, path: Path) -> None:
            publisher.publish(step, path)
            evaluation(step, path)

        # One thread: the cores belong to the self-play actors.
        learner = Learner(run_dir, config, device=args.device, on_checkpoint=on_checkpoint, progress=False,
                          threads=1)
        learner.resume()
        if learner.saved_step is None:
            learner.save()  # actors and learner start from the same weights

        def learn() -> None:
            try:
                learner.train(stop=stop)
            except BaseException as error:  # noqa: BLE001 - handed to the main thread
                failure.append(error)
                stop.set()

        thread = threading.Thread(target=learn, name="learner", daemon=True)
        thread.start()
        try:
            totals = run_selfplay(run_dir, config, actors=actors, gpus=args.gpus, minutes=args.minutes,
                                  progress=not args.quiet, stop=stop, status_suffix=learner.status)
        finally:
            stop.set()
            thread.join()
            learner.close()
            evaluation.close()
        if failure:
            raise failure[0]
        print(f"train: {totals.games} games, {totals.moves:,} positions; learner at step {learner.step:,}; "
              f"run in {run_dir.root} (tensorboard --logdir {run_dir.tb})")
    finally:
        if started_ray:
            import ray

            ray.shutdown()
