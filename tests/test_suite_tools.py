"""The suite's own tools: the lock that gives a test of the saturates_the_cores group the machine to itself
(tests/conftest.py), and the stacks a test reports of a command it waited on in vain.

What the suite relies on: while such a test runs, no test of the other worker
runs, and the other worker, which runs its tests back to back, neither
starves it nor deadlocks with it; a hang's report says where it hung.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import python_stacks
from tests.machine_share import CORES_GROUP, machine_share, saturates_the_cores

HANG_BOUND_S = 60.0  # only stops a hang: each process ends on its condition long before


def _worker_of_short_tests(folder: Path, alone_inside: Any, beside: Any, done: Any, asked: Any, stop: Any) -> None:
    """The other worker: tests back to back, each in its share of the machine; one that finds the test alone
    inside counts itself in ``beside``."""
    while not stop.is_set():
        asked.value = 1  # asking for its share
        with machine_share(folder, alone=False):
            asked.value = 0
            if alone_inside.value:
                beside.value += 1
            done.value += 1


def _test_alone(folder: Path, alone_inside: Any, asked: Any, done: Any, finished: Any) -> None:
    with machine_share(folder, alone=True):
        alone_inside.value = 1
        finished.value = done.value
        deadline = time.monotonic() + HANG_BOUND_S
        while not asked.value:  # until the other worker asks for its share while this test holds the machine
            assert time.monotonic() < deadline
        alone_inside.value = 0


def test_a_test_alone_runs_while_no_other_test_does_and_gets_its_turn(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    alone_inside, beside, done, finished, asked = (context.Value("i", 0) for _ in range(5))
    stop = context.Event()
    other = context.Process(target=_worker_of_short_tests, args=(tmp_path, alone_inside, beside, done, asked, stop))
    other.start()
    try:
        alone = context.Process(target=_test_alone, args=(tmp_path, alone_inside, asked, done, finished))
        alone.start()
        alone.join(HANG_BOUND_S)
        assert alone.exitcode == 0, "the test alone never got the machine"
        held_at = finished.value
        deadline = time.monotonic() + HANG_BOUND_S
        while done.value <= held_at + 1:  # the other worker goes on after it
            assert time.monotonic() < deadline, "the other worker never went on"
    finally:
        stop.set()
        other.join(HANG_BOUND_S)
    assert beside.value == 0, f"{beside.value} tests ran beside it"


class _Item:
    def __init__(self, marker: pytest.Mark | None) -> None:
        self.marker = marker

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.marker if name == "xdist_group" else None


@pytest.mark.parametrize(("marker", "alone"), [
    (pytest.mark.xdist_group(CORES_GROUP).mark, True),
    (pytest.mark.xdist_group(name=CORES_GROUP).mark, True),
    (pytest.mark.xdist_group("another").mark, False),
    (None, False),
])
def test_the_group_is_found_by_its_marker(marker: pytest.Mark | None, alone: bool) -> None:
    assert saturates_the_cores(_Item(marker)) is alone  # type: ignore[arg-type]


def test_the_stacks_of_a_waiting_command_say_where_it_waits() -> None:
    waiting = subprocess.Popen([sys.executable, "-c", "import sys\n"
                                "def waiting_for_godot():\n    print('ready', flush=True)\n    sys.stdin.read()\n"
                                "waiting_for_godot()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert waiting.stdout is not None and waiting.stdout.readline() == "ready\n"
        stacks = python_stacks(waiting.pid)
    finally:
        waiting.kill()
        waiting.communicate()
    assert "waiting_for_godot" in stacks, stacks
