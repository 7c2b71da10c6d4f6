"""Reading a child process's pipe without hanging the suite on it."""

from __future__ import annotations

import queue
import threading
from typing import IO, AnyStr


def readline(stream: IO[AnyStr], timeout: float = 30.0) -> AnyStr:
    """`stream.readline()`, failing after `timeout` seconds instead of waiting forever.

    The read runs in a daemon thread (a buffered pipe cannot be polled reliably), which
    ends once the test kills the child and the pipe closes.
    """
    lines: queue.Queue[AnyStr] = queue.Queue(maxsize=1)
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"no line from the child process within {timeout} s") from None
