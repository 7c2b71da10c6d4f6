"""The append-only JSONL incident log a supervisor reads to spot a tripped agent."""

from __future__ import annotations

import os

from ._log import warn
from .display import utc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def incident_line(kind: str, tool: str, count: int, limit: int, who: dict[str, Any]) -> bytes:
    record: dict[str, Any] = {
        "time": utc(),
        "kind": kind,
        "tool": tool,
        "count": count,
        "limit": limit,
    }
    record.update(who)
    import json  # only on a first denial: the allow path of a hook skips the import

    return (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()


def append_incident(path: str, line: bytes) -> bool:
    """Append one line; never raises. One O_APPEND write per line, so concurrent
    appenders (threads or processes) never interleave inside a line. The log must be a
    regular file of ours (not a symlink, not a FIFO) in a directory only we can write."""
    from .files import check_directory, open_private

    try:
        path = os.path.expanduser(path)
        check_directory(os.path.dirname(os.path.abspath(path)))
        fd = open_private(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            written = os.write(fd, line)
        finally:
            os.close(fd)
        if written != len(line):
            warn("dsh-circuit-breaker: short write to incident log %s", path)
            return False
        return True
    except Exception as exc:  # a bad path or full disk must never touch a decision
        warn("dsh-circuit-breaker: cannot write incident log %s: %s", path, exc)
        return False
