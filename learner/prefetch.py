"""A background thread that makes the next items while their consumer works on the current one.

``Prefetcher(make)`` calls ``make(closed)`` on its thread, again and again,
and keeps up to ``depth`` of its results in a queue; ``get`` takes them in
order. ``make`` returns None to end the thread (it was closed while it waited:
``closed`` is the event it waits on). An exception raised by ``make`` ends
the thread and is raised again by the ``get`` that reaches it, with its
traceback. ``close`` stops the thread once its current call returns; it is a
daemon thread, so that a process quitting at once (a second Ctrl-C) never
waits for it.

Example::

    with Prefetcher(lambda closed: next_batch()) as batches:
        batch = batches.get(timeout=0.25)   # None: none was ready in time
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Prefetcher"]

T = TypeVar("T")


@dataclass(frozen=True)
class _Failed:
    error: BaseException


class Prefetcher(Generic[T]):
    """Runs ``make`` on a background thread, up to ``depth`` results ahead of ``get``.

    Args:
        make: makes the next item; gets the event ``close`` sets, to wait on;
            returns None to end the thread.
        depth: the most items made and not yet taken.
        name: the thread's name.
    """

    def __init__(self, make: Callable[[threading.Event], T | None], *, depth: int = 2,
                 name: str = "prefetch") -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self._make = make
        self._queue: queue.Queue[T | _Failed] = queue.Queue(maxsize=depth)
        self.closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        try:
            while not self.closed.is_set():
                item = self._make(self.closed)
                if item is None:
                    return
                self._queue.put(item)  # close() empties the queue, so a put never blocks after it
        except BaseException as error:  # noqa: BLE001  (raised again in the consumer's thread)
            self._queue.put(_Failed(error))

    def get(self, timeout: float | None = None) -> T | None:
        """Takes the next item, waiting up to ``timeout`` seconds (None: until one comes); None if none came.

        Raises:
            BaseException: what ``make`` raised (the thread has ended).
        """
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, _Failed):
            raise item.error
        return item

    @property
    def alive(self) -> bool:
        """Checks whether the thread still runs."""
        return self._thread.is_alive()

    def close(self, *, wait: bool = True) -> None:
        """Stops the thread once its current ``make`` returns (a waiting one returns at once); drops what it made.

        ``wait`` joins the thread; without it the thread may still be in its last call when this returns.
        """
        self.closed.set()
        self._drain()  # a put blocked on a full queue goes through, and the next loop sees closed
        if wait:
            self._thread.join()
            self._drain()

    def _drain(self) -> None:
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
