"""Self-play on a multi-node Ray cluster (a head and two worker nodes on this machine) with transport 'ray'.

The head has no CPUs, so every self-play actor runs on a worker node; the
shard sink runs on the head, the driver's node, where the run directory is.
The actors are never told where the run directory is, and an audit hook in
each of them notes every file it opens for writing or renames.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from alphazero.app import cli
from alphazero.config import to_toml
from alphazero.errors import UserError
from alphazero.nn.network import AlphaZeroNet
from alphazero.presets import from_toml, get_preset
from alphazero.store.checkpoint import save_checkpoint
from alphazero.store.rundir import RunDir
from alphazero.store.shards import list_shards, read_shard, read_shard_games
from selfplay.sink import ShardSink, sink_name
from selfplay.worker import SelfPlayWorker

ray = pytest.importorskip("ray")

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from selfplay import NAMESPACE, driver, fleet
from selfplay.fleet import SelfPlayFleet, actor_name_prefix
from selfplay.publish import WeightPublisher
from tests.helpers import SELFPLAY_FAST, check_shard_invariants

RAY_FAST = [*SELFPLAY_FAST, "selfplay.transport=ray"]
NODE_STORE_BYTES = 80 * 2**20  # each node's object store: small, the machine is shared
WAIT_S = 300.0                  # the longest a test waits for the cluster to get somewhere (a bound on a hang)


@dataclass
class Nodes:
    """The test cluster and its worker nodes by custom resource name ('worker_a', 'worker_b')."""

    cluster: Any
    workers: dict[str, Any]

    def add_worker(self, name: str) -> None:
        self.workers[name] = self.cluster.add_node(num_cpus=2, resources={name: 1},
                                                   object_store_memory=NODE_STORE_BYTES)
        self.cluster.wait_for_nodes()


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    head = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": NODE_STORE_BYTES,
                                                         "include_dashboard": False})
    nodes = Nodes(head, {})
    try:
        for name in ("worker_a", "worker_b"):
            nodes.add_worker(name)
        ray.init(address=head.address, namespace=NAMESPACE, logging_level="ERROR")
        yield nodes
    finally:
        ray.shutdown()
        head.shutdown()


def ray_run(path: Path, *extra: str) -> tuple[RunDir, Any]:
    return RunDir.create_or_open(path, get_preset("tiny"), [*RAY_FAST, *extra])


def soft_on(*node_ids: str, **options: Any) -> Callable[[int], dict[str, Any]]:
    """Actor i's placement: node_ids[i] while it lives, any other node after (soft affinity)."""
    return lambda i: {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_ids[i % len(node_ids)], soft=True),
                      **options}


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def new_checkpoint(run: RunDir, config: Any, step: int) -> Path:
    model = AlphaZeroNet(config.network)
    return save_checkpoint(run, model, torch.optim.SGD(model.parameters(), lr=0.1), step, config)


class AuditedWorker(SelfPlayWorker):
    """A self-play worker that notes each file it opens for writing, each rename, and which node it is on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.written: list[str] = []
        sys.addaudithook(self._audit)
        super().__init__(*args, **kwargs)

    def _audit(self, event: str, args: tuple) -> None:
        try:
            if event == "open":
                path, mode, flags = args
                writes = any(c in mode for c in "wxa+") if isinstance(mode, str) \
                    else bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
                if writes and not isinstance(path, int):
                    self.written.append(os.path.abspath(os.fsdecode(path)))
            elif event in ("os.rename", "os.link"):  # os.replace is audited as os.rename
                self.written.extend(os.path.abspath(os.fsdecode(path)) for path in args[:2])
            elif event == "os.mkdir":
                self.written.append(os.path.abspath(os.fsdecode(args[0])))
        except Exception:  # noqa: BLE001, S110 - an audit hook must never break the code it watches
            pass

    def report(self) -> dict[str, Any]:
        return {"node": ray.get_runtime_context().get_node_id(), "has_run": self.run is not None,
                "written": list(self.written)}


class _ShardsOnDisk:
    """The games of the run's shards, read once per shard: (shard name, game) pairs."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self.games: dict[str, list[dict[str, Any]]] = {}

    def refresh(self) -> list[tuple[str, dict[str, Any]]]:
        for path in list_shards(self.run.selfplay):
            if path.name not in self.games:
                self.games[path.name] = read_shard_games(path)
        return [(name, game) for name, games in self.games.items() for game in games]

    def actors_with(self, condition: Callable[[str, dict[str, Any]], bool]) -> set[str]:
        """The actor numbers ('0', '1') with a game on disk that meets ``condition(shard name, game)``."""
        return {game["actor"].split("-")[0].removeprefix("actor") for name, game in self.refresh()
                if condition(name, game)}


# --- without a cluster ------------------------------------------------------------------------


def test_address_picks_the_ray_transport_unless_told_otherwise(tmp_path):
    import argparse

    from selfplay.cli import add_arguments, describe_transport, overrides_from

    parser = argparse.ArgumentParser()
    add_arguments(parser)

    def transport(*argv: str) -> list[str]:
        return [o for o in overrides_from(parser.parse_args(list(argv))) if o.startswith("selfplay.transport")]

    assert transport() == []  # the config's (disk unless the run says otherwise)
    assert transport("--address", "auto") == ["selfplay.transport=ray"]
    assert transport("--address", "auto", "--transport", "disk") == ["selfplay.transport=disk"]
    assert transport("--address", "auto", "--set", "selfplay.transport=disk") == []  # --set has its say
    assert transport("--transport", "ray") == ["selfplay.transport=ray"]
    run = RunDir(tmp_path / "run")
    assert "transport ray" in describe_transport("ray", run) and str(run.selfplay) in describe_transport("ray", run)
    assert "transport disk" in describe_transport("disk", run)


def test_the_ray_transport_through_a_ray_client_is_refused(tmp_path, capsys):
    # The sink runs on the driver's node; through ray:// that is the head, where this run directory is not.
    assert cli.main(["selfplay", "--run", str(tmp_path / "run"), "--games", "1", "--address", "ray://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "run alphazero selfplay on the head" in err and "Traceback" not in err


def test_a_config_written_before_the_transport_keys_loads_as_disk():
    text = to_toml(get_preset("tiny"))
    old = "\n".join(line for line in text.splitlines() if not line.startswith(("transport", "sink_window")))
    assert old != text and from_toml(old) == get_preset("tiny")
    assert from_toml(old).selfplay.transport == "disk"
    with pytest.raises(UserError, match="selfplay.transport"):
        from_toml(text.replace('transport = "disk"', 'transport = "nfs"'))


# --- on the cluster ---------------------------------------------------------------------------


class StallsOnWrite(ShardSink):
    """A sink that holds every write until a 'release' file appears beside the run, noting each arrival."""

    def write(self, shard: Any, sender: str = "") -> str:
        folder = self.run.root.parent
        (folder / f"arrived-{shard.name}").touch()
        deadline = time.monotonic() + WAIT_S
        while not (folder / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return super().write(shard, sender)


class CountsShards(SelfPlayWorker):
    """A self-play worker that says how many shards it has built (a threaded actor answers mid-play())."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.built = 0
        put = self.writer.output

        def counting_put(shard: Any) -> None:
            self.built += 1
            put(shard)

        self.writer.output = counting_put

    def progress(self) -> tuple[int, int, bool]:
        """Shards built, shards out unacknowledged, and whether a built one is held back for the window."""
        return self.built, self.output.unacknowledged, self.output.holding


@pytest.mark.slow
def test_a_stalled_sink_holds_the_actor_at_its_window_and_loses_nothing(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(fleet, "ShardSink", StallsOnWrite)
    monkeypatch.setattr(fleet, "SelfPlayWorker", CountsShards)
    run, config = ray_run(tmp_path / "run", "selfplay.games_per_actor=1", "selfplay.sink_window=1")

    def arrived() -> list[Path]:
        return sorted(tmp_path.glob("arrived-*"))

    placement = soft_on(cluster.workers["worker_a"].node_id, max_concurrency=2)
    with SelfPlayFleet(run, config, actors=1, quota=4, placement=placement) as started:
        worker = started.actors[0]
        call = worker.play.remote(300.0)  # returns when its 4 games are played and sent, or after 300 s
        # The sink holds shard 1; the worker has finished game 2 and built its shard, so it must wait: the
        # worker says it holds shard 2 back (a worker that sent it would never say so, and this would time out).
        wait_for(lambda: len(arrived()) >= 1 and ray.get(worker.progress.remote()) == (2, 1, True),
                 "the worker to hold the second shard back")
        assert len(arrived()) == 1  # shard 2 waits in the worker, not in the sink
        assert not ray.wait([call], timeout=0)[0]  # play() is held
        (tmp_path / "release").touch()
        stats = ray.get(call, timeout=WAIT_S)
        stored = stats.shards + ray.get(worker.flush.remote(), timeout=WAIT_S)
    assert stats.games == 4 and stats.sink_wait_seconds > 0
    shards = list_shards(run.selfplay)
    assert sorted(map(str, shards)) == sorted(stored) and len(shards) == 4
    for path in shards:
        check_shard_invariants(path)
    assert not any(path.name.startswith(".") for path in run.selfplay.iterdir())  # no temporaries left


BEFORE_RENAME = "sink-stopped-before-rename"
AFTER_RENAME = "sink-stopped-after-rename"
FIRST_KILL_DONE = "first-kill-done"


class StopsToBeKilled(ShardSink):
    """A sink that stops twice to be killed: in one write before the rename, in a later one after it.

    The first write claims the first marker (writing the shard's name into it)
    and waits; the test kills the sink there, so that shard is not on disk.
    Once the test says the first kill is done, the restarted sink renames a
    shard into place, claims the second marker and waits to be killed before
    it acknowledges: that shard is on disk and its actor will send it again.
    """

    def write(self, shard: Any, sender: str = "") -> str:
        self._stop_once(BEFORE_RENAME, shard.name)
        path = super().write(shard, sender)
        if (self.run.root.parent / FIRST_KILL_DONE).exists():
            self._stop_once(AFTER_RENAME, shard.name)
        return path

    def _stop_once(self, marker: str, name: str) -> None:
        try:
            with (self.run.root.parent / marker).open("x") as file:
                file.write(name)
        except FileExistsError:
            return
        time.sleep(300)  # the test kills this process as soon as it sees the marker


@pytest.mark.slow
def test_a_killed_sink_loses_no_game_and_writes_none_twice(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(fleet, "ShardSink", StopsToBeKilled)
    run, config = ray_run(tmp_path / "run", "selfplay.sink_window=2")
    kills: list[str] = []
    checkpoint: list[int] = []
    stop = threading.Event()

    def kill_the_sink(totals: driver.Totals) -> None:
        for marker in (BEFORE_RENAME, AFTER_RENAME):
            if (tmp_path / marker).exists() and marker not in kills:
                ray.kill(ray.get_actor(sink_name(run), namespace=NAMESPACE), no_restart=False)
                kills.append(marker)
                (tmp_path / FIRST_KILL_DONE).touch()
        if totals.games >= 2 and not checkpoint:
            new_checkpoint(run, config, 77)  # the driver follows the run's checkpoints and pushes them
            checkpoint.append(totals.games)
        if len(kills) == 2 and totals.games >= 10:
            stop.set()  # only here: a run that ended first would leave the stopped sink unkilled

    workers = cluster.workers
    totals = driver.run_selfplay(run, config, actors=2, minutes=WAIT_S / 60, stop=stop, progress=False,
                                 chunk_seconds=0.5, on_update=kill_the_sink,
                                 placement=soft_on(workers["worker_a"].node_id, workers["worker_b"].node_id))
    assert stop.is_set() and kills == [BEFORE_RENAME, AFTER_RENAME]
    assert totals.lost_calls == 0 and totals.games >= 10
    shards = list_shards(run.selfplay)
    games = [game for path in shards for game in read_shard(path).games]
    ids = [game["game_id"] for game in games]
    assert len(ids) == len(set(ids)) == totals.games  # every finished game on disk, once
    assert sorted(totals.shards) == sorted(map(str, shards))  # each acknowledged once, after its rename
    for marker in (BEFORE_RENAME, AFTER_RENAME):
        assert (run.selfplay / (tmp_path / marker).read_text()).is_file()  # the stopped writes were sent again
    assert len(list(run.games.glob("*.pgn"))) == len(shards)
    for path in shards:
        check_shard_invariants(path)
    steps = [game["weights_step"] for game in games]
    assert -1 in steps and 77 in steps  # the checkpoint saved mid-run reached actors that never read the disk


@pytest.mark.slow
def test_selfplay_with_address_uses_the_ray_transport_and_starts_actors_with_the_runs_weights(cluster, tmp_path,
                                                                                               capsys):
    run, config = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"), SELFPLAY_FAST)
    new_checkpoint(run, config, 5)
    args = ["selfplay", "--run", str(run.root), "--actors", "2", "--games", "4", "--quiet",
            "--address", cluster.cluster.address]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "transport ray" in out.splitlines()[0]
    games = [game for path in list_shards(run.selfplay) for game in read_shard(path).games]
    assert len(games) >= 4 and {game["weights_step"] for game in games} == {5}


@pytest.mark.slow
def test_actors_on_two_nodes_get_the_learners_pushed_weights(cluster, tmp_path, monkeypatch):
    """An actor that outlives its node, restarted elsewhere with the newest weights, is tests/test_hosts.py's."""
    monkeypatch.setattr(fleet, "SelfPlayWorker", AuditedWorker)
    # The driver looks at the run's checkpoints only at the start and when an actor restarts: the
    # weights the actors play in between are the ones the learner pushes.
    run, config = ray_run(tmp_path / "run", "selfplay.weights_poll_seconds=3600")
    node_a, node_b = cluster.workers["worker_a"].node_id, cluster.workers["worker_b"].node_id
    publisher = WeightPublisher(run.root, None)  # what `alphazero learn --address` pushes with
    on_disk = _ShardsOnDisk(run)
    stop = threading.Event()
    seen: dict[str, Any] = {"phase": "both nodes playing", "reports": [], "taken": []}

    def report(index: int) -> dict[str, Any]:
        actor = ray.get_actor(f"{actor_name_prefix(run)}{index}", namespace=NAMESPACE)
        answer = ray.get(actor.report.remote(), timeout=WAIT_S)
        seen["reports"].append(answer)
        return answer

    def next_phase(totals: driver.Totals) -> None:
        phase = seen["phase"]
        if phase == "both nodes playing" and on_disk.actors_with(lambda name, game: True) == {"0", "1"}:
            seen["first nodes"] = [report(0)["node"], report(1)["node"]]
            seen["taken"].append(publisher.publish(77, new_checkpoint(run, config, 77)))
            seen["phase"] = "pushed 77"
        elif phase == "pushed 77" and on_disk.actors_with(lambda n, game: game["weights_step"] == 77) == {"0", "1"}:
            report(0), report(1)
            seen["phase"] = "done"
            stop.set()

    driver.run_selfplay(run, config, actors=2, minutes=WAIT_S / 60, progress=False, chunk_seconds=0.5, stop=stop,
                        on_update=next_phase, placement=soft_on(node_a, node_b))
    assert seen["phase"] == "done"
    assert seen["first nodes"] == [node_a, node_b]  # one actor on each worker node
    assert seen["taken"] == [2]  # the learner's push reached both actors
    # The actors never knew the run directory and wrote nothing there: the sink on the head did.
    for answer in seen["reports"]:
        assert not answer["has_run"]
        assert not [path for path in answer["written"] if path.startswith(str(tmp_path))]
    ids = [game["game_id"] for _, game in on_disk.refresh()]
    assert len(ids) == len(set(ids))
    for path in list_shards(run.selfplay):
        check_shard_invariants(path)
