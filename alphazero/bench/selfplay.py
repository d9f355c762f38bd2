"""`alphazero bench selfplay`: how much of self-play is the network.

Runs real self-play actors on a local Ray (a throwaway run directory, the
chosen preset, fresh weights), then times the same network alone inside the
first actor, on a full batch of its own leaves (same process, same threads).
Printed: positions/s, the share of the actors' wall time spent evaluating the
network (everything else is search, encoding, Python and Ray), and
self-play's network throughput as a ratio of the network alone.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from alphazero.bench import rate, ratio


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="tiny", help="config preset (default: tiny)")
    parser.add_argument("--actors", type=int, default=1, help="self-play actors (default: 1)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured self-play time (default: 20)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override (repeatable)")


def run(args: argparse.Namespace) -> None:
    import ray

    from alphazero.config import apply_overrides, get_preset
    from alphazero.rundir import RunDir
    from selfplay.driver import _start_actors, connect_ray

    config = apply_overrides(get_preset(args.preset), args.overrides)
    with tempfile.TemporaryDirectory(prefix="alphazero-bench-") as folder:
        run_dir, config = RunDir.create_or_open(folder, config)
        started = connect_ray(None, num_cpus=args.actors)
        handles, _ = _start_actors(run_dir, config, args.actors, 0.0, "local", 0, None)
        try:
            ray.get([handle.play.remote(2.0) for handle in handles])  # warm-up: model build, first batches
            start = time.perf_counter()
            pending = {handle.play.remote(2.0): handle for handle in handles}
            stats = []
            while time.perf_counter() - start < args.seconds:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    handle = pending.pop(ref)
                    stats.append(ray.get(ref))
                    pending[handle.play.remote(2.0)] = handle
            stats.extend(ray.get(list(pending)))
            wall = time.perf_counter() - start
            alone = ray.get(handles[0].network_rate.remote(min(args.seconds, 10.0)))
        finally:
            for handle in handles:
                ray.kill(handle)
            if started:
                ray.shutdown()
    network = sum(s.network_seconds for s in stats)
    evaluations = sum(s.evaluations for s in stats)
    batches = max(sum(s.batches for s in stats), 1)
    moves = sum(s.moves for s in stats)
    per_actor = evaluations / wall / args.actors
    print(f"self-play, preset {args.preset}: {args.actors} actor(s), {config.selfplay.games_per_actor} games each, "
          f"{config.search.simulations} simulations per move, {wall:.0f} s measured")
    print(f"  positions played:   {rate(moves / wall)}/s ({sum(s.games for s in stats)} games finished)")
    print(f"  network evaluations: {rate(evaluations / wall)}/s, average batch {evaluations / batches:.1f}")
    print(f"  share of actor wall time in the network: {network / (wall * args.actors):.1%} "
          f"(search, encoding, Python and Ray: {1 - network / (wall * args.actors):.1%})")
    print(f"  the network alone in an actor, on a full batch of its leaves: {rate(alone)} evaluations/s; "
          f"self-play reaches {ratio(per_actor, alone)} of it per actor")

