"""`alphazero bench selfplay`: how much of self-play is the network.

Runs real self-play actors on a local Ray (a throwaway run directory, the
chosen preset, fresh weights; with --gpus the preset's selfplay.gpu_*
defaults), local inference or an inference server (--inference), then times
the same network alone through the same path (the first actor's evaluator, or
the server) on that many of the actors' own leaves as self-play's average
batch (same process, same threads). Everything is measured after a warm-up
(each actor's first play() call: its first batches and parity checks; the
graphs and compilations are made when the actors start). Printed:
evaluations/s, positions/s, the average batch, the GPU's busy share (the
device's own utilisation, sampled by NVML every half second; '-' on the CPU)
beside the passes' own GPU time (CUDA events from the forward pass to the
copy out, leaving out passes that captured, compiled or were checked), the
share of the actors' wall time spent waiting for the network, and
self-play's evaluations/s as a ratio of the network alone, and how soon the
first game ended (the games all start at once, on actors already up).

With ``--games 2048,1024,512,...`` the same actors measure each number of
games in flight in turn, each from new games, and a table gives each one's
evaluations/s as a share of the best, how often each game moves, its first
game, and the knee: the fewest games within KNEE_SHARE of the best (issue
48: throughput and latency both, for the GPU defaults).

With ``--transport ray`` the actors send their shards to a shard sink as
`alphazero selfplay` does on a cluster, and the bench also prints the load
of the sink (its busy and CPU time per shard, bytes per position) and of
this process, which plays the driver's part (its CPU per play() call, and
the resignation calibration's time per shard it reads): the figures that
scale with the number of actors.
"""

from __future__ import annotations

import argparse
import functools
import math
import resource
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from alphazero.app.bench import int_list, rate, ratio
from alphazero.arguments import gpu_count, positive_float, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="tiny", help="config preset (default: tiny)")
    parser.add_argument("--actors", type=positive_int, default=1, help="self-play actors (default: 1)")
    parser.add_argument("--seconds", type=positive_float, default=20.0, help="measured self-play time (default: 20)")
    parser.add_argument("--gpus", type=gpu_count, default=0.0,
                        help="GPUs for inference (default 0: CPU); the preset's selfplay.gpu_* defaults apply")
    parser.add_argument("--inference", choices=("local", "server"), default=None,
                        help="each actor runs the network ('local') or one inference server per GPU (one on the "
                             "CPU) batches them ('server'); default: the preset's selfplay.inference with GPUs, "
                             "else local")
    parser.add_argument("--transport", choices=("disk", "ray"), default=None,
                        help="actors write their shards ('disk') or send them to a shard sink ('ray'), which adds "
                             "the sink's and the driver's load to the figures (default: the preset's "
                             "selfplay.transport)")
    parser.add_argument("--games", type=functools.partial(int_list, what="games per actor"), default=None,
                        metavar="COUNTS",
                        help="games in flight per actor, comma-separated: each measured in turn by the same actors, "
                             "from new games, then a table with the knee (the fewest games within 90%% of the "
                             "best evaluations/s); default: the preset's (selfplay.gpu_games_per_actor with --gpus)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override (repeatable)")


def _measure(handles: list[Any], seconds: float, warm: Callable[[], None] = lambda: None) -> tuple[list[Any], float]:
    """Runs play() on every actor for about `seconds` after a warm-up; returns their stats and the wall time.

    ``warm()`` runs between the two: where the caller takes its "before" snapshots
    (servers, sink, CPU), so that nothing of the warm-up counts.
    """
    import ray

    ray.get([handle.play.remote(2.0) for handle in handles])  # warm-up: first batches, parity checks
    warm()
    start = time.perf_counter()
    pending = {handle.play.remote(2.0): handle for handle in handles}
    stats = []
    while time.perf_counter() - start < seconds:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            handle = pending.pop(ref)
            stats.append(ray.get(ref))
            pending[handle.play.remote(2.0)] = handle
    stats.extend(ray.get(list(pending)))
    return stats, time.perf_counter() - start


SAMPLE_SECONDS = 0.5  # how often the GPUs' own utilisation is read


def _gpu_utilisation(index: int) -> float:
    """Reads GPU ``index``'s utilisation in [0, 1]: the share of the last sample period (NVML's, 1/6 to 1 s)
    in which a kernel ran on it, whoever's.

    Raises:
        RuntimeError: neither NVML (through torch) nor nvidia-smi could say.
    """
    import subprocess

    import torch

    try:
        return torch.cuda.utilization(index) / 100
    except Exception:  # noqa: BLE001 - no pynvml: ask nvidia-smi
        pass
    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=utilization.gpu",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5, check=True)
        return float(out.stdout.strip()) / 100
    except (OSError, ValueError, subprocess.SubprocessError) as error:
        raise RuntimeError(f"cannot read GPU {index}'s utilisation: {error}") from None


class DeviceBusy:
    """Samples the GPUs' own utilisation every SAMPLE_SECONDS in a thread, from start() to stop().

    ``share()`` is the mean over the samples and the GPUs: the device's busy
    share, which CUDA events summed over actors that share a GPU overstate.
    """

    def __init__(self, gpus: int, read: Callable[[int], float] = _gpu_utilisation) -> None:
        self.gpus = gpus
        self.read = read
        self.samples: list[float] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="gpu-utilisation", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                self.samples.append(sum(self.read(i) for i in range(self.gpus)) / self.gpus)
            except RuntimeError as error:
                self.error = str(error)
                return

    def share(self) -> float | None:
        """The mean utilisation, or None without a sample."""
        return sum(self.samples) / len(self.samples) if self.samples else None


def _cpu_seconds() -> float:
    """CPU time of this process so far, all its threads (Ray's included), user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


IDLE_SECONDS = 5.0  # the baseline of the driver's and the sink's CPU: Ray's own threads, with no play() running


def _idle_cpu(sink: Any, seconds: float) -> tuple[float, float]:
    """Measures the CPU seconds per second of this process and of the sink while no actor plays."""
    import ray

    before, cpu = ray.get(sink.stats.remote()), _cpu_seconds()
    time.sleep(seconds)
    after = ray.get(sink.stats.remote())
    return (_cpu_seconds() - cpu) / seconds, (after["cpu_seconds"] - before["cpu_seconds"]) / seconds


def _stored(run_dir: Any, config: Any) -> dict[str, float]:
    """What the run's shards hold (shards, games, positions, bytes of npz and PGN files) and the time the
    driver's resignation calibration takes to read them once."""
    from alphazero.store.resign import ResignCalibrator
    from alphazero.store.shards import list_shards, read_shard_games

    shards = list_shards(run_dir.selfplay)
    games = [game for path in shards for game in read_shard_games(path)]
    size = sum(path.stat().st_size for path in [*shards, *run_dir.games.glob("*.pgn")])
    calibrator = ResignCalibrator(run_dir, config.search)
    start = time.perf_counter()
    calibrator.refresh()
    return {"shards": len(shards), "games": len(games), "positions": sum(game["samples"] for game in games),
            "bytes": size, "calibration_seconds": time.perf_counter() - start}


FLOAT32_EAGER = ["selfplay.cpu_precision=float32", "selfplay.cpu_forward=eager"]
"""The baseline on a CPU: the pass self-play ran before issue 32."""


KNEE_SHARE = 0.9
"""The knee of a --games sweep: the fewest games in flight whose evaluations/s reach this share of the best."""


@dataclass(frozen=True)
class Point:
    """What one number of games in flight gave."""

    games: int                    # games in flight per actor
    evaluations_per_s: float
    positions_per_s: float
    first_game_s: float | None    # from the games' start to the first finished game; None: none in `looked_s`
    looked_s: float               # how long the first game was waited for (the warm-up and the measured time)


def run(args: argparse.Namespace) -> None:
    """Measures self-play as configured (with --games, at each number of games in flight, then the table and its
    knee); on the CPU, when its network runs bf16, again in float32 eagerly (the pass before issue 32) beside it."""
    points, precision = _run_once(args, [], args.games or [None])
    if len(points) > 1:
        print(sweep_table(points, args.actors))
    if args.gpus == 0 and precision.startswith("bf16"):
        print(f"\nthe same as before bf16 and compiling on the CPU (--set {' --set '.join(FLOAT32_EAGER)}), "
              f"measured after it:")
        float32, _ = _run_once(args, FLOAT32_EAGER, [points[0].games])
        print(f"precision: the network runs {precision}: {rate(points[0].evaluations_per_s)} evaluations/s; "
              f"float32, eager: {rate(float32[0].evaluations_per_s)}; the default is "
              f"{ratio(points[0].evaluations_per_s, float32[0].evaluations_per_s)} that")


def _run_once(args: argparse.Namespace, extra: list[str], counts: list[int | None]) -> tuple[list[Point], str]:
    """Measures and prints self-play with ``extra`` overrides at each of ``counts`` games in flight per actor (None:
    the config's), with one set of actors made for the most; returns the points and what the actors' networks ran
    in ('' with a server)."""
    import ray

    from alphazero.config import apply_overrides
    from alphazero.presets import get_preset
    from alphazero.selfplay_devices import for_gpus
    from alphazero.store.rundir import RunDir
    from selfplay.driver import connect_ray
    from selfplay.fleet import SelfPlayFleet

    overrides = [*args.overrides, *([f"selfplay.transport={args.transport}"] if args.transport else []), *extra]
    most = max((count for count in counts if count is not None), default=None)
    if most is not None:
        overrides.append(f"selfplay.{'gpu_' if args.gpus > 0 else ''}games_per_actor={most}")
    config = for_gpus(apply_overrides(get_preset(args.preset), overrides), args.gpus)
    points: list[Point] = []
    precision = ""
    with tempfile.TemporaryDirectory(prefix="alphazero-bench-") as folder:
        run_dir, config = RunDir.create_or_open(folder, config)
        fleet = SelfPlayFleet(run_dir, config, actors=args.actors, gpus=args.gpus, inference=args.inference)
        started = connect_ray(None, num_cpus=fleet.cpus, num_gpus=args.gpus or None)
        try:
            with fleet:
                for count in counts:
                    games = count or config.selfplay.games_per_actor
                    # New games, all at once, on actors that are up: the first game's time counts from here.
                    ray.get([handle.restart_games.remote(games) for handle in fleet.actors])
                    point, precision = _measure_point(args, fleet, run_dir, config, games)
                    points.append(point)
        finally:
            if started:
                ray.shutdown()
    return points, precision


def _measure_point(args: argparse.Namespace, fleet: Any, run_dir: Any, config: Any,
                   games: int) -> tuple[Point, str]:
    """Measures and prints self-play with ``games`` in flight per actor, from their start; returns the point and
    what the actors' networks run in."""
    import ray

    from selfplay.worker import lane_games, uses_overlap

    handles, servers, sink = fleet.actors, fleet.servers, fleet.sink
    before: dict[str, Any] = {}
    busy = DeviceBusy(math.ceil(args.gpus)) if args.gpus > 0 else None
    games_started = time.time()

    def snapshot() -> None:  # after the warm-up
        before["served"] = [ray.get(server.stats.remote()) for server in servers]
        before["sink"] = ray.get(sink.stats.remote()) if sink is not None else None
        before["cpu"] = _cpu_seconds()
        if busy is not None:
            busy.start()

    stats, wall = _measure(handles, args.seconds, snapshot)
    looked = time.time() - games_started
    if busy is not None:
        busy.stop()
    driver_cpu = _cpu_seconds() - before["cpu"]
    served_before, sink_before, sink_after = before["served"], before["sink"], None
    if sink is not None:
        sink_after = ray.get(sink.stats.remote())
        idle = _idle_cpu(sink, IDLE_SECONDS)
    served = [ray.get(server.stats.remote()) for server in servers]
    passes = sum(a["passes"] - b["passes"] for a, b in zip(served, served_before))
    positions = sum(a["positions"] - b["positions"] for a, b in zip(served, served_before))
    evaluations, batches = sum(s.evaluations for s in stats), max(sum(s.batches for s in stats), 1)
    # The network alone at self-play's batch: a server's passes, else an actor's requests.
    batch = positions / passes if passes else evaluations / batches
    alone = ray.get(handles[0].network_rate.remote(min(args.seconds, 10.0), round(batch)))
    firsts = [s.first_game_time for s in stats if s.first_game_time is not None]
    point = Point(games, evaluations / wall, sum(s.moves for s in stats) / wall,
                  min(firsts) - games_started if firsts else None, looked)
    gpu_seconds = sum(a["gpu_seconds"] - b["gpu_seconds"] for a, b in zip(served, served_before)) if servers \
        else sum(s.gpu_seconds for s in stats)
    network = sum(s.network_seconds for s in stats)
    lanes = len(lane_games(games, uses_overlap(config.selfplay.overlap,
                                               None if servers else _actor_device(config))))
    where = f"{fleet.inference} inference on {'GPU' if args.gpus > 0 else 'the CPU'}"
    print(f"self-play, preset {args.preset}: {args.actors} actor(s), {games} games each "
          f"({lanes} lane{'s' if lanes > 1 else ''}), {config.search.simulations} simulations per move, {where}, "
          f"{wall:.0f} s measured")
    print(f"  positions played:    {rate(point.positions_per_s)}/s ({sum(s.games for s in stats)} games finished)")
    batch_text = f"average batch {evaluations / batches:.1f} per request"
    if passes:
        batch_text += f", {positions / passes:.1f} per server pass"
    print(f"  network evaluations: {rate(point.evaluations_per_s)}/s, {batch_text}")
    simulations = config.search.simulations
    print(f"  {latency_text(args.actors * games, point.positions_per_s, point.evaluations_per_s, simulations)}")
    print(f"  the first game ended {first_game_text(point)}")
    print(f"  GPU busy (the device's own utilisation, sampled): {_busy_text(busy, args.gpus)}")
    if args.gpus > 0:
        # Each actor times its own passes; passes of actors sharing a GPU interleave, so the sum may pass 100%.
        summed = f", summed over {args.actors} actors" if not servers and args.actors > args.gpus else ""
        print(f"  the passes' own GPU time (CUDA events from the forward pass to the copy out{summed}): "
              f"{gpu_seconds / (wall * max(args.gpus, 1.0)):.1%} of the measured time")
    print(f"  share of actor wall time waiting for the network: {network / (wall * args.actors):.1%} "
          f"(search, encoding, Python and Ray: {1 - network / (wall * args.actors):.1%})")
    # On the CPU each actor has its own network; a GPU or a server is shared by all the actors.
    shared = args.gpus > 0 or bool(servers)
    reached = point.evaluations_per_s / (max(fleet.server_count, 1) if shared else args.actors)
    whose = "all actors together" if shared else "per actor"
    print(f"  the network alone through the same path, at batch {round(batch)}: {rate(alone)} evaluations/s; "
          f"self-play reaches {ratio(reached, alone)} of it ({whose})")
    if sink_before is not None and sink_after is not None:
        _print_transport_load(args.actors, stats, wall, driver_cpu, sink_before, sink_after,
                              _stored(run_dir, config), idle)
    precision = next((s.precision for s in stats if s.precision), "")
    if precision:
        print(f"  the actors' network runs {precision}")
    return point, precision


def first_game_text(point: Point) -> str:
    """Says when the first game ended, counted from the games' start.

    >>> first_game_text(Point(256, 1e5, 500.0, 21.5, 40.0))
    '21.5 s after the games started'
    >>> first_game_text(Point(2048, 9e5, 4400.0, None, 42.0))
    'not within the 42 s the games were watched'
    """
    if point.first_game_s is None:
        return f"not within the {point.looked_s:.0f} s the games were watched"
    return f"{point.first_game_s:.1f} s after the games started"


def sweep_table(points: list[Point], actors: int) -> str:
    """Formats a --games sweep as a table, each point's evaluations/s as a share of the best, and names the knee:
    the fewest games in flight within KNEE_SHARE of the best.

    >>> print(sweep_table([Point(64, 5e4, 250.0, 9.0, 30.0), Point(256, 9.5e4, 480.0, 30.0, 30.0),
    ...                    Point(1024, 1e5, 500.0, None, 30.0)], actors=2))
    games per actor | in flight | evaluations/s | of the best | positions/s | each game moves every | first game
                 64 |       128 |         50.0k |         50% |         250 |                0.51 s |      9.0 s
                256 |       512 |         95.0k |         95% |         480 |                1.07 s |     30.0 s
               1024 |     2,048 |        100.0k |        100% |         500 |                4.10 s |   > 30.0 s
    the knee: 256 games per actor (512 in flight), 95% of the best evaluations/s
    """
    best = max(point.evaluations_per_s for point in points)
    lines = ["games per actor | in flight | evaluations/s | of the best | positions/s | each game moves every "
             "| first game"]
    for point in points:
        every = f"{actors * point.games / point.positions_per_s:.2f} s" if point.positions_per_s > 0 else "-"
        first = f"{point.first_game_s:.1f} s" if point.first_game_s is not None else f"> {point.looked_s:.1f} s"
        lines.append(f"{point.games:>15} | {actors * point.games:>9,} | {rate(point.evaluations_per_s):>13} | "
                     f"{point.evaluations_per_s / best:>11.0%} | {rate(point.positions_per_s):>11} | "
                     f"{every:>21} | {first:>10}")
    knee = min((p for p in points if p.evaluations_per_s >= KNEE_SHARE * best), key=lambda p: p.games)
    lines.append(f"the knee: {knee.games} games per actor ({actors * knee.games:,} in flight), "
                 f"{knee.evaluations_per_s / best:.0%} of the best evaluations/s")
    return "\n".join(lines)


def _print_transport_load(actors: int, stats: list[Any], wall: float, driver_cpu: float,
                          before: dict[str, float], after: dict[str, float], stored: dict[str, float],
                          idle: tuple[float, float]) -> None:
    """Prints what transport 'ray' costs the sink and the driver: per shard, per position, per actor.

    CPU per shard and per call leave out the idle baseline (Ray's own threads,
    measured for IDLE_SECONDS with no actor playing).
    """
    shards, games = after["shards"] - before["shards"], after["games"] - before["games"]
    size, busy = after["bytes"] - before["bytes"], after["busy_seconds"] - before["busy_seconds"]
    sink_cpu = after["cpu_seconds"] - before["cpu_seconds"]
    print(f"  transport ray, the sink: {shards:.0f} shards of {games:.0f} games stored in {wall:.0f} s", end="")
    if shards:
        print(f", {size / shards / 1e3:.1f} kB each (npz and PGN); busy {busy / shards * 1e3:.1f} ms per shard "
              f"(write, fsync, rename); CPU {sink_cpu / wall:.1%} of a core, idle {idle[1]:.1%}, so "
              f"{max(sink_cpu - idle[1] * wall, 0) / shards * 1e3:.1f} ms per shard")
    else:
        print(": none completed; lower selfplay.shard_games or raise --seconds")
    if stored["positions"]:
        print(f"  stored: {stored['bytes'] / stored['positions']:.0f} bytes per recorded position, "
              f"{stored['positions'] / max(stored['games'], 1):.0f} positions per game "
              f"({stored['shards']:.0f} shards, warm-up included)")
    waited = sum(s.sink_wait_seconds for s in stats)
    print(f"  actors' time waiting for the sink's acknowledgements: {waited / (wall * actors):.2%}")
    calls = len(stats)
    per_call = max(driver_cpu - idle[0] * wall, 0) / max(calls, 1)
    print(f"  the driver's part (this process): {driver_cpu / wall:.1%} of a core for {actors} actor(s), idle "
          f"{idle[0]:.1%}, so {per_call * 1e3:.2f} ms CPU per play() call ({calls} calls); the resignation "
          f"calibration reads a shard in {stored['calibration_seconds'] / max(stored['shards'], 1) * 1e3:.1f} ms")
    positions = sum(s.samples for s in stats)  # the recorded positions of the games finished in the window
    print(f"  per actor: {positions / wall / actors:.1f} recorded positions/s, {games / wall / actors:.3f} games/s "
          f"stored, {size / wall / actors / 1e3:.2f} kB/s to the sink")


LATENCY_PLIES = 100  # the game length the latency line is given for


def latency_text(games: int, positions_per_second: float, evaluations_per_second: float, simulations: int) -> str:
    """Says how often each game in flight makes a move, and how long a game of LATENCY_PLIES plies then takes:
    about how late the learner gets its first games (every game waits for its whole lane's batch).

    With no move played in the window, the pace is estimated from the evaluations (``simulations`` a move).

    >>> latency_text(30720, 4400.0, 905800.0, 200)
    'games in flight: 30,720; each moves every 7.0 s, so a game of 100 plies takes 12 min'
    >>> latency_text(15360, 0.0, 122300.0, 800)
    'games in flight: 15,360; each moves every ~100 s (estimated: no move done), so a game of 100 plies takes 2.8 h'
    """
    estimated = positions_per_second <= 0
    rate = evaluations_per_second / max(simulations, 1) if estimated else positions_per_second
    if rate <= 0:
        return f"games in flight: {games:,}; no move and no evaluation in the measured time"
    every = games / rate
    game = every * LATENCY_PLIES
    length = f"{game / 3600:.1f} h" if game >= 7200 else f"{game / 60:.0f} min" if game >= 120 else f"{game:.0f} s"
    pace = f"~{every:.0f} s (estimated: no move done)" if estimated else f"{every:.1f} s"
    return f"games in flight: {games:,}; each moves every {pace}, so a game of {LATENCY_PLIES} plies takes {length}"


def _busy_text(busy: DeviceBusy | None, gpus: float) -> str:
    """Formats the device's busy share: '-' on the CPU, 'unavailable (why)' when it could not be read."""
    if busy is None or gpus <= 0:
        return "-"
    share = busy.share()
    if share is None:
        return f"unavailable ({busy.error or 'no sample'})"
    return f"{share:.1%}"


def _actor_device(config: Any) -> Any:
    """The device the actors' local evaluators pick (as SelfPlayWorker does)."""
    from alphazero.nn.network import pick_device

    return pick_device(config.selfplay.device)
