"""`alphazero selfplay`: self-play actors filling a run directory, locally or on a Ray cluster."""

from __future__ import annotations

import argparse
import os

from alphazero.errors import UserError
from alphazero.rundir import add_run_arguments, open_run_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    group = parser.add_argument_group("actors")
    group.add_argument("--actors", type=int, default=None,
                       help="self-play actors (default: selfplay.actors, 0 = one per CPU core)")
    group.add_argument("--games-per-actor", type=int, default=None, help="games each actor plays at once")
    group.add_argument("--sims", type=int, default=None, help="simulations per move (search.simulations)")
    group.add_argument("--address", default=None, help="Ray cluster address (HOST:PORT or 'auto'); default: local")
    group.add_argument("--gpus", type=float, default=0.0, help="GPUs for inference (default 0: CPU)")
    group.add_argument("--inference", choices=("local", "server"), default=None,
                       help="with GPUs: each actor runs the network ('local') or batching servers do ('server')")
    stop = group.add_mutually_exclusive_group()
    stop.add_argument("--minutes", type=float, default=None, help="stop after this many minutes")
    stop.add_argument("--games", type=int, default=None, help="stop after this many games")
    parser.add_argument("--quiet", action="store_true", help="no live progress line")


def overrides_from(args: argparse.Namespace) -> list[str]:
    """The overrides that shortcut flags (--sims, ...) stand for."""
    overrides = []
    for flag, key in (("games_per_actor", "selfplay.games_per_actor"), ("sims", "search.simulations"),
                      ("inference", "selfplay.inference")):
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{key}={value}")
    return overrides


def actor_count(requested: int | None, configured: int) -> int:
    count = requested if requested is not None else configured
    if count < 0:
        raise UserError(f"--actors must be at least 1, got {count}")
    return count or os.cpu_count() or 1


def run(args: argparse.Namespace) -> None:
    from selfplay.driver import run_selfplay

    run_dir, config = open_run_from_args(args, overrides_from(args))
    if args.minutes is not None and args.minutes <= 0 or args.games is not None and args.games < 1:
        raise UserError("--minutes must be positive and --games at least 1")
    totals = run_selfplay(run_dir, config, actors=actor_count(args.actors, config.selfplay.actors),
                          address=args.address, gpus=args.gpus, minutes=args.minutes, games=args.games,
                          progress=not args.quiet)
    print(f"self-play: {totals.games} games, {totals.moves} positions in {len(totals.shards)} shards "
          f"under {run_dir.selfplay}; {totals.resign_status}")
