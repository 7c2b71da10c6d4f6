"""`redis://` and `rediss://`: one agent state shared by every process and machine of a fleet.

Each agent is one Redis string holding `AgentState.dumps()` (window digests, counters and
the kinds already reported to the incident log). A decision is an optimistic transaction:

    WATCH key; GET key          (one round trip)
    step(state)                 (rules.decide, here in Python: the only copy of the rules)
    MULTI; SET key new PX ttl; EXEC   (one round trip; EXEC is nil if another
                                       client wrote the key since WATCH: load again)

so a count is never lost or doubled, and the incident log's "first denial of each kind"
is decided once per agent across the fleet, because `reported` is saved in the same SET.

Every call has one budget, `config.store_timeout`, for everything: connecting, each
read, and the retries of a contended transaction. Past it the store raises
StoreUnavailable and the breaker allows the call with a warning (or denies it with
`failClosed`). After a connection failure the store answers StoreUnavailable at once
for `retry_after` seconds, so a dead Redis costs one timeout per period, not one per
tool call, and then tries to connect again.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..config import Config, ConfigError
from ..state import AgentState
from .unavailable import StoreUnavailable

try:
    from redis.backoff import NoBackoff
    from redis.connection import AbstractConnection, Connection, parse_url
    from redis.exceptions import RedisError
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ConfigError(
        "a redis:// state URL needs the redis client: pip install 'dsh-circuit-breaker[redis]'"
    ) from exc

T = TypeVar("T")

DEFAULT_PREFIX = "dsh-circuit-breaker:agent:"
DEFAULT_RETRY_AFTER = 5.0
# Our own URL query parameters; every other one goes to redis-py (ssl_ca_certs, ...).
_OWN_PARAMS = ("prefix", "retry_after")
# Timeouts are ours: one budget per call, not per socket operation.
_NOT_ALLOWED = ("socket_timeout", "socket_connect_timeout", "timeout", "retry_on_timeout")


class _Deadline(Exception):
    """The call's budget ran out before Redis answered."""


class RedisStore:
    """Agent states in Redis, shared by every breaker that names the same server and prefix."""

    def __init__(
        self,
        connection_kwargs: dict[str, Any],
        config: Config,
        *,
        prefix: str = DEFAULT_PREFIX,
        retry_after: float = DEFAULT_RETRY_AFTER,
        where: str = "redis",
    ) -> None:
        kwargs = dict(connection_kwargs)
        # parse_url names SSLConnection for rediss:// and nothing for plain redis://.
        self._connection_class: type[AbstractConnection] = kwargs.pop(
            "connection_class", Connection
        )
        # AUTH and SELECT are sent by us in the same write as the first WATCH/GET, so a
        # fresh connection costs a TCP (or TLS) connect and no round trip of its own.
        self._password: str | None = kwargs.pop("password", None) or os.environ.get(
            "REDIS_PASSWORD"
        )
        self._username: str | None = kwargs.pop("username", None)
        self._db = int(kwargs.pop("db", 0) or 0)
        kwargs.pop("max_connections", None)
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
        self._budget = config.store_timeout
        self._ttl_ms = config.idle_expiry_seconds * 1000
        self._prefix = prefix.encode()
        self._retry_after = retry_after
        self._where = where
        self._lock = threading.Lock()
        self._idle: list[AbstractConnection] = []
        self._pid = os.getpid()
        self._inherited: list[AbstractConnection] = []
        self._down_until = 0.0
        self._down_reason = ""

    # -- the Store protocol ------------------------------------------------------------

    def transact(self, agent: str, step: Callable[[AgentState], T]) -> T:
        key = self._key(agent)

        def run(conn: AbstractConnection, deadline: float, fresh: bool) -> T:
            while True:
                _, raw = self._round_trip(
                    conn, deadline, [("WATCH", key), ("GET", key)], fresh=fresh
                )
                fresh = False
                state = AgentState.loads(raw) if raw is not None else AgentState()
                result = step(state)
                # Written back even when only a denial happened, like the SQLite store:
                # `updated` and the TTL then both mean "last guarded call", so an agent that
                # keeps calling after its cap stays capped instead of expiring.
                state.touch()
                replies = self._round_trip(
                    conn,
                    deadline,
                    [("MULTI",), ("SET", key, state.dumps(), "PX", self._ttl_ms), ("EXEC",)],
                )
                if replies[-1] is not None:
                    return result
                # Another client changed this agent between our GET and EXEC: decide again
                # on what it wrote, so the rules always see every earlier decision.

        return self._with_connection(run)

    def reset(self, agent: str) -> None:
        key = self._key(agent)

        def run(conn: AbstractConnection, deadline: float, fresh: bool) -> None:
            self._round_trip(conn, deadline, [("DEL", key)], fresh=fresh)

        self._with_connection(run)

    def agents(self) -> Iterator[tuple[str, AgentState | None]]:
        """Every live agent under this store's prefix: a SCAN, for tools, not hot paths.
        Each page (SCAN, then MGET of its keys) has a budget of its own. None for a record
        that cannot be read."""
        pattern = _glob_escape(self._prefix) + b"*"
        cursor: Any = b"0"
        while True:

            def page(
                conn: AbstractConnection, deadline: float, fresh: bool, cursor: Any = cursor
            ) -> tuple[Any, list[bytes], list[Any]]:
                ((after, keys),) = self._round_trip(
                    conn, deadline, [("SCAN", cursor, "MATCH", pattern, "COUNT", 500)], fresh=fresh
                )
                if not keys:
                    return after, [], []
                (values,) = self._round_trip(conn, deadline, [("MGET", *keys)])
                return after, keys, values

            cursor, keys, values = self._with_connection(page)
            for key, raw in zip(keys, values, strict=True):
                if raw is not None:  # expired or reset between SCAN and MGET
                    agent = key[len(self._prefix) :].decode("utf-8", "surrogateescape")
                    yield agent, AgentState.readable(raw)
            if cursor in (b"0", 0, "0"):
                return

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            _drop(conn)

    # -- connections and the budget ----------------------------------------------------

    def _key(self, agent: str) -> bytes:
        return self._prefix + agent.encode("utf-8", "surrogateescape")

    def _with_connection(self, run: Callable[[AbstractConnection, float, bool], T]) -> T:
        now = time.monotonic()
        deadline = now + self._budget
        if now < self._down_until:
            raise StoreUnavailable(
                f"{self._where} unavailable ({self._down_reason}); "
                f"next attempt in {self._down_until - now:.1f}s"
            )
        conn: AbstractConnection | None = None
        try:
            conn, fresh = self._acquire(deadline)
            result = run(conn, deadline, fresh)
        except _Deadline:
            _drop(conn)  # replies may still be in flight: this connection is out of step
            self._mark_down("no answer within the budget")
            raise StoreUnavailable(
                f"{self._where} did not answer within storeTimeout={self._budget}s"
            ) from None
        except (RedisError, OSError) as exc:
            _drop(conn)
            self._mark_down(str(exc) or type(exc).__name__)
            raise StoreUnavailable(f"{self._where}: {exc}") from exc
        except BaseException:
            _drop(conn)  # e.g. an unreadable record: the WATCH must not linger
            raise
        with self._lock:
            self._idle.append(conn)
        return result

    def _acquire(self, deadline: float) -> tuple[AbstractConnection, bool]:
        """An idle connection, or a new one connected within the deadline (`True`: new,
        so the first round trip must authenticate and select the database)."""
        with self._lock:
            if os.getpid() != self._pid:
                # A forked child must not use (or close: that would shut the parent's
                # socket) connections it inherited; keep them referenced and start over.
                self._inherited.extend(self._idle)
                self._idle = []
                self._pid = os.getpid()
            if self._idle:
                return self._idle.pop(), False
        conn = self._connection_class(**self._kwargs)
        left = _left(deadline)
        conn.socket_connect_timeout = left
        conn.socket_timeout = left
        try:
            conn.connect()  # type: ignore[no-untyped-call]
        except BaseException:
            _drop(conn)
            raise
        return conn, True

    def _round_trip(
        self,
        conn: AbstractConnection,
        deadline: float,
        commands: list[tuple[Any, ...]],
        *,
        fresh: bool = False,
    ) -> list[Any]:
        """Send `commands` in one write and read their replies, all within `deadline`."""
        prelude: list[tuple[Any, ...]] = []
        if fresh:
            if self._password:
                auth = (self._username, self._password) if self._username else (self._password,)
                prelude.append(("AUTH", *auth))
            if self._db:
                prelude.append(("SELECT", self._db))
        # Bounds the write as well as the reads (a full socket buffer must not hang us).
        conn.update_current_socket_timeout(_left(deadline))
        packed = conn.pack_commands(prelude + commands)  # type: ignore[no-untyped-call]
        conn.send_packed_command(packed, check_health=False)  # type: ignore[no-untyped-call]
        replies = []
        for _ in range(len(prelude) + len(commands)):
            try:
                replies.append(conn.read_response(timeout=_left(deadline)))
            except RedisError:
                if time.monotonic() >= deadline:
                    raise _Deadline from None
                raise
        return replies[len(prelude) :]

    def _mark_down(self, reason: str) -> None:
        self._down_reason = reason
        self._down_until = time.monotonic() + self._retry_after


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Deadline
    return left


def _drop(conn: AbstractConnection | None) -> None:
    if conn is None:
        return
    # A broken socket may fail to close; it is gone either way.
    with contextlib.suppress(Exception):
        conn.disconnect()  # type: ignore[no-untyped-call]


def _glob_escape(raw: bytes) -> bytes:
    out = bytearray()
    for byte in raw:
        if byte in b"*?[]\\":
            out.append(ord("\\"))
        out.append(byte)
    return bytes(out)


def from_url(url: str, config: Config) -> RedisStore:
    """`redis://[[user]:password@]host[:port][/db][?prefix=...&retry_after=5]`, or `rediss://`.

    Without a password in the URL, REDIS_PASSWORD is used when set. Other query
    parameters (e.g. `ssl_ca_certs`, `ssl_cert_reqs` for rediss://) go to redis-py.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    for name, _ in query:
        if name in _NOT_ALLOWED:
            raise ConfigError(
                f"state URL: {name} is not accepted; the budget is the config key storeTimeout"
            )
    db = parts.path.strip("/")
    if db and not db.isdigit():
        # redis-py would quietly use database 0: a typo must not merge two fleets' state.
        raise ConfigError(f"state URL {_redact(url)!r}: the path must be a database number")
    rest = [(k, v) for k, v in query if k not in _OWN_PARAMS]
    try:
        redis_url = urlunsplit(parts._replace(query=urlencode(rest)))
        kwargs = parse_url(redis_url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ConfigError(f"state URL {_redact(url)!r}: {exc}") from None
    try:
        retry_after = float(own.get("retry_after", DEFAULT_RETRY_AFTER))
    except ValueError:
        raise ConfigError("state URL: retry_after must be a number of seconds") from None
    if retry_after < 0:
        raise ConfigError("state URL: retry_after must be 0 or more")
    host = kwargs.get("host", "localhost")
    port = kwargs.get("port", 6379)
    return RedisStore(
        kwargs,
        config,
        prefix=own.get("prefix", DEFAULT_PREFIX),
        retry_after=retry_after,
        where=f"{parts.scheme} at {host}:{port}",
    )


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))
