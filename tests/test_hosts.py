"""Self-play and the learner on a cluster of three hosts, started as docs/cluster.md says (issue 50).

The hosts are Linux namespaces (tests/hosts.py): each its own network
namespace on a bridge of the test's, with its own address, its own /tmp,
/dev/shm and ~/.ray, process table and hostname. The run directory is in
the head's /tmp, which no worker sees. Ray is started with `ray start` on
each host, then `alphazero learn` and `alphazero selfplay --address auto`
run on the head, as a user types them; the actors can only be on the
workers (the head has no CPUs), and their games reach the run directory
through Ray alone.

Token authentication, as Ray 2.60 has it: the head makes a token (`ray
get-auth-token --generate`), and `ray start --head` turns authentication on
because ~/.ray/auth_token exists. Each worker gets a copy of the token in its
~/.ray, and needs RAY_AUTH_MODE=token besides: without it its `ray start`
is refused ("InvalidAuthToken ... RAY_AUTH_MODE is currently 'disabled'"),
as is `ray status` on the head. `alphazero ... --address auto` on the head
needs nothing more (its ray.init turns token mode on when it finds a token).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from alphazero.store.checkpoint import step_of
from alphazero.store.shards import list_shards, read_shard
from tests.helpers import TRAIN_FAST, check_shard_invariants
from tests.hosts import Host, HostsUnavailable, Network

pytest.importorskip("ray")

HANG_BOUND_S = 300.0  # only stops a hang: every wait ends on its condition long before
STORE_BYTES = 80 * 2**20  # each host's object store: small, the machine is shared
GAMES = 4
STEPS = 10
FAST = [*TRAIN_FAST, "selfplay.games_per_actor=2", "selfplay.shard_games=1"]  # a shard per game


def _sets() -> list[str]:
    return [item for override in FAST for item in ("--set", override)]


def _host_env() -> dict[str, str]:
    """This process's environment for a host's commands: none of its Ray settings, this Python's scripts first."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Cluster:
    """The three hosts and the environment of their commands; the commands' output goes to ``logs`` here."""

    def __init__(self, network: Network, logs: Path) -> None:
        self.network = network
        self.logs = logs
        self.env = _host_env()

    @property
    def head(self) -> Host:
        return self.network.hosts["head"]

    @property
    def workers(self) -> list[Host]:
        return [host for name, host in self.network.hosts.items() if name != "head"]

    def run(self, host: Host, *args: str, stdin: str | None = None) -> str:
        """Runs a command on ``host`` to its end; its stdout, or the test fails with its output."""
        done = subprocess.run(host.command(args), env=self.env, text=True, capture_output=True, input=stdin,
                              timeout=HANG_BOUND_S)
        assert done.returncode == 0, f"{host.name}: {' '.join(args)} failed ({done.returncode}):\n" \
                                     f"{done.stdout}\n{done.stderr}"
        return done.stdout

    def start(self, host: Host, name: str, *args: str) -> subprocess.Popen[str]:
        """Starts a command on ``host`` in the background, its output in logs/NAME.out and .err."""
        out, err = (self.logs / f"{name}.out").open("w"), (self.logs / f"{name}.err").open("w")
        with out, err:
            return subprocess.Popen(host.command(args), env=self.env, text=True, stdout=out, stderr=err)

    def ray_start(self, host: Host, *args: str) -> None:
        """Runs the docs' `ray start` command ``args`` with what a machine shared by three hosts needs besides."""
        self.run(host, *args, "--object-store-memory", str(STORE_BYTES), "--disable-usage-stats")

    def stop(self) -> None:
        """Keeps each host's Ray logs here, then runs `ray stop --force` on it (the kernel ends what is left)."""
        for host in self.network.hosts.values():
            if not host.pid:
                continue
            logs = subprocess.run(host.command(["tar", "-C", "/tmp/ray", "-chf", "-", "session_latest/logs"]),
                                  capture_output=True, timeout=HANG_BOUND_S, check=False)
            if logs.returncode == 0:
                with tarfile.open(fileobj=io.BytesIO(logs.stdout)) as archive:
                    archive.extractall(self.logs / f"{host.name}-ray", filter="data")
            subprocess.run(host.command(["ray", "stop", "--force"]), env=self.env, capture_output=True,
                           timeout=HANG_BOUND_S, check=False)  # on this host alone: it has a process table of its own


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    logs = tmp_path / "logs"
    logs.mkdir()
    network = Network(["head", "w1", "w2"], logs=logs)
    try:
        network.__enter__()
    except HostsUnavailable as error:
        pytest.skip(f"no test hosts: {error}")
    hosts = Cluster(network, logs)
    try:
        yield hosts
    finally:
        try:
            hosts.stop()
        finally:
            network.close()


def _wait_for(condition: Callable[[], bool], what: str, *processes: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + HANG_BOUND_S
    while not condition():
        for process in processes:
            assert process.poll() is None or process.returncode == 0, f"{process.args} ended ({process.returncode})"
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


def _active_nodes(status: str) -> int:
    active = status.partition("Active:")[2].partition("Pending:")[0]
    return len(re.findall(r"^\s*1 node_[0-9a-f]+\s*$", active, re.MULTILINE))


def _wait_to_end(process: subprocess.Popen[str], name: str, logs: Path) -> str:
    try:
        process.wait(HANG_BOUND_S)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"{name} did not end within {HANG_BOUND_S} s")
    out, err = (logs / f"{name}.out").read_text(), (logs / f"{name}.err").read_text()
    assert process.returncode == 0, f"{name} failed ({process.returncode}):\n{out}\n{err}"
    return out


@pytest.mark.slow
def test_selfplay_and_learn_on_three_hosts_started_as_the_docs_say(cluster: Cluster) -> None:
    head, workers = cluster.head, cluster.workers
    started = time.monotonic()

    def reached(what: str) -> None:  # the phases' times, shown with a failure's output
        print(f"{time.monotonic() - started:6.1f} s: {what}", flush=True)

    run = "/tmp/runs/x"  # on the head: no worker sees it
    here = head.path(run)  # where this process reads it

    # The head makes the cluster's token; each worker gets a copy (as scp would bring it).
    token = cluster.run(head, "ray", "get-auth-token", "--generate")
    for worker in workers:
        cluster.run(worker, "sh", "-c", "umask 077 && cat > ~/.ray/auth_token", stdin=token)

    reached("token on every host")
    cluster.ray_start(head, "ray", "start", "--head", "--port", "6379", "--num-cpus", "0")
    reached("ray start on the head")
    for worker in workers:
        cluster.ray_start(worker, "env", "RAY_AUTH_MODE=token", "ray", "start", "--address", f"{head.address}:6379",
                          "--num-cpus", "1")
    _wait_for(lambda: _active_nodes(cluster.run(head, "env", "RAY_AUTH_MODE=token", "ray", "status")) == 3,
              "three nodes in `ray status`")
    reached("three nodes in `ray status`")

    learn = cluster.start(head, "learn", "alphazero", "learn", "--run", run, "--preset", "tiny", "--address",
                          "auto", "--steps", str(STEPS), "--threads", "1", "--no-progress", *_sets())
    _wait_for(lambda: (here / "config.toml").is_file(), "the learner to make the run", learn)
    reached("the learner made the run")
    selfplay = cluster.start(head, "selfplay", "alphazero", "selfplay", "--run", run, "--address", "auto",
                             "--actors", "2", "--games", str(GAMES), "--no-progress", *_sets())
    out = _wait_to_end(selfplay, "selfplay", cluster.logs)
    assert "transport ray" in out.splitlines()[0]
    summary = re.search(r"self-play: (\d+) games, (\d+) positions in (\d+) shards", out)
    assert summary is not None, out
    reached("selfplay ended")
    learned = _wait_to_end(learn, "learn", cluster.logs)
    reached("learn ended")

    # Every game the command counted is on disk once, in a valid shard.
    shards = list_shards(here / "selfplay")
    games = [game for path in shards for game in read_shard(path).games]
    ids = [game["game_id"] for game in games]
    assert len(ids) == len(set(ids)) == int(summary.group(1)) >= GAMES
    assert len(shards) == int(summary.group(3))
    for path in shards:
        check_shard_invariants(path)
    # The learner took its steps and saved them.
    assert max(step_of(path) for path in (here / "checkpoints").glob("step_*.pt")) == STEPS, learned

    # The actors ran on the workers, one on each (their Ray logs are there), the sink on the head; no worker
    # has the run directory.
    def actors_on(host: Host, actor: str) -> int:
        return len(cluster.run(host, "sh", "-c", f"grep -l ':actor_name:{actor}$' "
                                                 "/tmp/ray/session_latest/logs/worker-*.out || true").split())

    assert [actors_on(host, "SelfPlayWorker") for host in (head, *workers)] == [0, 1, 1]
    assert [actors_on(host, "ShardSink") for host in (head, *workers)] == [1, 0, 0]
    assert {game["actor"].split("-")[0] for game in games} == {"actor0", "actor1"}
    for worker in workers:
        cluster.run(worker, "sh", "-c", "! test -e /tmp/runs")
