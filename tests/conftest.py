"""Fixtures shared by several test files."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from alphazero.presets import get_preset
from tests.machine_share import machine_share, saturates_the_cores

# Ray starts its workers (our actors) at nice 15 (its worker_niceness), below everything else on the machine: on
# a machine shared with other work they get a few percent of a core (two busy loops beside the suite left each
# at about 3%), and the cluster tests waited past their bounds (issue 80; EXPERIMENTS.md, "The suite beside
# two busy processes"). Every Ray the tests start, in this process or in the commands they run (which
# inherit this environment), gives its workers an equal share instead; docs/cluster.md says how a user does.
os.environ.setdefault("RAY_worker_niceness", "0")


@pytest.fixture(scope="session", autouse=True)
def cache_of_the_tests(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keeps the user's cache (the engine's kept precision, alphazero.user_cache) out of the tests' way:
    this process and the commands the tests start use a folder of the run's, unless one is set already."""
    os.environ.setdefault("ALPHAZERO_CACHE_DIR", str(tmp_path_factory.mktemp("user-cache")))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Runs a test of the saturates_the_cores group with the machine to itself: the other worker waits (issue 92).

    Beside another worker's tests, on a 2-core AMD EPYC, the 256 actors' Ctrl-C and the hosts' faults outran
    their bounds; alone, each passes. The wait is outside each test's --timeout (pytest-timeout times this same
    hook, inside this wrapper): a test that waits for the hosts' minutes is not timed out for it. The lock's files
    are in the run's folder, which each xdist worker's --basetemp (popen-gwN) is in; one process (``-n 0``)
    needs none.
    """
    basetemp = item.config.option.basetemp
    if "PYTEST_XDIST_WORKER" not in os.environ or not basetemp:
        yield
        return
    with machine_share(Path(basetemp).parent, alone=saturates_the_cores(item)):
        yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Runs the files that hold slow tests first (each file's tests stay together, in their order): the suite
    runs on two workers (pyproject.toml's addopts), and a long test handed out last would leave one worker
    running it alone at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(autouse=True)
def float32_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs this process's networks in float32 on the CPU whatever the processor has (precision 'auto' would
    time both and pick by the clock, which a test must not depend on); tests of bf16 ask for it, or replace
    the probe themselves (tests/test_precision.py). Subprocesses and Ray actors choose as users' do."""
    import alphazero.nn.precision as precision

    monkeypatch.setattr(precision, "native_bf16", lambda: None)


@pytest.fixture
def ctrl_c_heard() -> Iterator[None]:
    """Ctrl-C's SIGINT handled in this process while the test runs, as a terminal's foreground command has it.

    A suite started in the background ignores SIGINT, and so would the commands it starts (a child keeps an
    ignored signal): the commands then keep ignoring it, as they should (alphazero.stop_signals), and a test
    that sends it would wait in vain. A handled signal is reset to its default in a child.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if previous is not None:  # None: set outside Python; nothing to put back
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Runs a test module's networks on one thread (the machine is shared), then restores torch's setting."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def games_started(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the games the match runner (eval.match) starts, for tests of what happens before the first."""
    import eval.match as match_module

    started: list[int] = []
    original = match_module._start_game

    def counting(*args: object, **kwargs: object) -> object:
        started.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(match_module, "_start_game", counting)
    return started


@pytest.fixture(scope="session")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model file of the tiny preset's network with seeded random weights (for the UCI engine and agents)."""
    from alphazero.nn.network import AlphaZeroNet
    from alphazero.store.checkpoint import save_model

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("net") / "net.pt"
    save_model(path, AlphaZeroNet(get_preset("tiny").network))
    return path
