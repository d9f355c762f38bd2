"""The engine's debug log (the Debug Log File option, Stockfish's name): every line the engine hears and says,
and each search's start and end, each line with the wall-clock time to the microsecond.

A line the engine heard is marked `>>`, one it said `<<` (Stockfish's marks), and the engine's own notes
`--`. The log is appended to, so a tournament manager that starts the engine once per game keeps every
game's lines in one file. It shows where a move's time went: a `go` heard late is the GUI's or the pipe's
delay, a search that starts late waited for the network thread, and the gap between the search's end and
its `bestmove` is the engine's own. A search's times count from its `go` (a ponder search's from
`ponderhit`).

    2026-12-06 15:20:01.123456 >> go wtime 9870 btime 9912 winc 100 binc 100
    2026-12-06 15:20:01.123789 -- search starts 0.3 ms after go, budget 262 ms
    2026-12-06 15:20:01.384012 -- search ends 260.5 ms after go: 812 nodes, 101 network calls
    2026-12-06 15:20:01.384301 << bestmove e2e4 ponder e7e5
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import threading
from typing import TextIO

HEARD, SAID, NOTE = ">>", "<<", "--"
"""The marks of a line the engine read, a line it wrote, and its own note."""


class DebugLog:
    """Appends timestamped lines to a file from any thread; writes nothing while no file is open."""

    def __init__(self) -> None:
        self._file: TextIO | None = None
        self._lock = threading.Lock()

    def open(self, path: str) -> None:
        """Starts logging to ``path`` (appended to), or stops for an empty path; the file logged to before is
        closed either way.

        Raises:
            OSError: the file cannot be opened for appending (the log is then off).
        """
        self.close()
        if path.strip():
            try:
                opened = open(path, "a", encoding="utf-8", buffering=1)  # line-buffered: a crash loses no line
            except ValueError as error:  # a name with a NUL byte
                raise OSError(errno.EINVAL, f"not a usable file name ({error})") from None
            with self._lock:
                self._file = opened

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def write(self, mark: str, text: str) -> None:
        """Writes one line: the time, the mark, the text without its line end. A full disk or a removed file
        does not stop the engine: the log turns off."""
        if self._file is None:
            return
        with self._lock:  # the time taken under the lock: the lines' times never go back
            if self._file is None:
                return
            now = datetime.datetime.now().isoformat(sep=" ", timespec="microseconds")
            try:
                self._file.write(f"{now} {mark} {text.rstrip()}\n")
            except (OSError, ValueError):
                with contextlib.suppress(OSError, ValueError):
                    self._file.close()
                self._file = None


__all__ = ["HEARD", "NOTE", "SAID", "DebugLog"]
