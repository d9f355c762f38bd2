"""`alphazero selfplay`: self-play actors filling a run directory, locally or on a Ray cluster."""

from __future__ import annotations

import argparse
import os

from alphazero.arguments import gpu_count, positive_float, positive_int
from alphazero.errors import UserError
from alphazero.store.rundir import RunDir, add_run_arguments, open_run_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    group = parser.add_argument_group("actors")
    group.add_argument("--actors", type=int, default=None,
                       help="self-play actors (default: selfplay.actors, 0 = one per CPU core)")
    group.add_argument("--games-per-actor", type=int, default=None,
                       help="games each actor plays at once (with --gpus: selfplay.gpu_games_per_actor)")
    group.add_argument("--simulations", "--sims", dest="sims", type=int, default=None,
                       help="simulations per move (search.simulations)")
    group.add_argument("--address", default=None, help="Ray cluster address (HOST:PORT or 'auto'); default: local")
    group.add_argument("--transport", choices=("disk", "ray"), default=None,
                       help="how shards reach the run directory: actors write them ('disk': one machine or storage "
                            "every node sees) or send them through Ray to this node ('ray': no shared disk); "
                            "default: 'ray' with --address, else selfplay.transport")
    group.add_argument("--gpus", type=gpu_count, default=0.0,
                       help="GPUs for inference (default 0: CPU); the preset's selfplay.gpu_* defaults apply")
    group.add_argument("--inference", choices=("local", "server"), default=None,
                       help="with GPUs: each actor runs the network ('local') or batching servers do ('server')")
    stop = group.add_mutually_exclusive_group()
    stop.add_argument("--minutes", type=positive_float, default=None, help="stop after this many minutes")
    stop.add_argument("--games", type=positive_int, default=None, help="stop after this many games")
    parser.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no live progress line")


def overrides_from(args: argparse.Namespace) -> list[str]:
    """The overrides that shortcut flags (--sims, ...) stand for.

    With GPUs (--gpus > 0) --games-per-actor sets selfplay.gpu_games_per_actor,
    the field self-play then reads. With --address the transport is 'ray'
    unless --transport or --set selfplay.transport says otherwise.
    """
    overrides = []
    games_key = "selfplay.gpu_games_per_actor" if (getattr(args, "gpus", 0) or 0) > 0 else "selfplay.games_per_actor"
    for flag, key in (("games_per_actor", games_key), ("sims", "search.simulations"),
                      ("inference", "selfplay.inference"), ("transport", "selfplay.transport")):
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{key}={value}")
    transport_set = any(item.partition("=")[0].strip() == "selfplay.transport"
                        for item in getattr(args, "overrides", None) or [])
    if getattr(args, "address", None) and getattr(args, "transport", None) is None and not transport_set:
        overrides.append("selfplay.transport=ray")  # a cluster may have no disk that every node sees
    return overrides


def describe_transport(transport: str, run_dir: RunDir) -> str:
    """Gets the one line that says how shards reach the run directory."""
    if transport == "ray":
        return (f"self-play: transport ray: actors send finished shards through Ray to a sink on this node, "
                f"which writes them into {run_dir.selfplay}")
    return (f"self-play: transport disk: actors write shards into {run_dir.selfplay} themselves "
            f"(every node must see it; --transport ray if not)")


def actor_count(requested: int | None, configured: int, *, gpus: float = 0.0, gpu_configured: int = 0) -> int:
    """The number of self-play actors: --actors, else the config's (selfplay.gpu_actors with GPUs).

    0 means one per CPU core; with GPUs one fewer, as the driver (and the
    learner of `alphazero train`) keep a core busy feeding the GPU.

    Raises:
        UserError: a negative count.
    """
    if requested is None and gpus > 0:
        count = gpu_configured
        cores = (os.cpu_count() or 2) - 1
    else:
        count = requested if requested is not None else configured
        cores = os.cpu_count() or 1
    if count < 0:
        raise UserError(f"--actors must be at least 1, got {count}")
    return count or max(cores, 1)


def run(args: argparse.Namespace) -> None:
    from selfplay.driver import run_selfplay

    run_dir, config = open_run_from_args(args, overrides_from(args))
    actors = actor_count(args.actors, config.selfplay.actors, gpus=args.gpus, gpu_configured=config.selfplay.gpu_actors)
    print(describe_transport(config.selfplay.transport, run_dir), flush=True)
    totals = run_selfplay(run_dir, config, actors=actors,
                          address=args.address, gpus=args.gpus, minutes=args.minutes, games=args.games,
                          progress=not args.quiet)
    print(f"self-play: {totals.games} games, {totals.moves} positions in {len(totals.shards)} shards "
          f"under {run_dir.selfplay}; {totals.resign_status}")
    if totals.lost_actors:
        print(f"self-play: {totals.lost_text()}")
