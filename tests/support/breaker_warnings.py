"""Counting the warnings the breaker logs in a worker process, where pytest's caplog does
not reach (a forked child logs to its own copy of the logging tree)."""

from __future__ import annotations

import logging


class WarningCount(logging.Handler):
    """A handler that counts the warning (and worse) records it is given."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def count_warnings() -> WarningCount:
    """Start counting the warnings of the `dsh_circuit_breaker` logger in this process."""
    counter = WarningCount()
    logging.getLogger("dsh_circuit_breaker").addHandler(counter)
    return counter
