"""The learner's Ctrl-C and SIGTERM: the first stops it after the step in flight, which it saves; the second at once.

Example::

    with stop_on_interrupt(stop, interrupted, progress):
        while not stop.is_set():
            ...  # one training step
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from types import FrameType

from alphazero.stop_signals import handling_stop_signals
from learner.reporting import Progress

__all__ = ["stop_on_interrupt"]


@contextlib.contextmanager
def stop_on_interrupt(stop: threading.Event, interrupted: threading.Event, progress: Progress) -> Iterator[None]:
    """Makes the first Ctrl-C or SIGTERM set ``stop`` (and ``interrupted``) instead of raising; the second raises.

    SIGTERM (systemd, `docker stop`, Kubernetes, `timeout`) stops as Ctrl-C
    does: the step in flight is finished and saved. Only the main thread can
    handle signals; elsewhere this does nothing, as it does for a signal the
    process was started ignoring (alphazero.stop_signals).
    """

    def handle(signum: int, frame: FrameType | None) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()
        stop.set()
        progress.message("stopping after this step and saving a checkpoint (Ctrl-C again to quit without saving)")

    with handling_stop_signals(handle):
        yield
