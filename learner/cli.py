"""`alphazero learn`: the central learner of a run, as a command.

``alphazero learn [--run DIR] [--steps N] [--device D] [--from-checkpoint STEP] [--preset P] [--set key=value ...]``
trains on the shards self-play writes into DIR/selfplay and checkpoints into
DIR/checkpoints, resuming from the newest checkpoint (or from STEP's). One
learner per run: a second one is refused, naming the first one's pid and
host. A DIR without config.toml becomes a new run with the preset (tiny by
default) and the ``--set`` overrides, as every command that writes a run
does; the learner then waits, saying so, until self-play has written
``learner.min_window_positions`` positions. On an existing run ``--set`` changes this process only (fixed
fields such as the network may not change: RunDir says which).

The CLI module wires it in with ``add_arguments(subparser)`` and
``run(args, on_checkpoint=hook)``: the hook (for pushing weights to Ray actors
under ``--address``) is called as ``hook(step, checkpoint_path)`` after every
checkpoint. This module imports torch only when ``run`` is called.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from alphazero.errors import UserError
from alphazero.store.rundir import add_run_arguments, learner_lock, open_run_from_args

__all__ = ["add_arguments", "add_from_checkpoint_argument", "run"]

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the options of `alphazero learn` to ``parser``."""
    add_run_arguments(parser)
    parser.add_argument("--steps", type=int, metavar="N",
                        help="train N more steps, then save and stop (default: until learner.training_steps)")
    parser.add_argument("--device", metavar="DEVICE",
                        help="training device, overriding learner.device: auto, cpu, cuda or cuda:N")
    add_from_checkpoint_argument(parser)
    group = parser.add_argument_group("training details")
    group.add_argument("--clip-grad-norm", type=float, metavar="NORM",
                       help="clip the gradient's global norm to NORM: --set learner.clip_grad_norm=NORM "
                            "(default: the config's, 0 = measure only)")
    group.add_argument("--threads", type=int, default=0, metavar="N",
                       help="torch CPU threads of this process (default: torch's choice)")
    group.add_argument("--poll-seconds", type=float, metavar="S",
                       help="how often a waiting learner looks for new shards: --set learner.poll_seconds=S "
                            "(default: the config's, 2)")
    group.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress line")


def add_from_checkpoint_argument(parser: argparse.ArgumentParser) -> None:
    """Adds --from-checkpoint STEP (learn and train): resume from an earlier checkpoint than LATEST."""
    parser.add_argument("--from-checkpoint", type=int, default=None, metavar="STEP",
                        help="resume from the checkpoint of STEP instead of the newest (a corrupt LATEST, or going "
                             "back): newer checkpoints are moved to a folder beside them, not deleted")


def _check(args: argparse.Namespace) -> None:
    """Checks option values argparse cannot.

    Raises:
        UserError: a value out of range.
    """
    if args.steps is not None and args.steps < 1:
        raise UserError(f"--steps must be at least 1, got {args.steps}")
    if args.clip_grad_norm is not None and not args.clip_grad_norm > 0:
        raise UserError(f"--clip-grad-norm must be positive, got {args.clip_grad_norm}")
    if args.threads < 0:
        raise UserError(f"--threads must be 0 (torch's choice) or more, got {args.threads}")
    if args.poll_seconds is not None and not args.poll_seconds > 0:
        raise UserError(f"--poll-seconds must be positive, got {args.poll_seconds}")
    if args.from_checkpoint is not None and args.from_checkpoint < 0:
        raise UserError(f"--from-checkpoint takes a step (0 or more), got {args.from_checkpoint}")


def run(args: argparse.Namespace, on_checkpoint: Callable[[int, Path], None] | None = None) -> int:
    """Runs the learner of ``args.run``; returns the final step.

    Holds the run's learner lock (alphazero.store.rundir.learner_lock) throughout.

    Raises:
        UserError: bad options, a run of another configuration, another
            learner on the run, an unusable device, a corrupt checkpoint, a full disk.
        KeyboardInterrupt: Ctrl-C (the step in flight is finished and saved first).
    """
    import torch

    from learner.loop import run_learner

    _check(args)
    shorthands = [f"learner.{name}={value}" for name, value in
                  (("clip_grad_norm", args.clip_grad_norm), ("poll_seconds", args.poll_seconds)) if value is not None]
    run_dir, config = open_run_from_args(args, shorthands, announce=not args.quiet)
    if args.threads:
        torch.set_num_threads(args.threads)  # this process's: the command owns it, not the Learner
    with learner_lock(run_dir, "alphazero learn"):
        return run_learner(run_dir, config, steps=args.steps, device=args.device, on_checkpoint=on_checkpoint,
                           progress=not args.quiet, from_step=args.from_checkpoint)
