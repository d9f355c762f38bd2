"""Handlers for the signals that stop a long command, set only where the process listens to them.

Ctrl-C sends SIGINT; a service manager, `docker stop` or `timeout` SIGTERM.
A process started with one of them ignored keeps it ignored, as Python itself
does for SIGINT: a shell starts a script's background job (`alphazero train
... &`) with SIGINT ignored, so that Ctrl-C stops the script's foreground
command and not the job.

Example::

    with handling_stop_signals(on_stop, (signal.SIGINT, signal.SIGTERM)):
        ...  # the long work
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from types import FrameType

__all__ = ["STOP_SIGNALS", "handling_stop_signals"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

Handler = Callable[[int, FrameType | None], None]


@contextlib.contextmanager
def handling_stop_signals(handler: Handler, signums: Iterable[int] = STOP_SIGNALS) -> Iterator[tuple[int, ...]]:
    """Sets ``handler`` for each of ``signums`` that this process does not ignore; puts the previous ones back.

    Yields the signals it set: none off the main thread, where Python sets no handler.
    """
    if threading.current_thread() is not threading.main_thread():
        yield ()
        return
    listened = tuple(signum for signum in signums if signal.getsignal(signum) is not signal.SIG_IGN)
    previous = {signum: signal.signal(signum, handler) for signum in listened}
    try:
        yield listened
    finally:
        for signum, before in previous.items():
            if before is not None:  # None: set outside Python; nothing of ours to put back
                signal.signal(signum, before)
