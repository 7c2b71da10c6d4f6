"""Warnings go through `logging`, imported only when there is something to say: a hook
process that allows a call quietly must not pay for importing it."""

from __future__ import annotations

LOGGER = "dsh_circuit_breaker"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# A process that owns its stderr may take every warning itself instead of `logging`:
# the command hook writes each as exactly one line, never a traceback.
sink: Callable[[str], None] | None = None


def warn(message: str, *args: object, exc_info: bool = False) -> None:
    if sink is not None:
        text = message % args if args else message
        if exc_info:
            import sys

            error = sys.exc_info()[1]
            if error is not None:
                text = f"{text} ({type(error).__name__}: {error})"
        sink(text)
        return
    import logging

    logging.getLogger(LOGGER).warning(message, *args, exc_info=exc_info)
