"""A running count on stderr while a long command reads (`calibrate: 1234 runs read`),
only when stderr is a terminal: a log file or a pipe gets no carriage returns."""

from __future__ import annotations

import time
from typing import TextIO

from ..core.display import plural

CLEAR = "\r\x1b[K"  # back to the line's start, and erase it


class Progress:
    """Counts with `tick`, redrawing the line at most every `every` seconds; `done` erases
    it. Write other stderr text through it (it is a stream): the count is erased first, so
    a message never lands in the middle of it."""

    def __init__(self, label: str, stream: TextIO, every: float = 0.2) -> None:
        self.label = label
        self.stream = stream
        self.every = every
        try:
            self.active = stream.isatty()
        except (AttributeError, ValueError):  # a replaced or closed stream
            self.active = False
        self.count = 0
        self._next = 0.0
        self._shown = False

    def tick(self) -> None:
        self.count += 1
        if not self.active:
            return
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every
            self.stream.write(f"{CLEAR}{self.label}: {plural(self.count, 'run')} read")
            self.stream.flush()
            self._shown = True

    def write(self, text: str) -> int:
        self._erase()
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def done(self) -> None:
        self._erase()
        self.stream.flush()

    def _erase(self) -> None:
        if self._shown:
            self.stream.write(CLEAR)
            self._shown = False
