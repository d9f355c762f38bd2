"""`alphazero learn` and `alphazero pretrain`: the learner of a run, as commands.

``alphazero pretrain --run DIR --pgn FILE ...`` or ``--stockfish NODES
--positions P [--positions-from FILE ...]`` writes supervised data into
DIR/pretrain/ (learner.pgn_data, learner.labels) and trains the run's network
on it (learner.pretrain); ``--recipe NAME_OR_FILE --data FOLDER`` runs a
recipe's sources, links and training instead (learner.recipe,
learner.recipe_run); see docs/usage.md. ``--init FILE_OR_RUN`` starts the
training from given weights (learner.init_weights), as ``alphazero train
--init`` starts self-play: e.g. the shipped network with a fresh
action-value head trained alone on Stockfish's per-move values.

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
checkpoint. This module imports torch only when a command runs.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from alphazero.arguments import positive_float, thread_count
from alphazero.errors import UserError
from alphazero.store.rundir import RunDir, add_run_arguments, learner_lock, open_run_from_args

if TYPE_CHECKING:
    from alphazero.store.sources import Weights

__all__ = ["add_arguments", "add_from_checkpoint_argument", "add_pretrain_arguments", "run", "run_pretrain"]

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the options of `alphazero learn` to ``parser``."""
    add_run_arguments(parser)
    parser.add_argument("--steps", type=int, metavar="N",
                        help="train N more steps, then save and stop (default: until learner.training_steps)")
    parser.add_argument("--device", metavar="DEVICE",
                        help="training device, overriding learner.device: auto, cpu, cuda or cuda:N")
    add_from_checkpoint_argument(parser)
    group = parser.add_argument_group("training details")
    group.add_argument("--clip-grad-norm", type=positive_float, metavar="NORM",
                       help="clip the gradient's global norm to NORM: --set learner.clip_grad_norm=NORM "
                            "(default: the config's, 0 = measure only)")
    group.add_argument("--threads", type=thread_count, default=0, metavar="N",
                       help="torch CPU threads of this process (default: torch's choice)")
    group.add_argument("--poll-seconds", type=positive_float, metavar="S",
                       help="how often a waiting learner looks for new shards: --set learner.poll_seconds=S "
                            "(default: the config's, 0.5)")
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


# --- alphazero pretrain ------------------------------------------------------------------------------


def add_pretrain_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the options of `alphazero pretrain` to ``parser``."""
    add_run_arguments(parser)
    data = parser.add_argument_group("data (written to RUN/pretrain/; give --pgn, --stockfish, or both)")
    data.add_argument("--pgn", nargs="+", default=[], metavar="FILE",
                      help="PGN files of games (.pgn, .pgn.gz, .pgn.bz2, .pgn.zst): each mainline position, "
                           "its played move (pretrain.pgn_smoothing) and an engine's evaluation in the comment of "
                           "the move before it (TCEC's wv=, [%%eval]), else the game's result (pretrain.pgn_value)")
    data.add_argument("--stockfish", type=int, default=None, metavar="NODES",
                      help="label positions with Stockfish's MultiPV scores at NODES nodes each")
    data.add_argument("--positions", type=int, default=None, metavar="P",
                      help="positions to label with --stockfish (a rerun labels only those not yet written)")
    data.add_argument("--positions-from", nargs="+", default=[], metavar="FILE",
                      help="label the positions of these PGN, EPD or Lichess puzzle CSV files (in order) instead "
                           "of random-opening games")
    data.add_argument("--held-out", nargs="*", default=[], metavar="FILE",
                      help="puzzle CSVs whose puzzles --positions-from leaves out, by PuzzleId and position "
                           "(default: the puzzle yardstick, eval/data/lichess_puzzles_sample.csv; none: --held-out "
                           "with no file)")
    data.add_argument("--workers", type=int, default=0, metavar="W",
                      help="Stockfish processes (default: one per CPU core)")
    recipe = parser.add_argument_group("a recipe (instead of --pgn and --stockfish: each source into "
                                       "RUN/sources/NAME/, then RUN/pretrain/ and RUN/mix/)")
    recipe.add_argument("--recipe", default=None, metavar="NAME_OR_FILE",
                        help="make the data a recipe names and train as it says, resuming (builtin: the built-in "
                             "network's, alphazero/weights/recipes/builtin.toml; or a recipe file)")
    recipe.add_argument("--data", type=Path, default=None, metavar="FOLDER",
                        help="with --recipe: the folder that holds the downloaded files the recipe reads")
    recipe.add_argument("--dry-run", action="store_true",
                        help="with --recipe: print the plan (the files each source reads, the shards taken, the "
                             "training settings) and stop")
    training = parser.add_argument_group("training")
    training.add_argument("--steps", type=int, default=None, metavar="N",
                          help="train until step N (overrides learner.training_steps; a rerun resumes towards it)")
    training.add_argument("--minutes", type=float, default=None, metavar="M",
                          help="stop training after M minutes of this command's training (saving the step "
                               "reached), or at --steps, whichever comes first")
    training.add_argument("--data-only", action="store_true", help="write the data, do not train")
    training.add_argument("--init", metavar="FILE_OR_RUN", default=None,
                          help="train from these weights, on a run without checkpoints (its data may be there "
                               "already): a model file, a checkpoint, a run directory (its latest checkpoint), "
                               "'builtin' or 'builtin-DATE'. The run takes their network (a run made by --data-only "
                               "too); --set network.action_value_head=logit gives weights without the head a fresh "
                               "one, and learner.trainable=action_value_head (with learner.freeze_batch_norm=true) "
                               "trains it alone. Unlike train --init no fine-tuning defaults: the run's learner "
                               "settings and --set apply")
    training.add_argument("--export", type=Path, default=None, metavar="FILE",
                          help="when training is done, save the network as a model file (e.g. "
                               "alphazero/weights/builtin.pt)")
    training.add_argument("--notice", default=None, metavar="TEXT",
                          help="with --export: the data's attribution and licence (e.g. what CC BY-SA asks), "
                               "written into the model file; the UCI engine, doctor and train --init show it")
    training.add_argument("--device", default=None, help="training device: auto, cpu, cuda or cuda:N")
    training.add_argument("--threads", type=thread_count, default=0, metavar="N",
                          help="torch CPU threads for training (default: torch's choice)")
    parser.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress bars")


def _check_pretrain(args: argparse.Namespace) -> None:
    """Checks option values argparse cannot.

    Raises:
        UserError: a missing or out-of-range value.
    """
    if args.recipe is None and (args.data is not None or args.dry_run):
        raise UserError("--data and --dry-run go with --recipe NAME_OR_FILE")
    if args.init is not None and (args.recipe is not None or args.data_only):
        raise UserError("--init FILE_OR_RUN starts the training from those weights: it goes without --recipe "
                        "and --data-only")
    if args.recipe is not None:
        given = [flag for flag, value in (("--pgn", args.pgn), ("--stockfish", args.stockfish is not None),
                                          ("--positions", args.positions is not None),
                                          ("--positions-from", args.positions_from), ("--preset", args.preset))
                 if value]
        if given:
            raise UserError(f"--recipe names its own data and preset: drop {', '.join(given)}")
        if args.data is None:
            raise UserError("--recipe needs --data FOLDER, the folder that holds the files it reads")
    if (args.stockfish is None) != (args.positions is None):
        raise UserError("--stockfish NODES and --positions P go together")
    if args.positions_from and args.stockfish is None:
        raise UserError("--positions-from names positions to label: add --stockfish NODES --positions P")
    if args.workers < 0:
        raise UserError(f"--workers must be 0 (the default) or more, got {args.workers}")
    if args.steps is not None and args.steps < 0:
        raise UserError(f"--steps must be 0 or more, got {args.steps}")
    if args.notice is not None and args.recipe is not None and not args.notice.strip():
        raise UserError("--notice TEXT must not be empty")
    if args.notice is not None and args.recipe is None and (args.export is None or not args.notice.strip()):
        raise UserError("--notice TEXT goes with --export FILE, and TEXT must not be empty")
    if args.minutes is not None and not 0 < args.minutes < math.inf:  # inf would overflow the deadline's timer
        raise UserError(f"--minutes must be positive and finite, got {args.minutes}")
    for path in [*args.pgn, *args.positions_from, *args.held_out]:
        if not Path(path).is_file():
            what = "is a directory, not a file" if Path(path).is_dir() else "does not exist"
            raise UserError(f"{path} {what}")
        if not os.access(path, os.R_OK):
            raise UserError(f"cannot read {path}: permission denied")


def run_pretrain(args: argparse.Namespace) -> None:
    """Runs `alphazero pretrain`: data into RUN/pretrain, then training, then the export.

    Raises:
        UserError: bad options or input files, a missing Stockfish, labels of
            other settings in the run, no data to train on, a full disk.
        KeyboardInterrupt: after Ctrl-C (written shards and the last training step are kept).
    """
    _check_pretrain(args)
    if args.recipe is not None:
        _run_recipe(args)
        return
    init = _read_init(args) if args.init is not None else None
    run_dir, config = open_run_from_args(args, init.overrides() if init is not None else (), announce=not args.quiet)
    if args.pgn:
        from learner.pgn_data import convert_pgn

        report = convert_pgn(run_dir.pretrain, args.pgn, smoothing=config.pretrain.pgn_smoothing,
                             shard_positions=config.pretrain.shard_positions, progress=not args.quiet,
                             use_evals=config.pretrain.pgn_value == "eval")
        print(report.summary(run_dir.pretrain), flush=True)
    if args.stockfish is not None:
        from learner.labels import LabelSettings
        from learner.pretrain import label_stockfish

        settings = LabelSettings.of(config.pretrain, nodes=args.stockfish, positions=args.positions,
                                    files=args.positions_from, held_out=args.held_out)
        label_stockfish(run_dir.pretrain, settings, workers=args.workers or os.cpu_count() or 1,
                        progress=not args.quiet)
    if args.data_only:
        return
    import torch

    from learner.pretrain import pretrain_network

    if args.threads:
        torch.set_num_threads(args.threads)  # this process's, set by the command
    pretrain_network(run_dir, config, steps=args.steps, minutes=args.minutes, device=args.device,
                     export=args.export, notice=args.notice, progress=not args.quiet, init=init)
    print(f"pretrain: done; start self-play from it with `alphazero train --run NEW_RUN --init {run_dir.root}`",
          flush=True)


def _read_init(args: argparse.Namespace) -> Weights:
    """Reads the --init weights and gives the run their network (a run without checkpoints; the network
    fields --set changes on top, as train --init takes them).

    Raises:
        UserError: the run has checkpoints, the weights cannot be read, a bad override.
    """
    from learner.init_weights import adopt_network, check_init_settings, read_init

    init = read_init(args.init, args.run)
    check_init_settings(init, args.preset, args.overrides)
    note = adopt_network(RunDir(args.run), [*args.overrides, *init.overrides()])
    if note is not None:
        print(f"pretrain: {note}", flush=True)
    return init


def _run_recipe(args: argparse.Namespace) -> None:
    """Runs `alphazero pretrain --recipe`: the plan (and with --dry-run only that), then the recipe's sources,
    links and training under the run's learner lock (one recipe at a time on a run).

    Raises:
        UserError: as learner.recipe.load_recipe, plan_recipe and run_recipe.
    """
    from learner.recipe import load_recipe
    from learner.recipe_run import describe_plan, plan_recipe, run_recipe

    recipe = load_recipe(args.recipe)
    plan = plan_recipe(recipe, args.data, args.run)
    if args.dry_run:
        print("\n".join(describe_plan(plan, held_out=args.held_out, export=args.export, notice=args.notice)),
              flush=True)
        return
    args.preset = recipe.training.preset
    run_dir, config = open_run_from_args(args, defaults=recipe.run_overrides(), announce=not args.quiet)
    if args.threads and not args.data_only:
        import torch

        torch.set_num_threads(args.threads)  # this process's, set by the command
    with learner_lock(run_dir, "alphazero pretrain --recipe"):
        run_recipe(plan, run_dir, config, held_out=args.held_out, workers=args.workers or os.cpu_count() or 1,
                   train=not args.data_only, steps=args.steps, minutes=args.minutes, device=args.device,
                   export=args.export, notice=args.notice, progress=not args.quiet)
    if not args.data_only:
        print(f"pretrain: done; start self-play from it with `alphazero train --run NEW_RUN --init {run_dir.root}`",
              flush=True)
