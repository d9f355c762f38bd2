"""SIGTERM, as systemd, `docker stop`, Kubernetes and `timeout` send it, stops the long commands as Ctrl-C does.

Ray's driver replaces a process's SIGTERM handler in ray.init with abseil's
failure handler (a stack dump, then an abort): `train` and `selfplay` must put
theirs back, so that the finished games are written and the summary printed.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from alphazero.store.checkpoint import step_of
from tests.helpers import ROOT, SELFPLAY_FAST, TRAIN_FAST, repo_env

pytest.importorskip("ray")

HANG_BOUND_S = 300  # only stops a hang: each wait ends on its condition long before
# What abseil's failure handler and an uncaught exception print; none of it may appear.
DUMPS = ("Traceback", "SIGTERM received", "Stack trace", "AbslFailureSignalHandler", "*** ")


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "alphazero", *args], cwd=ROOT, env=repo_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _sets(overrides: list[str]) -> list[str]:
    return [item for override in overrides for item in ("--set", override)]


def _wait_for(condition: Callable[[], bool], process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + HANG_BOUND_S
    while not condition():
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"the command ended before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"no {what} within {HANG_BOUND_S} s")
        time.sleep(0.2)


def _stop(process: subprocess.Popen[str], signum: int) -> tuple[str, str]:
    process.send_signal(signum)
    try:
        return process.communicate(timeout=HANG_BOUND_S)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the command did not end within {HANG_BOUND_S} s of signal {signum}; it said, last:\n"
                    f"{out[-3000:]}\n{err[-3000:]}")


@pytest.mark.slow
def test_train_stops_on_sigterm_as_on_ctrl_c(tmp_path: Path) -> None:
    # What Ctrl-C does (selfplay.driver's KeyboardInterrupt path): the games written, the summary printed.
    run = tmp_path / "run"
    process = _start("train", "--run", str(run), "--actors", "1", "--quiet", *_sets(TRAIN_FAST))
    _wait_for(lambda: any(step_of(path) > 0 for path in (run / "checkpoints").glob("step_*.pt")), process,
              "a checkpoint after a learner step")
    out, err = _stop(process, signal.SIGTERM)
    assert process.returncode == 0, err
    assert "self-play: stopping; writing the finished games" in out
    assert re.search(r"train: \d+ games, [\d,]+ positions; learner at step [1-9]", out)
    assert not [dump for dump in DUMPS if dump in err], err
    assert any(step_of(path) > 0 for path in (run / "checkpoints").glob("step_*.pt"))


@pytest.mark.slow
def test_selfplay_stops_on_sigterm_as_on_ctrl_c(tmp_path: Path) -> None:
    run = tmp_path / "run"
    process = _start("selfplay", "--run", str(run), "--actors", "1", "--no-progress", *_sets(SELFPLAY_FAST))
    _wait_for(lambda: any((run / "selfplay").glob("*.npz")), process, "a shard")
    out, err = _stop(process, signal.SIGTERM)
    assert process.returncode == 0, err
    assert "self-play: stopping; writing the finished games" in out
    assert re.search(r"self-play: \d+ games, \d+ positions in \d+ shards", out)
    assert not [dump for dump in DUMPS if dump in err], err


@pytest.mark.slow
def test_more_actors_than_fit_start_as_many_as_fit_and_ctrl_c_stops_them_while_they_start(tmp_path: Path) -> None:
    # Issue 50: 256 actors asked on a 2-CPU machine started Python processes until memory ran out, and Ctrl-C
    # waited for every one of them. Now the command says what fits before it starts them, starts that many,
    # and a signal while they start stops it.
    run = tmp_path / "run"
    process = _start("selfplay", "--run", str(run), "--actors", "256", "--no-progress", "--minutes", "30",
                     *_sets(SELFPLAY_FAST))
    lines: list[str] = []

    def said_what_fits() -> bool:
        assert process.stdout is not None
        lines.append(process.stdout.readline())
        return "actors asked, but the cluster has" in lines[-1]

    _wait_for(said_what_fits, process, "a word of what fits")
    fit = re.search(r"256 actors asked, but the cluster has (\d+) CPUs .* each actor needs 1 CPU and [\d.]+ GiB: "
                    r"(\d+) fit .*; starting (\d+)", lines[-1])
    assert fit is not None, lines[-1]
    cpus, fits, starting = map(int, fit.groups())
    assert fits == starting <= cpus < 256
    out, err = _stop(process, signal.SIGINT)  # at once, while the actors start
    # In the play loop it writes what finished; in the split second the actors are submitted it just ends.
    assert process.returncode == 0 and "self-play: stopping; writing the finished games" in out \
        or process.returncode == 130, (out, err)
    assert not [dump for dump in DUMPS if dump in err], err
