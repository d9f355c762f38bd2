"""A CPU's precision choice measured once per machine and network shape, and kept in the user's cache.

``Precision auto`` on a CPU with native bf16 times bf16 against float32 on
the network at hand (alphazero.nn.precision). Timed afresh by each process
for 20 ms a round, the choice followed the machine's load of the moment: the
same network measured 1.03x under load (float32 chosen) and 1.9x quiet, so
two engines of one match could run different precisions, hundreds of Elo
apart at a fast clock (EXPERIMENTS.md, "bf16 on the CPU"). The UCI engine
therefore measures once, with KEPT_TIMING_ROUNDS rounds alternating (the
fastest of each counts, so a burst of load elsewhere is left out), on the
pass it runs (batch norm folded), and keeps the answer in
``precision.json`` in the user's cache (alphazero.user_cache), keyed
by the processor, torch's version, the network's architecture and the
batch: every later engine on the machine runs the same. Delete the file to
measure again; the Precision option (bf16 or float32) overrides it.
"""

from __future__ import annotations

import datetime
import json
import platform
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

import torch

from alphazero.user_cache import user_cache_dir, write_atomic

KEPT_TIMING_ROUNDS = 8
"""Rounds of each precision, alternating, in the measurement that is kept: a choice that holds for every later
process can spend a second on it."""

FILE_NAME = "precision.json"


def processor_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's model name (/proc/cpuinfo's, else platform's), which keys a kept choice."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown processor"


@dataclass(frozen=True)
class KeptChoice:
    """A kept measurement: the precision, float32's time over bf16's, and when it was measured (ISO date)."""

    name: str
    speedup: float
    measured: str


class KeptPrecisions:
    """The kept choices in ``path`` (default: precision.json in the user's cache): get(key), put(key, ...).

    A file that is missing or unreadable holds nothing (the choice is measured again); one that cannot be
    written leaves the choice to this process (``write_error`` says why).
    """

    def __init__(self, path: Path | None = None, *, today: Callable[[], str] | None = None) -> None:
        self.path = path if path is not None else user_cache_dir() / FILE_NAME
        self._today = today or (lambda: datetime.date.today().isoformat())
        self.write_error: str | None = None

    def key_text(self, key: Hashable) -> str:
        """The file's key of a network's ``key`` (its architecture, purpose, batch) on this machine."""
        return f"{processor_name()} | torch {torch.__version__} | {key!r}"

    def _entries(self) -> dict[str, dict[str, object]]:
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return entries if isinstance(entries, dict) else {}

    def get(self, key: Hashable) -> KeptChoice | None:
        """The choice kept for ``key``, or None (none kept, or a malformed entry)."""
        entry = self._entries().get(self.key_text(key))
        if not isinstance(entry, dict):
            return None
        name, speedup, measured = entry.get("precision"), entry.get("speedup"), entry.get("measured")
        if name not in ("bf16", "float32") or not isinstance(speedup, (int, float)) or not isinstance(measured, str):
            return None
        return KeptChoice(str(name), float(speedup), measured)

    def put(self, key: Hashable, name: str, speedup: float) -> KeptChoice:
        """Keeps a measured choice for ``key`` (the file rewritten whole, atomically); returns it."""
        choice = KeptChoice(name, speedup, self._today())
        entries = self._entries()
        entries[self.key_text(key)] = {"precision": name, "speedup": round(speedup, 3), "measured": choice.measured}
        try:
            write_atomic(self.path, json.dumps(entries, indent=1, sort_keys=True) + "\n")
        except OSError as error:
            self.write_error = f"cannot keep it in {self.path}: {error.strerror or error}"
        return choice


__all__ = ["FILE_NAME", "KEPT_TIMING_ROUNDS", "KeptChoice", "KeptPrecisions", "processor_name"]
