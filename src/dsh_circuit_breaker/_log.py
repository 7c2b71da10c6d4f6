"""Warnings go through `logging`, imported only when there is something to say: a hook
process that allows a call quietly must not pay for importing it."""

from __future__ import annotations

LOGGER = "dsh_circuit_breaker"


def warn(message: str, *args: object, exc_info: bool = False) -> None:
    import logging

    logging.getLogger(LOGGER).warning(message, *args, exc_info=exc_info)
