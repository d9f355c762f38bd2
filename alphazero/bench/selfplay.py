"""`alphazero bench selfplay`: how much of self-play is the network.

Runs real self-play actors on a local Ray (a throwaway run directory, the
chosen preset, fresh weights), then times the same network alone, in this
process, at the batch size self-play reached. Printed: positions/s, the share
of the actors' wall time spent evaluating the network (everything else is
search, encoding, Python and Ray), and self-play's network throughput as a
ratio of the network alone.
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


def network_alone(config, batch: int, seconds: float) -> float:
    """Evaluations/s of the preset's network on one thread at batch size `batch`."""
    import torch

    from alphazero.network import AlphaZeroNet, Evaluator, pick_device
    from mcts_ext import Board
    from mcts_ext.encode import encode_boards, new_batch

    torch.set_num_threads(1)
    evaluator = Evaluator(AlphaZeroNet(config.network), pick_device(config.selfplay.device))
    planes, scalars = new_batch(batch)
    encode_boards([Board()] * batch, planes, scalars)
    evaluator.evaluate(planes, scalars)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        evaluator.evaluate(planes, scalars)
        done += batch
    return done / (time.perf_counter() - start)


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
        finally:
            for handle in handles:
                ray.kill(handle)
            if started:
                ray.shutdown()
    network = sum(s.network_seconds for s in stats)
    evaluations = sum(s.evaluations for s in stats)
    batches = max(sum(s.batches for s in stats), 1)
    moves = sum(s.moves for s in stats)
    batch = max(1, round(evaluations / batches))
    alone = network_alone(config, batch, min(args.seconds, 10.0))
    per_actor = evaluations / wall / args.actors
    print(f"self-play, preset {args.preset}: {args.actors} actor(s), {config.selfplay.games_per_actor} games each, "
          f"{config.search.simulations} simulations per move, {wall:.0f} s measured")
    print(f"  positions played:   {rate(moves / wall)}/s ({sum(s.games for s in stats)} games finished)")
    print(f"  network evaluations: {rate(evaluations / wall)}/s, average batch {evaluations / batches:.1f}")
    print(f"  share of actor wall time in the network: {network / (wall * args.actors):.1%} "
          f"(search, encoding, Python and Ray: {1 - network / (wall * args.actors):.1%})")
    print(f"  the network alone, batch {batch}, one thread: {rate(alone)} evaluations/s; "
          f"self-play reaches {ratio(per_actor, alone)} of it per actor")

