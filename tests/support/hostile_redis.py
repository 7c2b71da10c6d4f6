"""A hostile Redis on 127.0.0.1: it speaks just enough RESP2 to lead a client into a
decision, then answers the way a broken or malicious server would: one byte at a time,
a bulk reply of gigabytes, an array of a billion elements, an error inside EXEC.

Servers that behave are the real redis-server (support/redis_server.py); this one exists
for what a real server never does. Each connection gets `answer(command)`, an iterable
of byte chunks, sent `pace` seconds apart; the server stops after `cap` bytes per
connection (so a client that reads everything is never fed more than that) and when
the `with` block ends. `sent` counts the bytes the client accepted.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterable, Iterator

Answer = Callable[[list[bytes]], Iterable[bytes]]

_NORMAL = {
    b"WATCH": b"+OK\r\n",
    b"UNWATCH": b"+OK\r\n",
    b"GET": b"$-1\r\n",
    b"MULTI": b"+OK\r\n",
    b"SET": b"+QUEUED\r\n",
    b"EXEC": b"*1\r\n+OK\r\n",
    b"DEL": b":1\r\n",
    b"AUTH": b"+OK\r\n",
    b"SELECT": b"+OK\r\n",
    b"PING": b"+PONG\r\n",
}


def normal(command: list[bytes]) -> bytes:
    """What a real Redis answers to the commands of one decision on a new agent."""
    return _NORMAL.get(command[0].upper(), b"-ERR unknown command\r\n")


def trickled(answer: Answer, only: bytes) -> Answer:
    """`answer`'s reply to command `only` one byte per chunk, the others whole."""

    def bytewise(command: list[bytes]) -> Iterable[bytes]:
        reply = b"".join(answer(command))
        if command[0].upper() != only:
            return [reply]
        return (reply[i : i + 1] for i in range(len(reply)))

    return bytewise


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def endless(header: bytes, filler: bytes) -> Answer:
    """GET answered with `header`, then `filler` for as long as the client reads."""

    def answer(command: list[bytes]) -> Iterable[bytes]:
        if command[0].upper() != b"GET":
            return [normal(command)]
        chunk = filler * max(1, 65536 // len(filler))

        def stream() -> Iterator[bytes]:
            yield header
            while True:
                yield chunk

        return stream()

    return answer


def replacing(name: bytes, reply: bytes) -> Answer:
    """Normal, except that command `name` gets `reply`."""
    return lambda command: [reply if command[0].upper() == name else normal(command)]


class HostileRedis:
    def __init__(self, answer: Answer, *, pace: float = 0.0, cap: int = 64 * 1024 * 1024):
        self.answer = answer
        self.pace = pace
        self.cap = cap
        self.sent = 0
        self._done = threading.Event()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0?retry_after=0"

    def __enter__(self) -> HostileRedis:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=10)
        for sock in self._sockets:
            sock.close()
        self._listener.close()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._done.is_set():
            try:
                connection = self._listener.accept()[0]
            except OSError:
                continue
            # A small send buffer, so `sent` is close to what the client really took.
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
            self._sockets.append(connection)
            self._spawn(self._serve, connection)

    def _serve(self, connection: socket.socket) -> None:
        connection.settimeout(0.05)
        commands = _Commands()
        budget = self.cap
        with contextlib.suppress(OSError):
            while not self._done.is_set():
                try:
                    data = connection.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    return
                for command in commands.feed(data):
                    for chunk in self.answer(command):
                        chunk = chunk[:budget]
                        if not chunk or self._done.is_set():
                            return
                        connection.settimeout(None)
                        connection.sendall(chunk)
                        connection.settimeout(0.05)
                        budget -= len(chunk)
                        with self._lock:
                            self.sent += len(chunk)
                        if self.pace and self._done.wait(self.pace):
                            return


class _Commands:
    """Parses the client's RESP arrays of bulk strings as they arrive."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[list[bytes]]:
        self._buffer += data
        out = []
        while True:
            command, rest = _parse(self._buffer)
            if command is None:
                return out
            out.append(command)
            self._buffer = rest


def _parse(buffer: bytes) -> tuple[list[bytes] | None, bytes]:
    head, sep, rest = buffer.partition(b"\r\n")
    if not sep:
        return None, buffer
    if not head.startswith(b"*"):
        raise OSError(f"not a RESP command: {head[:40]!r}")
    parts = []
    for _ in range(int(head[1:])):
        size_line, sep, rest = rest.partition(b"\r\n")
        if not sep:
            return None, buffer
        size = int(size_line[1:])
        if len(rest) < size + 2:
            return None, buffer
        parts.append(rest[:size])
        rest = rest[size + 2 :]
    return parts, rest
