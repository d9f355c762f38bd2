"""The engine's CPU threads: how torch's intra-op threads wait, and how many the default (Threads 0) takes.

torch runs a CPU pass on an OpenMP pool (libgomp in its Linux wheels). Each
of a pass's many small operations ends at a barrier where the pool's threads
wait for the slowest; by default they spin there before sleeping. Alone on
the machine that costs nothing; beside other work a spinning thread burns
the time slice its straggling partner needs, and a 2-core machine with one
busy process beside the engine searched at a fraction of its lone speed
(EXPERIMENTS.md, "The engine beside other work"). So the engine's process
asks OpenMP to wait passively (``OMP_WAIT_POLICY=PASSIVE``: a waiting thread
sleeps at once), unless the user set a policy; OpenMP reads it once, when
torch loads, so ``prepare_process`` runs before torch is imported.

Threads 0 takes the machine's cores where the threads wait passively; where
they spin (the user's policy, or torch loaded before the engine set it), the
cores less those other work keeps busy, measured from the engine's start to
the network's load at ``isready`` (``BusyMeter``: the machine's non-idle CPU
time from /proc/stat, less the engine's own and less niced work, which
yields to the engine), at least one (``default_threads``). A Threads the
user gives is taken as given.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

WAIT_POLICY = "PASSIVE"
"""OpenMP's wait policy in the engine's process, unless OMP_WAIT_POLICY is set (see the module docstring)."""

PROC_STAT = Path("/proc/stat")


_late = False  # prepare_process set the policy after torch was imported: OpenMP spins regardless


def prepare_process(environ: MutableMapping[str, str] | None = None) -> bool:
    """Sets OMP_WAIT_POLICY to WAIT_POLICY in ``environ`` (default os.environ) unless it is set; returns whether
    the policy will hold: False when torch was imported already (OpenMP has read its environment then)."""
    global _late
    environ = os.environ if environ is None else environ
    held = "torch" not in sys.modules
    if "OMP_WAIT_POLICY" not in environ:
        environ["OMP_WAIT_POLICY"] = WAIT_POLICY
        _late = _late or not held
    return held


def waits_passively(environ: Mapping[str, str] | None = None) -> bool:
    """Whether torch's OpenMP threads in this process wait passively (OMP_WAIT_POLICY passive, set in time)."""
    environ = os.environ if environ is None else environ
    return environ.get("OMP_WAIT_POLICY", "").strip().lower() == "passive" and not _late


def default_threads(cores: int, busy_elsewhere: float, *, passive: bool) -> int:
    """The threads of Threads 0 on ``cores`` cores while other work keeps ``busy_elsewhere`` of them busy.

    Waiting passively, every core: beside one or two busy processes the
    pool's threads took more of the machine's time than one thread did, and
    searched faster (EXPERIMENTS.md, "The engine beside other work").
    Spinning (a user's OMP_WAIT_POLICY=active), the cores less the busy
    ones, rounded to the nearest, at least 1: spinning threads beside other
    work searched at a hundredth of their lone speed, one thread at a part.

    >>> default_threads(2, 1.0, passive=True), default_threads(2, 0.4, passive=False)
    (2, 2)
    >>> default_threads(2, 1.0, passive=False), default_threads(2, 3.5, passive=False)
    (1, 1)
    >>> default_threads(16, 2.6, passive=False)
    13

    Raises ValueError for fewer than one core or a negative load.
    """
    if cores < 1:
        raise ValueError(f"cores must be at least 1, got {cores}")
    if busy_elsewhere < 0 or math.isnan(busy_elsewhere):
        raise ValueError(f"busy_elsewhere must be at least 0 cores, got {busy_elsewhere}")
    if passive:
        return cores
    return max(1, min(cores, math.floor(cores - busy_elsewhere + 0.5)))


@dataclass(frozen=True)
class CpuSample:
    """The machine's CPU time at one moment: non-idle seconds (niced work left out), the process's own CPU
    seconds, and the wall clock."""

    busy_s: float
    own_s: float
    wall_s: float


def _read_proc_stat(path: Path = PROC_STAT) -> float | None:
    """The machine's non-idle, non-niced CPU seconds so far (user, system, irq, softirq and steal of all
    cores, from the first line of /proc/stat), or None where there is no such file."""
    try:
        first = path.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not first or first[0] != "cpu" or len(first) < 9:
        return None
    user, _nice, system, _idle, _iowait, irq, softirq, steal = (int(field) for field in first[1:9])
    return (user + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class BusyMeter:
    """Measures the cores other work keeps busy over a stretch of the engine's time (start() ... busy()).

    ``read`` gives the machine's non-idle seconds (default: /proc/stat);
    where it gives None (no /proc), busy() falls back to the load average
    over the last minute, less the engine's own threads.
    """

    def __init__(self, read: Callable[[], float | None] = _read_proc_stat,
                 load_average: Callable[[], float] | None = None) -> None:
        self._read = read
        self._load_average = load_average or _load_average
        self._start: CpuSample | None = None

    def _sample(self) -> CpuSample | None:
        busy = self._read()
        return None if busy is None else CpuSample(busy, time.process_time(), time.monotonic())

    def start(self) -> None:
        """Starts the stretch measured."""
        self._start = self._sample()

    def busy(self, own_threads: int = 0) -> float:
        """The cores other work kept busy since start() (0 for a stretch too short to tell); without /proc/stat,
        the load average less ``own_threads``."""
        end = self._sample()
        if self._start is None or end is None:
            return max(self._load_average() - own_threads, 0.0)
        wall = end.wall_s - self._start.wall_s
        if wall <= 0.05:  # a few clock ticks: nothing to tell
            return 0.0
        others = (end.busy_s - self._start.busy_s) - (end.own_s - self._start.own_s)
        return max(others / wall, 0.0)


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # (Windows has none)
        return 0.0


def machine_cores() -> int:
    """The cores this process may run on (its affinity where the system says; else the machine's)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return max(len(affinity(0)), 1)
    return max(os.cpu_count() or 1, 1)


__all__ = ["BusyMeter", "CpuSample", "WAIT_POLICY", "default_threads", "machine_cores", "prepare_process",
           "waits_passively"]
