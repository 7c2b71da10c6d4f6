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


def record_of(line: str) -> dict[str, Any] | None:
    """The incident a log line holds, or None when the line is not one (not JSON, too
    deeply nested, not an object, or a field of the wrong type): such lines are counted,
    never printed, since their bytes may be anything."""
    import json

    try:
        record: Any = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    for name in ("time", "kind", "tool"):
        if not isinstance(record.get(name, ""), str):
            return None
    for name in ("count", "limit"):
        value = record.get(name, 0)
        if not isinstance(value, int) or isinstance(value, bool):
            return None
    agent, keys = record.get("agent"), record.get("agentKeys")
    if agent is not None and not isinstance(agent, (str, int)):
        return None
    if keys is not None and not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        return None
    return record
