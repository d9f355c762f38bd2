"""SIGTERM, as systemd, `docker stop`, Kubernetes and `timeout` send it, stops the long commands as Ctrl-C does.

Ray's driver replaces a process's SIGTERM handler in ray.init with abseil's
failure handler (a stack dump, then an abort): `train` and `selfplay` must put
theirs back, so that the finished games are written and the summary printed.
`docker stop` and Kubernetes signal the command's first process alone;
`timeout` signals its process group, systemd (KillMode=control-group) every
process of the unit, Ray's among them (issue 69).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from alphazero.store.checkpoint import step_of
from alphazero.store.shards import list_shards, read_shard_games
from tests.helpers import ROOT, SELFPLAY_FAST, TRAIN_FAST, python_stacks, repo_env

pytest.importorskip("ray")

HANG_BOUND_S = 300  # only stops a hang: each wait ends on its condition long before
SERVICE_STOP_S = 90  # systemd's TimeoutStopSec by default: what the whole stop may take before its SIGKILL
DOCKER_GRACE_S = 10  # `docker stop`'s grace before its SIGKILL: what the command's own stop may take (issue 80)
# What abseil's failure handler and an uncaught exception print; none of it may appear.
DUMPS = ("Traceback", "SIGTERM received", "Stack trace", "AbslFailureSignalHandler", "*** ")


def _start(*args: str, new_session: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "alphazero", *args], cwd=ROOT, env=repo_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=new_session)


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


def _wait_until_gone(session: int, deadline: float) -> None:
    """Waits, until ``deadline`` (time.monotonic) at most, for every process of ``session`` to exit: on each
    one's pidfd, which becomes readable when it exits (they are not this process's children to wait for)."""
    while (pids := _session(session)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue  # gone already
            try:
                select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            finally:
                os.close(fd)


def _stop(process: subprocess.Popen[str], signum: int) -> tuple[str, str]:
    process.send_signal(signum)
    try:
        return process.communicate(timeout=SERVICE_STOP_S)
    except subprocess.TimeoutExpired:
        stacks = python_stacks(process.pid)
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the command did not end within {SERVICE_STOP_S} s of signal {signum}; it said, last:\n"
                    f"{out[-3000:]}\n{err[-3000:]}\nits stacks then:\n{stacks}")


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
@pytest.mark.xdist_group("saturates_the_cores")  # alone on the machine (tests/conftest.py)
def test_more_actors_than_fit_start_as_many_as_fit_and_ctrl_c_stops_them_while_they_start(tmp_path: Path,
                                                                                       ctrl_c_heard: None) -> None:
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


def _session(session: int) -> list[int]:
    """The live processes of a session (the command's and all it started: Ray's, its workers in their own groups)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, IndexError):
            if os.getsid(int(entry.name)) == session and \
                    entry.joinpath("stat").read_text().rpartition(")")[2].split()[0] != "Z":
                found.append(int(entry.name))
    return found


@contextlib.contextmanager
def _command_in_session(*args: str) -> Iterator[subprocess.Popen[str]]:
    """Runs the command in a session of its own (its process group is the session's id); kills what is left."""
    process = _start(*args, new_session=True)
    try:
        yield process
    finally:
        for pid in _session(process.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.communicate()


def _games_on_disk(run: Path) -> int:
    return sum(len(read_shard_games(path)) for path in list_shards(run / "selfplay"))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds the command's processes in /proc")
@pytest.mark.parametrize("to", ["group", "every process"])
@pytest.mark.parametrize("command", ["train", "selfplay"])
def test_sigterm_to_every_process_of_the_command_stops_it_with_its_summary_and_its_finished_games_on_disk(
        tmp_path: Path, command: str, to: str) -> None:
    # Issue 69: `timeout -s TERM` signals the process group, systemd every process of the unit; both reached
    # Ray's GCS and raylet too, and `train` then waited on them until Ray's own timeout killed it, without its
    # summary. Now each stops as on Ctrl-C, within what a service manager waits, with every game it reports
    # finished in the run's shards (the actor's own unwritten ones included: several games to a shard), and
    # leaves no process behind (systemd waits for all of them).
    run = tmp_path / "run"
    fast = TRAIN_FAST if command == "train" else [*SELFPLAY_FAST, "selfplay.shard_games=3"]
    with _command_in_session(command, "--run", str(run), "--actors", "1", "--no-progress", *_sets(fast)) as process:
        _wait_for(lambda: bool(list_shards(run / "selfplay")), process, "a finished game on disk")
        deadline = time.monotonic() + SERVICE_STOP_S
        if to == "group":
            os.killpg(process.pid, signal.SIGTERM)
        else:
            for pid in _session(process.pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
        try:  # Docker's grace: its SIGKILL would cut a stop that took longer, and lose what it had not saved
            out, err = process.communicate(timeout=DOCKER_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            pytest.fail(f"no end within {DOCKER_GRACE_S} s of SIGTERM to the {to}; it said, last:\n"
                        f"{out[-3000:]}\n{err[-3000:]}")
        _wait_until_gone(process.pid, deadline)
        assert not _session(process.pid), f"processes left {SERVICE_STOP_S} s after the signal"
    assert process.returncode == 0, (out, err)
    assert "self-play: stopping; writing the finished games" in out
    assert not [dump for dump in DUMPS if dump in err], err
    assert "lost actor" not in out, out
    if command == "train":
        summary = re.search(r"train: (\d+) games, [\d,]+ positions; learner at step ([\d,]+)", out)
        assert summary is not None, out
        last_step = int(summary[2].replace(",", ""))  # the learner's last finished step, saved before the end
        assert max(step_of(path) for path in (run / "checkpoints").glob("step_*.pt")) == last_step, out
    else:
        summary = re.search(r"self-play: (\d+) games, [\d,]+ positions in (\d+) shards", out)
        assert summary is not None, out
        assert int(summary[2]) == len(list_shards(run / "selfplay")), out
    assert int(summary[1]) == _games_on_disk(run) > 0, out


@pytest.mark.slow
def test_learn_stops_within_dockers_grace_with_its_last_step_saved(tmp_path: Path) -> None:
    # Issue 80: `learn` saves the step it finished first and cuts what is not bounded (the final validation
    # over up to 50,000 held-out positions), within the 10 s `docker stop` gives before its SIGKILL.
    from alphazero.presets import get_preset
    from alphazero.store.rundir import RunDir
    from tests.helpers import add_games

    run = tmp_path / "run"
    rundir, _ = RunDir.create_or_open(run, get_preset("tiny"), [*TRAIN_FAST, "learner.validation_share=0.3",
                                                                 "learner.validate_every=1000"])
    for first_game in range(0, 40, 8):
        add_games(rundir.selfplay, first_game, 8)
    process = _start("learn", "--run", str(run), "--threads", "1")  # no terminal: plain lines
    _wait_for(lambda: any(step_of(path) > 0 for path in (run / "checkpoints").glob("step_*.pt")), process,
              "a checkpoint after a learner step")
    process.send_signal(signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=DOCKER_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"`learn` did not end within {DOCKER_GRACE_S} s of SIGTERM; it said, last:\n{out[-3000:]}\n"
                    f"{err[-3000:]}")
    said = out + err
    stopped = re.search(r"stopped at step ([\d,]+)", said)
    assert stopped is not None, said
    last_step = int(stopped[1].replace(",", ""))
    assert max(step_of(path) for path in (run / "checkpoints").glob("step_*.pt")) == last_step, said
    assert f"the stop cuts the final validation at step {stopped[1]}" in said
    assert not [dump for dump in DUMPS if dump in err], err


def test_a_signal_the_process_ignores_stays_ignored_and_the_others_are_handled_then_put_back() -> None:
    from alphazero.stop_signals import handling_stop_signals

    def handler(signum: int, frame: object) -> None:
        raise AssertionError("not sent")

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a script's background job
    term_before = signal.getsignal(signal.SIGTERM)
    try:
        with handling_stop_signals(handler) as handled:
            assert handled == (signal.SIGTERM,)
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is handler
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is term_before
    finally:
        signal.signal(signal.SIGINT, before)


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored in this process, so that a command started meanwhile starts with it ignored, as a shell
    starts a script's background job (`alphazero learn ... &`: Ctrl-C is for the script's foreground command)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_learn_started_as_a_background_job_plays_on_through_ctrl_c_and_stops_on_sigterm(tmp_path: Path) -> None:
    from alphazero.presets import get_preset
    from alphazero.store.rundir import RunDir
    from tests.helpers import add_games

    run = tmp_path / "run"
    rundir, _ = RunDir.create_or_open(run, get_preset("tiny"), TRAIN_FAST)
    for first_game in range(0, 40, 8):
        add_games(rundir.selfplay, first_game, 8)

    def last_step() -> int:
        return max((step_of(path) for path in (run / "checkpoints").glob("step_*.pt")), default=0)

    with _sigint_ignored():
        process = _start("learn", "--run", str(run), "--threads", "1")
    _wait_for(lambda: last_step() > 0, process, "a checkpoint after a learner step")
    process.send_signal(signal.SIGINT)
    stepped_at_ctrl_c = last_step()
    # Had it heard Ctrl-C, its last checkpoint would be the step in flight, a few steps on (TRAIN_FAST checkpoints
    # every 5): two checkpoints on, it learns on.
    _wait_for(lambda: last_step() >= stepped_at_ctrl_c + 10, process, "two checkpoints after Ctrl-C")
    assert process.poll() is None
    out, err = _stop(process, signal.SIGTERM)
    said = out + err
    assert process.returncode == 130, said  # stopped by a signal, its step saved
    assert said.count("stopping after this step") == 1, said  # SIGTERM's, not Ctrl-C's
    assert not [dump for dump in DUMPS if dump in err], err


@pytest.mark.slow
def test_the_engine_ends_within_dockers_grace_of_sigterm_mid_search() -> None:
    # A `go infinite` searching when the signal comes: the engine ends (it has nothing to save) at once.
    process = subprocess.Popen([sys.executable, "-m", "alphazero", "uci", "--weights", "builtin", "--threads", "1"],
                               cwd=ROOT, env=repo_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("uci\nisready\nposition startpos\ngo infinite\n")
    process.stdin.flush()
    _wait_for(lambda: process.stdout.readline().startswith("info depth"), process, "the search's first info line")
    process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=DOCKER_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"the engine did not end within {DOCKER_GRACE_S} s of SIGTERM:\n{err[-3000:]}")
    assert not [dump for dump in DUMPS if dump in err], err
