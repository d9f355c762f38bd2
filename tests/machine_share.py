"""The machine shared by the suite's two workers, or held by one test alone (tests/conftest.py uses it).

The tests of the xdist group ``saturates_the_cores`` (256 actors starting; a
cluster of namespace hosts through faults) take a 2-core machine's every
cycle. pyproject.toml's ``--dist loadgroup`` puts them on one worker, one
after another; beside the other worker's tests, on a 2-core AMD EPYC, Ray's
health checks and the actors' starts outran their bounds (issue 92). So each
runs with the machine to itself: the other worker finishes the test it is in
and waits.

Example::

    with machine_share(folder, alone=saturates_the_cores(item)):
        ...  # the test
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["CORES_GROUP", "machine_share", "saturates_the_cores"]

CORES_GROUP = "saturates_the_cores"
"""The xdist group of the tests that take the whole machine."""


def saturates_the_cores(item: pytest.Item) -> bool:
    """Whether the test ``item`` is of the group that runs alone."""
    marker = item.get_closest_marker("xdist_group")
    return marker is not None and CORES_GROUP in (*marker.args, marker.kwargs.get("name"))


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    with path.open("a") as file:
        fcntl.flock(file, mode)  # blocks until granted; the kernel drops it if the holder dies
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


@contextlib.contextmanager
def machine_share(folder: Path, alone: bool) -> Iterator[None]:
    """Holds the machine for a test: shared with the other worker's tests, or (``alone``) to itself.

    A readers-writer lock over two files of ``folder``, which every worker of
    the run sees: each test holds ``cores`` shared, a test that saturates the
    cores holds it exclusively. The ``turnstile`` gives that test its turn: it
    takes the turnstile first and keeps it while it waits for the tests in
    progress to end, and every other test passes the turnstile before it takes
    its share, so none starts meanwhile (flock alone lets new shared holders
    in ahead of a waiting exclusive one, and a worker runs tests back to back).
    """
    turnstile, cores = folder / "machine.turnstile", folder / "machine.cores"
    if alone:
        with _flock(turnstile, fcntl.LOCK_EX), _flock(cores, fcntl.LOCK_EX):
            yield
        return
    with _flock(turnstile, fcntl.LOCK_EX):
        pass
    with _flock(cores, fcntl.LOCK_SH):
        yield
