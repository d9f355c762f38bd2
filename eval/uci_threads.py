"""The engine's CPU threads: how torch's intra-op threads wait, and how many the default (Threads 0) takes.

torch runs a CPU pass on an OpenMP pool (libgomp in its Linux wheels). Each
of a pass's many small operations ends at a barrier where the pool's threads
wait for the slowest; libgomp's threads spin there for a few milliseconds
before sleeping. Alone on the machine the spin is what makes two threads
fast (a thread that sleeps at once pays a wake-up at every barrier: a
quarter to a third of the lone speed); beside other work a spinning thread
burns the time slice its straggling partner needs, and two spinning threads
beside one busy process searched at a tenth of their lone speed, while one
thread, which has no partner to wait for, kept most of its own
(EXPERIMENTS.md, "The engine's threads follow the load").

So Threads 0 keeps OpenMP's spin and follows the load: the cores less those
other work keeps busy, measured from the engine's start to the network's
load at ``isready`` and then again every ``LOOK_S`` of each search
(``BusyMeter``: the machine's non-idle CPU time from /proc/stat, less the
engine's own and less niced work, which yields to the engine), at least one
(``default_threads``, ``ThreadsFollowingLoad``). Where the user asks OpenMP
to wait passively (``OMP_WAIT_POLICY=passive``, which libgomp reads when
torch loads), every core, since passive threads lose little beside other
work. A Threads the user gives is taken as given.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

LOOK_S = 0.25
"""Seconds between two looks at the load while Threads 0 follows it during a search."""

PROC_STAT = Path("/proc/stat")


def waits_passively(environ: Mapping[str, str] | None = None) -> bool:
    """Whether torch's OpenMP threads in this process wait passively: the user's OMP_WAIT_POLICY=passive or
    GOMP_SPINCOUNT=0 (libgomp reads them when torch loads; the engine sets neither)."""
    environ = os.environ if environ is None else environ
    return (environ.get("OMP_WAIT_POLICY", "").strip().lower() == "passive"
            or environ.get("GOMP_SPINCOUNT", "").strip() == "0")


def default_threads(cores: int, busy_elsewhere: float, *, passive: bool) -> int:
    """The threads of Threads 0 on ``cores`` cores while other work keeps ``busy_elsewhere`` of them busy.

    Spinning (OpenMP's default), the cores less the busy ones, rounded to
    the nearest, at least 1: two spinning threads beside a busy process
    search at a tenth of their lone speed, one thread at most of its own.
    Waiting passively (a user's OMP_WAIT_POLICY=passive), every core:
    passive threads lose little beside other work.

    >>> default_threads(2, 1.0, passive=True), default_threads(2, 0.4, passive=False)
    (2, 2)
    >>> default_threads(2, 0.7, passive=False), default_threads(2, 3.5, passive=False)
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


class ThreadsFollowingLoad:
    """Threads 0 during a search: every ``LOOK_S`` it measures the cores other work kept busy since its last
    look and sets torch's threads to ``default_threads`` of them (on the calling thread, the one that runs the
    passes: torch keeps the count per thread).

    A spinning pair beside a new busy process slows to a tenth, so the count must follow within a search, not
    at the next load; what the engine's own threads burn is its own CPU time, which the meter leaves out.
    """

    def __init__(self, cores: int, threads: int, *, meter: BusyMeter | None = None,
                 set_threads: Callable[[int], None] | None = None, look_s: float = LOOK_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cores = cores
        self.threads = threads
        self.busy = 0.0
        self._meter = meter or BusyMeter()
        self._set_threads = set_threads or _torch_set_num_threads
        self._look_s = look_s
        self._clock = clock
        self._last = clock()
        self._meter.start()

    def look(self) -> bool:
        """Measures the load and sets the threads where a look is due; returns whether the count changed."""
        now = self._clock()
        if now - self._last < self._look_s:
            return False
        self.busy = self._meter.busy()
        self._meter.start()
        self._last = now
        wanted = default_threads(self.cores, self.busy, passive=False)
        if wanted == self.threads:
            return False
        self._set_threads(wanted)
        self.threads = wanted
        return True


def _torch_set_num_threads(count: int) -> None:
    import torch

    torch.set_num_threads(count)


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


__all__ = ["LOOK_S", "BusyMeter", "CpuSample", "ThreadsFollowingLoad", "default_threads", "machine_cores",
           "waits_passively"]
