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
`failClosed`). Replies are read here (`_Replies`), not by redis-py, so that the deadline
holds in wall time for a server that trickles bytes, and a reply larger than any valid
agent record is refused from its header, before it is read. After a connection failure
the store answers StoreUnavailable at once for `retry_after` seconds, so a dead Redis
costs one timeout per period, not one per tool call, and then tries to connect again.
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
from ..keys import DIGEST_SIZE
from ..state import AgentState
from .records import load_record, unreadable
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
# Our own URL query parameters.
_OWN_PARAMS = ("prefix", "retry_after")
# The TLS settings passed on to redis-py, for rediss:// only. Nothing else is: any other
# connection option either spends the budget in round trips of its own (client_name) or
# changes what a decision means; an unknown name is a typo, and a ConfigError.
_TLS_PARAMS = (
    "ssl_ca_certs", "ssl_ca_path", "ssl_ca_data", "ssl_certfile", "ssl_keyfile",
    "ssl_password", "ssl_cert_reqs", "ssl_check_hostname", "ssl_min_version", "ssl_ciphers",
    "ssl_include_verify_flags", "ssl_exclude_verify_flags",
)  # fmt: skip
# Timeouts are ours: one budget per call, not per socket operation.
_NOT_ALLOWED = ("socket_timeout", "socket_connect_timeout", "timeout", "retry_on_timeout")
# A reply that carries no agent record (+OK, +QUEUED, EXEC's array, an error line).
_SMALL_REPLY = 64 * 1024
# Room in a record beside the window's digests (counters, reported kinds, later fields).
_RECORD_SLACK = 1024 * 1024
# Our replies nest two deep at most (EXEC's array, SCAN's [cursor, [keys]]).
_MAX_DEPTH = 3


class _Deadline(Exception):
    """The call's budget ran out before Redis answered."""


class _Refused(Exception):
    """Redis answered with an error, or with something no valid reply looks like."""


class _Error(bytes):
    """An error reply (`-ERR ...`), returned as a value: inside EXEC's array it is a
    failed command, and GET's WRONGTYPE is one agent's unreadable record."""


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
        self._connection_class = _bounded(kwargs.pop("connection_class", Connection))
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
        try:  # not connected: only checks the TLS settings (a bad ssl_cert_reqs, ...)
            self._connection_class(**kwargs)
        except (TypeError, ValueError, RedisError) as exc:
            raise ConfigError(f"state URL ({where}): {exc}") from None
        self._budget = config.store_timeout
        self._ttl_ms = config.idle_expiry_seconds * 1000
        self._record_limit = config.window * 2 * DIGEST_SIZE + _RECORD_SLACK
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
                watched, raw = self._round_trip(
                    conn,
                    deadline,
                    [("WATCH", key), ("GET", key)],
                    limit=self._record_limit,
                    fresh=fresh,
                )
                fresh = False
                _ok(watched)
                if isinstance(raw, _Error):  # WRONGTYPE: some other value under our key
                    unreadable(agent, self._where, raw.decode(errors="replace"))
                    state = AgentState()
                else:
                    state = load_record(raw, agent, self._where)
                result = step(state)
                # Written back even when only a denial happened, like the SQLite store:
                # `updated` and the TTL then both mean "last guarded call", so an agent that
                # keeps calling after its cap stays capped instead of expiring.
                state.touch()
                multi, queued, done = self._round_trip(
                    conn,
                    deadline,
                    [("MULTI",), ("SET", key, state.dumps(), "PX", self._ttl_ms), ("EXEC",)],
                )
                _ok(multi)
                if done is None:
                    # Another client changed this agent between our GET and EXEC: decide
                    # again on what it wrote, so the rules see every earlier decision.
                    continue
                failed = [r for r in (queued, done, *_items(done)) if isinstance(r, _Error)]
                if failed:  # e.g. out of memory: nothing was stored, so nothing counted
                    raise StoreUnavailable(
                        f"{self._where}: the write failed ({failed[0].decode(errors='replace')})"
                    )
                return result

        return self._with_connection(run)

    def open(self) -> None:
        def run(conn: AbstractConnection, deadline: float, fresh: bool) -> None:
            _ok(self._round_trip(conn, deadline, [("PING",)], fresh=fresh)[0])

        self._with_connection(run)

    def reset(self, agent: str) -> None:
        key = self._key(agent)

        def run(conn: AbstractConnection, deadline: float, fresh: bool) -> None:
            _ok(self._round_trip(conn, deadline, [("DEL", key)], fresh=fresh)[0])

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
                (scanned,) = self._round_trip(
                    conn,
                    deadline,
                    [("SCAN", cursor, "MATCH", pattern, "COUNT", 500)],
                    limit=self._record_limit,
                    fresh=fresh,
                )
                after, keys = _pair(scanned)
                if not keys:
                    return after, [], []
                (values,) = self._round_trip(
                    conn, deadline, [("MGET", *keys)], limit=len(keys) * self._record_limit
                )
                if not isinstance(values, list) or len(values) != len(keys):
                    raise _Refused("MGET did not answer one value per key")
                return after, keys, values

            cursor, keys, values = self._with_connection(page)
            for key, raw in zip(keys, values, strict=True):
                if raw is not None:  # expired or reset between SCAN and MGET
                    agent = key[len(self._prefix) :].decode("utf-8", "surrogateescape")
                    yield agent, AgentState.readable(raw)
            if cursor == b"0":
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
        except (RedisError, OSError, _Refused) as exc:
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
        conn.deadline = deadline  # type: ignore[attr-defined]  # see _bounded
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
        limit: int = _SMALL_REPLY,
        fresh: bool = False,
    ) -> list[Any]:
        """Send `commands` in one write and read their replies, all within `deadline`
        and `limit` bytes of replies (besides the prelude's small ones)."""
        prelude: list[tuple[Any, ...]] = []
        if fresh:
            if self._password:
                auth = (self._username, self._password) if self._username else (self._password,)
                prelude.append(("AUTH", *auth))
            if self._db:
                prelude.append(("SELECT", self._db))
        sock = conn._sock  # redis-py connects, we read
        if sock is None:
            raise ConnectionError("not connected")
        packed = conn.pack_commands(prelude + commands)
        try:
            # sendall's timeout bounds the whole write (a full socket buffer must not hang us).
            sock.settimeout(_left(deadline))
            sock.sendall(b"".join(packed))
            replies = _Replies(sock, deadline, limit + _SMALL_REPLY * len(prelude))
            answers = [replies.read() for _ in range(len(prelude) + len(commands))]
        except TimeoutError:
            raise _Deadline from None
        for answer in answers[: len(prelude)]:
            _ok(answer)
        return answers[len(prelude) :]

    def _mark_down(self, reason: str) -> None:
        self._down_reason = reason
        self._down_until = time.monotonic() + self._retry_after


class _Replies:
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
            return _Error(body)
        if kind == b":":
            return self._number(body)
        if kind == b"$":
            size = self._number(body)
            if size < 0:
                return None
            self._spend(size + 2)
            data = self._take(size + 2)
            if data[-2:] != b"\r\n":
                raise _Refused("malformed bulk reply")
            return data[:-2]
        if kind == b"*":
            count = self._number(body)
            if count < 0:
                return None
            if depth >= _MAX_DEPTH:
                raise _Refused("reply nested too deeply")
            self._check(3 * count)  # the least each element takes (`+` CR LF)
            return [self.read(depth + 1) for _ in range(count)]
        raise _Refused(f"not a RESP2 reply: {bytes(line[:40])!r}")

    def _check(self, size: int) -> None:
        if size > self._left:
            raise _Refused(f"a reply of {size} bytes or more refused (larger than any record)")

    def _spend(self, size: int) -> None:
        self._check(size)
        self._left -= size

    def _number(self, body: bytes) -> int:
        if not body or len(body) > 20 or not body.lstrip(b"-").isdigit():
            raise _Refused(f"malformed length or number in reply: {body[:40]!r}")
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
        self._sock.settimeout(_left(self._deadline))
        data = self._sock.recv(65536)
        if not data:
            raise ConnectionError("Redis closed the connection")
        self._buffer += data


def _ok(reply: Any) -> None:
    if isinstance(reply, _Error):
        raise _Refused(reply.decode(errors="replace"))


def _items(reply: Any) -> list[Any]:
    return reply if isinstance(reply, list) else []


def _pair(reply: Any) -> tuple[bytes, list[bytes]]:
    """SCAN's [cursor, [keys]]."""
    if (
        isinstance(reply, list)
        and len(reply) == 2
        and isinstance(reply[0], bytes)
        and isinstance(reply[1], list)
        and all(isinstance(k, bytes) and not isinstance(k, _Error) for k in reply[1])
    ):
        return reply[0], reply[1]
    _ok(reply)
    raise _Refused("SCAN answered something else than [cursor, keys]")


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

    Without a password in the URL, REDIS_PASSWORD is used when set. rediss:// also takes
    redis-py's TLS settings (`ssl_ca_certs`, `ssl_cert_reqs`, ...; see _TLS_PARAMS).
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    _check_params([name for name, _ in query], parts.scheme)
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
    if not 0 <= retry_after <= 3600:  # also refuses nan and inf
        raise ConfigError("state URL: retry_after must be 0 to 3600 seconds")
    host = kwargs.get("host", "localhost")
    port = kwargs.get("port", 6379)
    return RedisStore(
        kwargs,
        config,
        prefix=own.get("prefix", DEFAULT_PREFIX),
        retry_after=retry_after,
        where=f"{parts.scheme} at {host}:{port}",
    )


def _check_params(names: list[str], scheme: str) -> None:
    for name in names:
        if name in _NOT_ALLOWED:
            raise ConfigError(
                f"state URL: {name} is not accepted; the budget is the config key storeTimeout"
            )
        if name in _TLS_PARAMS and scheme != "rediss":
            raise ConfigError(f"state URL: {name} is a TLS setting; it needs rediss://")
        if name not in _OWN_PARAMS and name not in _TLS_PARAMS:
            known = ", ".join(_OWN_PARAMS + (_TLS_PARAMS if scheme == "rediss" else ()))
            raise ConfigError(f"state URL: unknown parameter {name[:100]!r} (known: {known})")
    if len(set(names)) < len(names):
        raise ConfigError("state URL: a parameter is given twice")


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))
