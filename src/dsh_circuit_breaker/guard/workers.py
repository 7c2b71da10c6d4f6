"""The threads that answer the HTTP guard's requests for its event loop.

What `loop.run_in_executor` does per request (a concurrent Future with its Condition, an
asyncio Future chained to it, the pool's idle semaphore, and a write to the loop's wake-up
socket for every answer) was, under 32 clients, a fifth of the guard's time holding the
GIL, and the wake-ups a good part of its context switches. Here a request goes to the
threads through one queue, and answers come back in bursts: a thread that finishes while
the loop has not yet taken the answers before it adds its own to them rather than waking
the loop again. So under load the loop is woken once for several answers, and threads
block only when there is nothing to do.

A decision still runs whole on one of these threads (the store's transaction included):
the loop never waits for a store. Several threads deciding at once is also what lets the
SQLite store commit their decisions together (`stores.sqlite`, group commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_Job = tuple[Callable[[Any], Any], Any, "asyncio.Future[Any]"]


class Workers:
    """`count` daemon threads started on first use; `submit` from the event loop's
    thread only (one loop per pool)."""

    def __init__(self, count: int, name: str) -> None:
        self._count, self._name = count, name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards `_done` alone
        self._done: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []

    def submit(self, function: Callable[[Any], T], argument: Any) -> asyncio.Future[T]:
        """`function(argument)` on one of the threads; its value (or exception) in the
        future returned."""
        loop = asyncio.get_running_loop()
        if not self._threads:
            self._start()
        if loop is not self._loop:  # a new loop: answers owed to a closed one are moot
            with self._lock:
                self._done.clear()
            self._loop = loop
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((function, argument, future))
        return future

    def shutdown(self) -> None:
        """Let each thread end once it has finished what it is doing (not waited for)."""
        for _ in self._threads:
            self._jobs.put(None)
        self._threads = []

    def _start(self) -> None:
        for i in range(self._count):
            thread = threading.Thread(target=self._work, name=f"{self._name}_{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            function, argument, future = job
            value: Any = None
            error: BaseException | None = None
            try:
                value = function(argument)
            except BaseException as exc:  # handed to whoever awaits it
                error = exc
            with self._lock:
                self._done.append((future, value, error))
                wake = len(self._done) == 1  # otherwise a wake-up is on its way already
            if wake and self._loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                    self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        """On the loop: every answer finished since the last delivery."""
        with self._lock:
            done, self._done = self._done, []
        for future, value, error in done:
            if future.cancelled():  # its connection is gone
                continue
            if error is None:
                future.set_result(value)
            else:
                future.set_exception(error)
