"""RESP2 replies, read within a deadline and a byte budget (the Redis client's reader).

redis-py writes our commands; their replies are read here, not by redis-py, so that the
deadline holds in wall time for a server that trickles bytes, and a reply larger than any
valid agent record is refused from its header, before it is read.
"""

from __future__ import annotations

import time
from typing import Any

# A reply that carries no agent record (+OK, +QUEUED, EXEC's array, an error line).
SMALL_REPLY = 64 * 1024
# Our replies nest three deep at most (EXEC's array, SCAN's [cursor, [keys]], CLUSTER
# SLOTS' [[first, last, [host, port, id, [metadata]]]]).
MAX_DEPTH = 4


class Deadline(Exception):
    """The call's budget ran out before Redis answered."""


class Refused(Exception):
    """Redis answered with an error, or with something no valid reply looks like."""


class ErrorReply(bytes):
    """An error reply (`-ERR ...`), returned as a value: inside EXEC's array it is a
    failed command, and GET's WRONGTYPE is one agent's unreadable record."""


class Replies:
    """RESP2 replies read off `sock` within `deadline` and a budget of `limit` bytes.

    The budget is checked against each length a reply declares before anything of it is
    read: a `$10000000000` bulk or a `*999999999` array is refused from its header.
    """

    def __init__(self, sock: Any, deadline: float, limit: int) -> None:
        self._sock = sock
        self._deadline = deadline
        self._left = limit
        self._buffer = bytearray()

    def read(self, depth: int = 0) -> Any:
        line = self._line()
        kind, body = line[:1], bytes(line[1:])
        if kind == b"+":
            return body
        if kind == b"-":
            return ErrorReply(body)
        if kind == b":":
            return self._number(body)
        if kind == b"$":
            size = self._number(body)
            if size < 0:
                return None
            self._spend(size + 2)
            data = self._take(size + 2)
            if data[-2:] != b"\r\n":
                raise Refused("malformed bulk reply")
            return data[:-2]
        if kind == b"*":
            count = self._number(body)
            if count < 0:
                return None
            if depth >= MAX_DEPTH:
                raise Refused("reply nested too deeply")
            self._check(3 * count)  # the least each element takes (`+` CR LF)
            return [self.read(depth + 1) for _ in range(count)]
        raise Refused(f"not a RESP2 reply: {bytes(line[:40])!r}")

    def _check(self, size: int) -> None:
        if size > self._left:
            raise Refused(f"a reply of {size} bytes or more refused (larger than any record)")

    def _spend(self, size: int) -> None:
        self._check(size)
        self._left -= size

    def _number(self, body: bytes) -> int:
        if not body or len(body) > 20 or not body.lstrip(b"-").isdigit():
            raise Refused(f"malformed length or number in reply: {body[:40]!r}")
        return int(body)

    def _line(self) -> bytearray:
        start = 0
        while True:
            end = self._buffer.find(b"\r\n", start)
            if end >= 0:
                self._spend(end + 2)
                line = self._buffer[:end]
                del self._buffer[: end + 2]
                return line
            start = max(len(self._buffer) - 1, 0)
            self._check(len(self._buffer) + 1)
            self._fill()

    def _take(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _fill(self) -> None:
        self._sock.settimeout(time_left(self._deadline))
        data = self._sock.recv(65536)
        if not data:
            raise ConnectionError("Redis closed the connection")
        self._buffer += data


def ok(reply: Any) -> None:
    if isinstance(reply, ErrorReply):
        raise Refused(reply.decode(errors="replace"))


def items(reply: Any) -> list[Any]:
    return reply if isinstance(reply, list) else []


def pair(reply: Any) -> tuple[bytes, list[bytes]]:
    """SCAN's [cursor, [keys]]."""
    if (
        isinstance(reply, list)
        and len(reply) == 2
        and isinstance(reply[0], bytes)
        and isinstance(reply[1], list)
        and all(isinstance(k, bytes) and not isinstance(k, ErrorReply) for k in reply[1])
    ):
        return reply[0], reply[1]
    ok(reply)
    raise Refused("SCAN answered something else than [cursor, keys]")


def time_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Deadline
    return left
