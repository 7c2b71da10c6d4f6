"""`redis://` and `rediss://` (and `+cluster`, `+sentinel`): one agent state shared by every
process and machine of a fleet.

Each agent is one Redis string holding `AgentState.dumps()` (window digests, counters and
the kinds already reported to the incident log). A decision is an optimistic transaction:

    WATCH key; GET key          (one round trip)
    step(state)                 (rules.decide, here in Python: the only copy of the rules)
    MULTI; SET key new PX ttl; EXEC   (one round trip; EXEC is nil if another
                                       client wrote the key since WATCH: load again)

so a count is never lost or doubled, and the incident log's "first denial of each kind"
is decided once per agent across the fleet, because `reported` is saved in the same SET.
A process that wrote the agent's record last (a resident one: the HTTP guard, a framework
worker) skips the read: the rules run on the state it kept, and one EVAL of `_CAS` stores
the new record only if the stored one is still the one it wrote; else it goes the way above.

`redis+cluster://` and `redis+sentinel://` only change where a key's commands go
(redis_topology.py): MOVED, ASK, a busy cluster and a failover are followed or waited out
inside the same budget, and a write already sent is never sent again.

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
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from hashlib import sha1  # redis-py imports hashlib anyway
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ..config import Config, ConfigError
from ..keys import DIGEST_SIZE
from ..state import AgentState
from .records import load_record, unreadable
from .redis_topology import Cluster, Sentinel, Single, TopologyError
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
Address = tuple[str, int]

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
# Our replies nest three deep at most (EXEC's array, SCAN's [cursor, [keys]], CLUSTER
# SLOTS' [[first, last, [host, port, id, [metadata]]]]).
_MAX_DEPTH = 4
# The compare-and-set of a process that wrote the agent's record last: store the new
# record only if the current one is still the one we wrote (its SHA-1 in ARGV[1]). The
# rules stay in Python; 1: stored, 0: someone else wrote it since (or it expired, or it
# is not a string any more), and the caller loads it and decides again.
_CAS = (
    "local cur = redis.pcall('GET', KEYS[1]) "
    "if type(cur) == 'string' and redis.sha1hex(cur) == ARGV[1] then "
    "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end return 0"
)
_MISMATCH = object()
# Agents whose last record a resident process keeps for the compare-and-set (a window
# of 200 is ~25 KB in memory); past it, the least recently decided is forgotten.
_SEEN_AGENTS = 1024
# Cluster and Sentinel answers that mean "not here" or "not now": followed or tried
# again within the same budget.
_REROUTE = frozenset(
    (b"MOVED", b"ASK", b"TRYAGAIN", b"CLUSTERDOWN", b"LOADING", b"MASTERDOWN", b"READONLY")
)
_MAX_REDIRECTS = 64  # a decision bounces between nodes at most this often
_PAUSE = 0.05  # seconds between attempts while a cluster or a failover settles


class _Deadline(Exception):
    """The call's budget ran out before Redis answered."""


class _Refused(Exception):
    """Redis answered with an error, or with something no valid reply looks like."""


class _Error(bytes):
    """An error reply (`-ERR ...`), returned as a value: inside EXEC's array it is a
    failed command, and GET's WRONGTYPE is one agent's unreadable record."""


class _Redirect(Exception):
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
                raise _Refused(f"unreadable redirect: {self.text}") from None
        super().__init__(self.text)


class _InDoubt(Exception):
    """The connection failed after a write was sent: Redis may have committed it."""


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
        self._topology = topology or Single(address)
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
        self._idle: dict[Address, list[AbstractConnection]] = {}
        self._pid = os.getpid()
        self._inherited: list[AbstractConnection] = []
        self._down_until = 0.0
        self._down_reason = ""
        # agent -> (its state as this process last wrote it, that record's SHA-1): the
        # next decision for the agent is then one compare-and-set round trip (_CAS).
        self._seen: OrderedDict[str, tuple[AgentState, bytes]] = OrderedDict()
        # Agents whose last compare-and-set missed: another process writes them too, and
        # a miss costs a round trip and a record upload on top of the two. They take the
        # two round trips until a read shows this process's own record again.
        self._contended: OrderedDict[str, None] = OrderedDict()

    # -- the Store protocol ------------------------------------------------------------

    def transact(self, agent: str, step: Callable[[AgentState], T]) -> T:
        key = self._key(agent)

        def run(conn: AbstractConnection, deadline: float, fresh: bool, asking: bool) -> T:
            with self._lock:  # taken, not copied: one thread at a time uses a state
                seen = self._seen.pop(agent, None)
                contended = agent in self._contended
            mine = None  # with a contended agent: the digest of the record we wrote last
            if seen is not None and not contended:
                state, digest = seen
                cas = (conn, deadline, key, agent, step, state, digest, fresh, asking)
                result = self._compare_and_set(*cas)
                if result is not _MISMATCH:
                    return result  # type: ignore[return-value]
                fresh = False
                self._mark_contended(agent)
            elif seen is not None:
                mine = seen[1]
            return self._watched(conn, deadline, key, agent, step, fresh, asking, mine)

        return self._with_connection(key, run)

    def _compare_and_set(
        self,
        conn: AbstractConnection,
        deadline: float,
        key: bytes,
        agent: str,
        step: Callable[[AgentState], T],
        state: AgentState,
        digest: bytes,
        fresh: bool,
        asking: bool,
    ) -> T | object:
        """One round trip: the rules on the state this process wrote last, and a script
        that stores the new record only if the agent's record is still that one."""
        result = step(state)
        state.touch()
        record = state.dumps()
        cas = ("EVAL", _CAS, 1, key, digest, record, self._ttl_ms)
        (done,) = self._write(conn, deadline, [cas], fresh, asking)
        if isinstance(done, _Error):  # e.g. out of memory: nothing was stored
            raise StoreUnavailable(
                f"{self._where}: the write failed ({done.decode(errors='replace')})"
            )
        if done != 1:
            return _MISMATCH  # another process wrote this agent since: load and decide again
        self._remember(agent, state, record)
        return result

    def _watched(
        self,
        conn: AbstractConnection,
        deadline: float,
        key: bytes,
        agent: str,
        step: Callable[[AgentState], T],
        fresh: bool,
        asking: bool,
        mine: bytes | None = None,
    ) -> T:
        """Two round trips: WATCH + GET, the rules, then MULTI / SET / EXEC. `mine`: the
        digest of the record this process wrote last, for a contended agent; reading it
        back means no one else wrote since, and the next decision tries one round trip."""
        while True:
            watched, raw = self._round_trip(
                conn,
                deadline,
                [("WATCH", key), ("GET", key)],
                limit=self._record_limit,
                fresh=fresh,
                asking=asking,
            )
            fresh = False
            _ok(watched)
            if isinstance(raw, _Error):  # WRONGTYPE: some other value under our key
                unreadable(agent, self._where, raw.decode(errors="replace"))
                state = AgentState()
            else:
                if mine is not None and raw is not None and sha1(raw).hexdigest() == mine.decode():
                    with self._lock:
                        self._contended.pop(agent, None)
                state = load_record(raw, agent, self._where)
            mine = None
            result = step(state)
            # Written back even when only a denial happened, like the SQLite store:
            # `updated` and the TTL then both mean "last guarded call", so an agent that
            # keeps calling after its cap stays capped instead of expiring.
            state.touch()
            record = state.dumps()
            multi, queued, done = self._write(
                conn,
                deadline,
                [("MULTI",), ("SET", key, record, "PX", self._ttl_ms), ("EXEC",)],
                False,
                asking,
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
            self._remember(agent, state, record)
            return result

    def _write(
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
            return self._round_trip(conn, deadline, commands, fresh=fresh, asking=asking)
        except (OSError, RedisError) as exc:
            raise _InDoubt(str(exc) or type(exc).__name__) from exc

    def _mark_contended(self, agent: str) -> None:
        with self._lock:
            self._contended[agent] = None
            if len(self._contended) > _SEEN_AGENTS:
                self._contended.popitem(last=False)

    def _remember(self, agent: str, state: AgentState, record: bytes) -> None:
        with self._lock:
            self._seen[agent] = (state, sha1(record).hexdigest().encode())
            if len(self._seen) > _SEEN_AGENTS:
                self._seen.popitem(last=False)

    def open(self) -> None:
        def run(conn: AbstractConnection, deadline: float, fresh: bool, asking: bool) -> None:
            _ok(self._round_trip(conn, deadline, [("PING",)], fresh=fresh)[0])

        self._with_connection(None, run)

    def reset(self, agent: str) -> None:
        key = self._key(agent)
        with self._lock:
            self._seen.pop(agent, None)
            self._contended.pop(agent, None)

        def run(conn: AbstractConnection, deadline: float, fresh: bool, asking: bool) -> None:
            _ok(self._round_trip(conn, deadline, [("DEL", key)], fresh=fresh, asking=asking)[0])

        self._with_connection(key, run)

    def agents(self) -> Iterator[tuple[str, AgentState | None]]:
        """Every live agent under this store's prefix: a SCAN of each master, for tools,
        not hot paths. Each page (SCAN, then MGET of its keys, one GET per key on a
        cluster) has a budget of its own. None for a record that cannot be read."""
        masters: list[Address] = self._with_connection(
            None, lambda conn, deadline, fresh, asking: self._masters(deadline)
        )
        for master in masters:
            yield from self._scan(master)

    def _scan(self, master: Address) -> Iterator[tuple[str, AgentState | None]]:
        pattern = _glob_escape(self._prefix) + b"*"
        cursor: Any = b"0"
        while True:

            def page(
                conn: AbstractConnection,
                deadline: float,
                fresh: bool,
                asking: bool,
                cursor: Any = cursor,
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
                # One GET per key rather than MGET: on a cluster, the keys of one node's
                # page may still span slots, and MGET would be CROSSSLOT.
                values = self._round_trip(
                    conn,
                    deadline,
                    [("GET", key) for key in keys],
                    limit=len(keys) * self._record_limit,
                    redirects=False,
                )
                return after, keys, values

            cursor, keys, values = self._with_connection(None, page, master)
            for key, raw in zip(keys, values, strict=True):
                # None: expired or reset between SCAN and GET; an error: moved away since.
                if raw is not None and not isinstance(raw, _Error):
                    agent = key[len(self._prefix) :].decode("utf-8", "surrogateescape")
                    yield agent, AgentState.readable(raw)
            if cursor == b"0":
                return

    def close(self) -> None:
        with self._lock:
            pools, self._idle = self._idle, {}
            self._seen.clear()
            self._contended.clear()
        for idle in pools.values():
            for conn in idle:
                _drop(conn)

    # -- connections, routing and the budget -------------------------------------------

    def _key(self, agent: str) -> bytes:
        return self._prefix + agent.encode("utf-8", "surrogateescape")

    def _with_connection(
        self,
        key: bytes | None,
        run: Callable[[AbstractConnection, float, bool, bool], T],
        address: Address | None = None,
    ) -> T:
        """`run` on a connection to the node that holds `key` (or `address`), within one
        budget: redirects followed, a cluster that is busy or a lost node tried again,
        until the deadline."""
        now = time.monotonic()
        deadline = now + self._budget
        if now < self._down_until:
            raise StoreUnavailable(
                f"{self._where} unavailable ({self._down_reason}); "
                f"next attempt in {self._down_until - now:.1f}s"
            )
        topology = self._topology
        asking: Address | None = None
        for _ in range(_MAX_REDIRECTS):
            conn: AbstractConnection | None = None
            target = address
            try:
                if target is None:
                    target = asking or topology.address(key, self._query(deadline))
                conn, fresh = self._acquire(target, deadline)
                result = run(conn, deadline, fresh, asking is not None)
            except _Redirect as redirect:  # every reply was read: the connection is in step
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
            except _Deadline:
                _drop(conn)  # replies may still be in flight: this connection is out of step
                self._mark_down("no answer within the budget")
                raise StoreUnavailable(
                    f"{self._where} did not answer within storeTimeout={self._budget}s"
                ) from None
            except _InDoubt as exc:
                _drop(conn)
                self._lost(target, str(exc))
                raise StoreUnavailable(
                    f"{self._where}: connection lost after a write was sent ({exc}); "
                    "the call may have been counted"
                ) from None
            except (RedisError, OSError, TopologyError) as exc:
                _drop(conn)
                if topology.reroutes and not isinstance(exc, TopologyError):
                    self._lost(target, "")
                    self._pause(deadline, str(exc) or type(exc).__name__)
                    continue
                self._mark_down(str(exc) or type(exc).__name__)
                raise StoreUnavailable(f"{self._where}: {exc}") from exc
            except _Refused as exc:
                _drop(conn)
                self._mark_down(str(exc))
                raise StoreUnavailable(f"{self._where}: {exc}") from exc
            except BaseException:
                _drop(conn)  # e.g. an unreadable record: the WATCH must not linger
                raise
            self._release(target, conn)
            return result
        self._mark_down("redirected too often")
        raise StoreUnavailable(f"{self._where}: redirected {_MAX_REDIRECTS} times in one call")

    def _lost(self, target: Address | None, reason: str) -> None:
        if not self._topology.reroutes:
            self._mark_down(reason)
        elif target is not None:
            self._topology.lost(target)  # the next attempt asks where the data went
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
                f"{self._where}: {reason}; still so when storeTimeout={self._budget}s ended"
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
                (reply,) = self._round_trip(
                    conn, deadline, [command], limit=_SMALL_REPLY, fresh=login
                )
            except BaseException:
                _drop(conn)
                raise
            self._release(address, conn)
            return reply

        return query

    def _masters(self, deadline: float) -> list[Address]:
        return self._topology.masters(self._query(deadline))

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

    def _round_trip(
        self,
        conn: AbstractConnection,
        deadline: float,
        commands: list[tuple[Any, ...]],
        *,
        limit: int = _SMALL_REPLY,
        fresh: bool = False,
        asking: bool = False,
        redirects: bool = True,
    ) -> list[Any]:
        """Send `commands` in one write and read their replies, all within `deadline`
        and `limit` bytes of replies (besides the prelude's small ones). `asking`: after
        a cluster's ASK, each command outside MULTI goes with an ASKING. On a cluster or
        behind a Sentinel, a redirect or a busy cluster in any reply raises _Redirect
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
            sock.settimeout(_left(deadline))
            sock.sendall(b"".join(packed))
            reader = _Replies(sock, deadline, limit + _SMALL_REPLY * (len(sent) - len(commands)))
            answers = [reader.read() for _ in sent]
        except TimeoutError:
            raise _Deadline from None
        mine = set(ours)
        for i, answer in enumerate(answers):
            if i not in mine:
                _ok(answer)  # AUTH, SELECT, ASKING
        replies = [answers[i] for i in ours]
        if redirects and self._topology.reroutes:
            for answer in replies:
                if isinstance(answer, _Error) and answer.split(b" ", 1)[0] in _REROUTE:
                    raise _Redirect(answer)
        return replies

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


def _closed(conn: AbstractConnection) -> bool:
    """An idle connection the server has closed (restarted, killed, failed over) or that
    holds bytes nobody asked for: using it would lose the next write's reply."""
    sock = conn._sock
    if sock is None:
        return True
    try:
        sock.setblocking(False)  # _round_trip sets the deadline's timeout again
        # Below TLS, if any: a TLS 1.3 server may still send session tickets on an idle
        # connection, so there only the end of the stream says it is closed.
        data = socket.socket.recv(sock, 1, socket.MSG_PEEK)
    except BlockingIOError:
        return False  # nothing to read: still open
    except OSError:
        return True
    return data == b"" or not hasattr(sock, "pending")


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
    """`redis://[[user]:password@]host[:port][/db][?prefix=...&retry_after=5]`, or `rediss://`;
    a cluster: `redis+cluster://[[user]:password@]host:port[,host:port...]`; behind
    Sentinel: `redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]`
    (the sentinels' addresses; the password is the master's). The spellings `limits` and
    other clients use; `rediss+cluster://` and `rediss+sentinel://` for TLS.

    Without a password in the URL, REDIS_PASSWORD is used when set. rediss also takes
    redis-py's TLS settings (`ssl_ca_certs`, `ssl_cert_reqs`, ...; see _TLS_PARAMS).
    """
    parts = urlsplit(url)
    scheme, _, mode = parts.scheme.partition("+")
    if mode not in ("", "cluster", "sentinel"):
        raise ConfigError(f"state URL {_redact(url)!r}: unknown scheme {parts.scheme!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    _check_params([name for name, _ in query], scheme)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    db = parts.path.strip("/")
    service = ""
    if mode == "sentinel":
        service, _, db = db.partition("/")
        if not service:
            raise ConfigError(
                f"state URL {_redact(url)!r} names no service: "
                "redis+sentinel://host:26379[,host:26379...]/SERVICE[/db]"
            )
    if db and not db.isdigit():
        # redis-py would quietly use database 0: a typo must not merge two fleets' state.
        raise ConfigError(f"state URL {_redact(url)!r}: the path must be a database number")
    if mode == "cluster" and db not in ("", "0"):
        raise ConfigError(f"state URL {_redact(url)!r}: a cluster has database 0 only")
    rest = [(k, v) for k, v in query if k not in _OWN_PARAMS]
    try:
        addresses = [_address(h, 26379 if mode == "sentinel" else 6379) for h in hosts.split(",")]
        # redis-py reads credentials and TLS settings from a plain URL of the first node.
        first = hosts.split(",")[0]
        plain = (scheme, userinfo + at + first, "/" + db if db else "", urlencode(rest), "")
        kwargs = parse_url(urlunsplit(plain))  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ConfigError(f"state URL {_redact(url)!r}: {exc}") from None
    try:
        retry_after = float(own.get("retry_after", DEFAULT_RETRY_AFTER))
    except ValueError:
        raise ConfigError("state URL: retry_after must be a number of seconds") from None
    if not 0 <= retry_after <= 3600:  # also refuses nan and inf
        raise ConfigError("state URL: retry_after must be 0 to 3600 seconds")
    topology: Single | Cluster | Sentinel | None = None
    if mode == "cluster":
        topology = Cluster(addresses)
    elif mode == "sentinel":
        topology = Sentinel(addresses, unquote(service))
    host = kwargs.get("host", "localhost")
    port = kwargs.get("port", 6379)
    shown = hosts if mode else f"{host}:{port}"
    return RedisStore(
        kwargs,
        config,
        prefix=own.get("prefix", DEFAULT_PREFIX),
        retry_after=retry_after,
        where=f"{parts.scheme} at {shown}",
        topology=topology,
    )


def _address(text: str, default_port: int) -> Address:
    """`host:port`, `host` or `[v6]:port`."""
    host, colon, port = text.rpartition(":")
    if not colon or host.endswith(":"):  # no port, or a bare IPv6 address
        host, port = text, str(default_port)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not host:port")
    return host, int(port)


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
