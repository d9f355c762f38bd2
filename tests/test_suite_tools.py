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


def _worker_of_short_tests(folder: Path, spans: Any, first_done: Any, stop: Any) -> None:
    """The other worker: tests of 20 ms each, back to back, each in its share of the machine."""
    while not stop.is_set():
        with machine_share(folder, alone=False):
            began = time.monotonic()
            time.sleep(0.02)  # the test's work
            spans.put(("shared", began, time.monotonic()))
        first_done.set()


def _test_alone(folder: Path, spans: Any) -> None:
    with machine_share(folder, alone=True):
        began = time.monotonic()
        time.sleep(0.5)  # the test's work
        spans.put(("alone", began, time.monotonic()))


def test_a_test_alone_runs_while_no_other_test_does_and_gets_its_turn(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    spans, first_done, stop = context.Queue(), context.Event(), context.Event()
    other = context.Process(target=_worker_of_short_tests, args=(tmp_path, spans, first_done, stop))
    other.start()
    seen: list[tuple[str, float, float]] = []
    try:
        assert first_done.wait(HANG_BOUND_S)
        alone = context.Process(target=_test_alone, args=(tmp_path, spans))
        alone.start()
        alone.join(HANG_BOUND_S)
        assert alone.exitcode == 0, "the test alone never got the machine"
        while not [span for span in seen if span[0] == "alone"]:
            seen.append(spans.get(timeout=HANG_BOUND_S))
        (_, began, ended) = seen[-1]
        while seen[-1][1] < ended:  # the other worker goes on after it
            seen.append(spans.get(timeout=HANG_BOUND_S))
    finally:
        stop.set()
        other.join(HANG_BOUND_S)
    beside = [span for span in seen if span[0] == "shared" and span[1] < ended and span[2] > began]
    assert not beside, f"{len(beside)} tests ran beside it"
    assert len(seen) > 2


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
    waiting = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                                "def waiting_for_godot():\n    print('ready', flush=True)\n    time.sleep(600)\n"
                                "waiting_for_godot()"], stdout=subprocess.PIPE, text=True)
    try:
        assert waiting.stdout is not None and waiting.stdout.readline() == "ready\n"
        stacks = python_stacks(waiting.pid)
    finally:
        waiting.kill()
        waiting.communicate()
    assert "waiting_for_godot" in stacks, stacks
