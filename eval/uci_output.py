"""The UCI engine's output to the GUI: whole lines from any thread, and its input made lenient.

Output.line writes one line and flushes it, under a lock (the search's
thread and the command loop both write), and hands it to a listener (the
debug log, eval.uci_log); a GUI that went away is not an error.
``info_string_line`` makes the one-line `info string` that the engine
answers bad input and notes with, cut to INFO_STRING_LIMIT.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TextIO

INFO_STRING_LIMIT = 400
"""The longest `info string` text (a message quoting a 20 000-character line is no help to a GUI)."""


class Output:
    """Writes whole lines to the GUI from any thread, flushing each one; ``listener`` hears each line after it
    is written."""

    def __init__(self, stream: TextIO, listener: Callable[[str], None] | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._listener = listener

    def line(self, text: str) -> None:
        with self._lock:
            try:
                self._stream.write(text + "\n")
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                pass  # the GUI went away (or closed our stream); nothing to tell it
            if self._listener is not None:
                self._listener(text)


def info_string_line(text: str) -> str:
    """Gets `info string TEXT` as one line, TEXT cut to INFO_STRING_LIMIT characters.

    >>> info_string_line("no  legal\\nmoves")
    'info string no legal moves'
    """
    text = " ".join(text.split())
    if len(text) > INFO_STRING_LIMIT:
        text = text[:INFO_STRING_LIMIT] + "..."
    return "info string " + text


def lenient(stream: TextIO) -> TextIO:
    """Makes a text stream replace undecodable bytes instead of raising (garbage must not end the engine)."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(errors="replace")
        except (ValueError, OSError):
            pass
    return stream


__all__ = ["INFO_STRING_LIMIT", "Output", "info_string_line", "lenient"]
