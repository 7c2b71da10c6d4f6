"""How the commands show values to a person: one clock (UTC, marked `Z`), a number with its
noun, and text from a harness or a store with its control characters escaped.

Imported by the incident log on a first denial, so it imports nothing but `time`.
"""

from __future__ import annotations

import time

STAMP = "%Y-%m-%dT%H:%M:%SZ"


def utc(seconds: float | None = None) -> str:
    """`2026-09-01T23:10:07Z`: the one clock of the incident log, `status` and `incidents`."""
    return time.strftime(STAMP, time.gmtime(seconds))


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 run`, `2 runs`; `many` where adding an `s` is not the plural."""
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def printable(text: str) -> str:
    """`text` with every character a terminal would act on (escape sequences, carriage
    returns, bidirectional overrides) written as a Python escape, so a hostile tool or agent
    name cannot rewrite the screen."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
