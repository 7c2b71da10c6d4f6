"""The Redis client under the Redis store: connections to the node that holds a key, kept
idle per node and reused, and one budget per call for everything (connecting, each read,
following a cluster's redirects, waiting out a failover). Commands are packed by redis-py
and written in one write per round trip; replies are read by `redis_resp`.

`redis+cluster://` and `redis+sentinel://` only change where a key's commands go
(redis_topology.py): MOVED, ASK, a busy cluster and a failover are followed or waited out
inside the same budget, and a write already sent is never sent again.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..config import ConfigError
from .redis_resp import SMALL_REPLY, Deadline, ErrorReply, Refused, Replies, ok, time_left
from .redis_topology import Cluster, Sentinel, Single, TopologyError
from .unavailable import StoreUnavailable

try:
    from redis.backoff import NoBackoff
    from redis.connection import AbstractConnection, Connection
    from redis.exceptions import RedisError
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ConfigError(
        "a redis:// state URL needs the redis client: pip install 'dsh-circuit-breaker[redis]'"
    ) from exc

T = TypeVar("T")
Address = tuple[str, int]

DEFAULT_RETRY_AFTER = 5.0
# Cluster and Sentinel answers that mean "not here" or "not now": followed or tried
# again within the same budget.
_REROUTE = frozenset(
    (b"MOVED", b"ASK", b"TRYAGAIN", b"CLUSTERDOWN", b"LOADING", b"MASTERDOWN", b"READONLY")
)
_MAX_REDIRECTS = 64  # a decision bounces between nodes at most this often
_PAUSE = 0.05  # seconds between attempts while a cluster or a failover settles


class Redirect(Exception):
    """A cluster's MOVED or ASK (`slot`, `address`: where to go), or an answer that means
    try again shortly: TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY."""

    def __init__(self, error: bytes) -> None:
        self.text = error.decode(errors="replace")[:200]
        parts = error.split()
        self.kind = parts[0]
        self.slot = 0
        self.address: Address = ("", 0)
        if self.kind in (b"MOVED", b"ASK"):
            try:
                host, _, port = parts[2].decode().rpartition(":")
                self.slot, self.address = int(parts[1]), (host, int(port))
            except (IndexError, ValueError, UnicodeDecodeError):
                raise Refused(f"unreadable redirect: {self.text}") from None
        super().__init__(self.text)


class InDoubt(Exception):
    """The connection failed after a write was sent: Redis may have committed it."""


class RedisClient:
    """Connections to the node that holds a key, and one budget per call (`with_connection`).

    Idle connections are kept per node and reused; a forked child starts over with its
    own. After a failure the client answers StoreUnavailable at once for `retry_after`
    seconds, so a dead Redis costs one timeout per period, not one per tool call.
    """

    def __init__(
        self,
        connection_kwargs: dict[str, Any],
        budget: float,
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        where: str = "redis",
        topology: Single | Cluster | Sentinel | None = None,
    ) -> None:
        kwargs = dict(connection_kwargs)
        # parse_url names SSLConnection for rediss:// and nothing for plain redis://.
        self._connection_class = _bounded(kwargs.pop("connection_class", Connection))
        # AUTH and SELECT are sent by us in the same write as the first WATCH/GET, so a
        # fresh connection costs a TCP (or TLS) connect and no round trip of its own.
        self._password: str | None = kwargs.pop("password", None) or os.environ.get(
            "REDIS_PASSWORD"
        )
        self._username: str | None = kwargs.pop("username", None)
        self._db = int(kwargs.pop("db", 0) or 0)
        kwargs.pop("max_connections", None)
        address = (kwargs.pop("host", "localhost"), int(kwargs.pop("port", 6379)))
        self.topology = topology or Single(address)
        # No retries, no library-identification round trips, no health-check PINGs:
        # each of those would spend the budget behind our back.
        kwargs.update(
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            health_check_interval=0,
            driver_info=None,
            # RESP2: redis-py would otherwise open every connection with a HELLO 3 round
            # trip; RESP2 needs no handshake (AUTH and SELECT ride with our first write).
            protocol=2,
        )
        self._kwargs = kwargs
        try:  # not connected: only checks the TLS settings (a bad ssl_cert_reqs, ...)
            self._connection_class(**kwargs)
        except (TypeError, ValueError, RedisError) as exc:
            raise ConfigError(f"state URL ({where}): {exc}") from None
        self.budget = budget
        self.where = where
        self._retry_after = retry_after
        self._lock = threading.Lock()
        self._idle: dict[Address, list[AbstractConnection]] = {}
        self._pid = os.getpid()
        self._inherited: list[AbstractConnection] = []
        self._down_until = 0.0
        self._down_reason = ""

    def close(self) -> None:
        with self._lock:
            pools, self._idle = self._idle, {}
        for idle in pools.values():
            for conn in idle:
                _drop(conn)

    def with_connection(
        self,
        key: bytes | None,
        run: Callable[[AbstractConnection, float, bool, bool], T],
        address: Address | None = None,
    ) -> T:
        """`run` on a connection to the node that holds `key` (or `address`), within one
        budget: redirects followed, a cluster that is busy or a lost node tried again,
        until the deadline."""
        now = time.monotonic()
        deadline = now + self.budget
        if now < self._down_until:
            raise StoreUnavailable(
                f"{self.where} unavailable ({self._down_reason}); "
                f"next attempt in {self._down_until - now:.1f}s"
            )
        topology = self.topology
        asking: Address | None = None
        for _ in range(_MAX_REDIRECTS):
            conn: AbstractConnection | None = None
            target = address
            try:
                if target is None:
                    target = asking or topology.address(key, self._query(deadline))
                conn, fresh = self._acquire(target, deadline)
                result = run(conn, deadline, fresh, asking is not None)
            except Redirect as redirect:  # every reply was read: the connection is in step
                self._release(target, conn)
                asking = None
                if redirect.kind == b"MOVED":
                    topology.moved(redirect.slot, redirect.address)
                elif redirect.kind == b"ASK":
                    asking = redirect.address
                else:  # TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY
                    if redirect.kind == b"READONLY" and target is not None:
                        topology.lost(target)  # a master turned replica: ask again
                    self._pause(deadline, redirect.text)
                continue
            except Deadline:
                _drop(conn)  # replies may still be in flight: this connection is out of step
                self._mark_down("no answer within the budget")
                raise StoreUnavailable(
                    f"{self.where} did not answer within storeTimeout={self.budget}s"
                ) from None
            except InDoubt as exc:
                _drop(conn)
                self._lost(target, str(exc))
                raise StoreUnavailable(
                    f"{self.where}: connection lost after a write was sent ({exc}); "
                    "the call may have been counted"
                ) from None
            except (RedisError, OSError, TopologyError) as exc:
                _drop(conn)
                if topology.reroutes and not isinstance(exc, TopologyError):
                    self._lost(target, "")
                    self._pause(deadline, str(exc) or type(exc).__name__)
                    continue
                self._mark_down(str(exc) or type(exc).__name__)
                raise StoreUnavailable(f"{self.where}: {exc}") from exc
            except Refused as exc:
                _drop(conn)
                self._mark_down(str(exc))
                raise StoreUnavailable(f"{self.where}: {exc}") from exc
            except BaseException:
                _drop(conn)  # e.g. an unreadable record: the WATCH must not linger
                raise
            self._release(target, conn)
            return result
        self._mark_down("redirected too often")
        raise StoreUnavailable(f"{self.where}: redirected {_MAX_REDIRECTS} times in one call")

    def write(
        self,
        conn: AbstractConnection,
        deadline: float,
        commands: list[tuple[Any, ...]],
        fresh: bool,
        asking: bool,
    ) -> list[Any]:
        """A round trip that may commit: once it is sent, a lost connection leaves the
        write in doubt (Redis may have counted the call), so it is never sent again."""
        try:
            return self.round_trip(conn, deadline, commands, fresh=fresh, asking=asking)
        except (OSError, RedisError) as exc:
            raise InDoubt(str(exc) or type(exc).__name__) from exc

    def _lost(self, target: Address | None, reason: str) -> None:
        if not self.topology.reroutes:
            self._mark_down(reason)
        elif target is not None:
            self.topology.lost(target)  # the next attempt asks where the data went
            with self._lock:
                stale = self._idle.pop(target, [])
            for conn in stale:
                _drop(conn)

    def _pause(self, deadline: float, reason: str) -> None:
        """Wait a little before trying again (a failover, a slot being moved), or give up
        with the budget."""
        left = deadline - time.monotonic()
        if left <= _PAUSE:
            self._mark_down(reason)
            raise StoreUnavailable(
                f"{self.where}: {reason}; still so when storeTimeout={self.budget}s ended"
            )
        time.sleep(_PAUSE)

    def _query(self, deadline: float) -> Callable[[Address, tuple[Any, ...]], Any]:
        """One command to one node (a sentinel, a cluster seed) on our own connections and
        within `deadline`; a sentinel is asked without our AUTH and SELECT."""

        def query(address: Address, command: tuple[Any, ...]) -> Any:
            try:
                conn, fresh = self._acquire(address, deadline)
            except RedisError as exc:  # the topology tries the next node on OSError
                raise ConnectionError(str(exc)) from exc
            try:
                login = fresh and command[0] != "SENTINEL"
                (reply,) = self.round_trip(
                    conn, deadline, [command], limit=SMALL_REPLY, fresh=login
                )
            except BaseException:
                _drop(conn)
                raise
            self._release(address, conn)
            return reply

        return query

    def masters(self, deadline: float) -> list[Address]:
        return self.topology.masters(self._query(deadline))

    def _acquire(self, address: Address, deadline: float) -> tuple[AbstractConnection, bool]:
        """An idle connection to `address`, or a new one connected within the deadline
        (`True`: new, so the first round trip must authenticate and select the database)."""
        with self._lock:
            if os.getpid() != self._pid:
                # A forked child must not use (or close: that would shut the parent's
                # socket) connections it inherited; keep them referenced and start over.
                for inherited in self._idle.values():
                    self._inherited.extend(inherited)
                self._idle = {}
                self._pid = os.getpid()
            idle = self._idle.get(address)
            while idle:
                reused = idle.pop()
                if not _closed(reused):
                    return reused, False
                _drop(reused)
        make: Any = self._connection_class
        conn: AbstractConnection = make(host=address[0], port=address[1], **self._kwargs)
        conn.deadline = deadline  # type: ignore[attr-defined]  # see _bounded
        try:
            conn.connect()  # type: ignore[no-untyped-call]
        except BaseException:
            _drop(conn)
            raise
        return conn, True

    def _release(self, address: Address | None, conn: AbstractConnection | None) -> None:
        if address is None or conn is None:
            return
        with self._lock:
            if os.getpid() == self._pid:
                self._idle.setdefault(address, []).append(conn)

    def round_trip(
        self,
        conn: AbstractConnection,
        deadline: float,
        commands: list[tuple[Any, ...]],
        *,
        limit: int = SMALL_REPLY,
        fresh: bool = False,
        asking: bool = False,
        redirects: bool = True,
    ) -> list[Any]:
        """Send `commands` in one write and read their replies, all within `deadline`
        and `limit` bytes of replies (besides the prelude's small ones). `asking`: after
        a cluster's ASK, each command outside MULTI goes with an ASKING. On a cluster or
        behind a Sentinel, a redirect or a busy cluster in any reply raises Redirect
        once every reply is read (with `redirects`)."""
        prelude: list[tuple[Any, ...]] = []
        if fresh:
            if self._password:
                auth = (self._username, self._password) if self._username else (self._password,)
                prelude.append(("AUTH", *auth))
            if self._db:
                prelude.append(("SELECT", self._db))
        sent = list(prelude)
        ours: list[int] = []  # where each of `commands`' replies is among the replies
        in_multi = False
        for command in commands:
            if asking and not in_multi:
                sent.append(("ASKING",))
            in_multi = in_multi or command[0] == "MULTI"
            ours.append(len(sent))
            sent.append(command)
        sock = conn._sock  # redis-py connects, we read
        if sock is None:
            raise ConnectionError("not connected")
        packed = conn.pack_commands(sent)
        try:
            # sendall's timeout bounds the whole write (a full socket buffer must not hang us).
            sock.settimeout(time_left(deadline))
            sock.sendall(b"".join(packed))
            reader = Replies(sock, deadline, limit + SMALL_REPLY * (len(sent) - len(commands)))
            answers = [reader.read() for _ in sent]
        except TimeoutError:
            raise Deadline from None
        mine = set(ours)
        for i, answer in enumerate(answers):
            if i not in mine:
                ok(answer)  # AUTH, SELECT, ASKING
        replies = [answers[i] for i in ours]
        if redirects and self.topology.reroutes:
            for answer in replies:
                if isinstance(answer, ErrorReply) and answer.split(b" ", 1)[0] in _REROUTE:
                    raise Redirect(answer)
        return replies

    def _mark_down(self, reason: str) -> None:
        self._down_reason = reason
        self._down_until = time.monotonic() + self._retry_after


_BOUNDED: dict[type, type[AbstractConnection]] = {}


def _bounded(cls: type[AbstractConnection]) -> type[AbstractConnection]:
    """`cls` with its socket timeouts read from the deadline of the call that opened it:
    redis-py sets the connect timeout before the TCP connect and the TLS handshake's
    after it, so together they stay within one budget instead of one each."""
    found = _BOUNDED.get(cls)
    if found is None:

        def left(self: Any) -> float:
            return max(float(self.deadline) - time.monotonic(), 0.001)

        timeout = property(left, lambda self, value: None)
        found = _BOUNDED[cls] = type(
            f"Bounded{cls.__name__}",
            (cls,),
            {"deadline": 0.0, "socket_timeout": timeout, "socket_connect_timeout": timeout},
        )
    return found


def _closed(conn: AbstractConnection) -> bool:
    """An idle connection the server has closed (restarted, killed, failed over) or that
    holds bytes nobody asked for: using it would lose the next write's reply."""
    sock = conn._sock
    if sock is None:
        return True
    try:
        sock.setblocking(False)  # round_trip sets the deadline's timeout again
        # Below TLS, if any: a TLS 1.3 server may still send session tickets on an idle
        # connection, so there only the end of the stream says it is closed.
        data = socket.socket.recv(sock, 1, socket.MSG_PEEK)
    except BlockingIOError:
        return False  # nothing to read: still open
    except OSError:
        return True
    return data == b"" or not hasattr(sock, "pending")


def _drop(conn: AbstractConnection | None) -> None:
    if conn is None:
        return
    # A broken socket may fail to close; it is gone either way.
    with contextlib.suppress(Exception):
        conn.disconnect()  # type: ignore[no-untyped-call]
