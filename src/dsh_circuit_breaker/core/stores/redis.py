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

Where a key's commands go, connections and the budget are the client's (redis_client.py,
replies read by redis_resp.py, nodes found by redis_topology.py). Every call has one
budget, `config.store_timeout`, for everything: connecting, each read, and the retries of
a contended transaction. Past it the store raises StoreUnavailable and the breaker allows
the call with a warning (or denies it with `failClosed`). After a connection failure the
store answers StoreUnavailable at once for `retry_after` seconds, so a dead Redis costs
one timeout per period, not one per tool call, and then tries to connect again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from hashlib import sha1  # redis-py imports hashlib anyway
from typing import Any, TypeVar

from ..config import Config
from ..keys import DIGEST_SIZE
from ..state import AgentState
from .records import load_record, unreadable
from .redis_client import Address, RedisClient
from .redis_resp import ErrorReply, items, ok, pair
from .redis_url import client_from_url
from .unavailable import StoreUnavailable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from redis.connection import AbstractConnection

T = TypeVar("T")

DEFAULT_PREFIX = "dsh-circuit-breaker:agent:"
# Room in a record beside the window's digests (counters, reported kinds, later fields).
_RECORD_SLACK = 1024 * 1024
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


class RedisStore:
    """Agent states in Redis, shared by every breaker that names the same server and prefix."""

    def __init__(
        self, client: RedisClient, config: Config, *, prefix: str = DEFAULT_PREFIX
    ) -> None:
        self._client = client
        self._ttl_ms = config.idle_expiry_seconds * 1000
        self._record_limit = config.window * 2 * DIGEST_SIZE + _RECORD_SLACK
        self._prefix = prefix.encode()
        self._lock = threading.Lock()
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

        return self._client.with_connection(key, run)

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
        (done,) = self._client.write(conn, deadline, [cas], fresh, asking)
        if isinstance(done, ErrorReply):  # e.g. out of memory: nothing was stored
            raise StoreUnavailable(
                f"{self._client.where}: the write failed ({done.decode(errors='replace')})"
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
            watched, raw = self._client.round_trip(
                conn,
                deadline,
                [("WATCH", key), ("GET", key)],
                limit=self._record_limit,
                fresh=fresh,
                asking=asking,
            )
            fresh = False
            ok(watched)
            if isinstance(raw, ErrorReply):  # WRONGTYPE: some other value under our key
                unreadable(agent, self._client.where, raw.decode(errors="replace"))
                state = AgentState()
            else:
                if mine is not None and raw is not None and sha1(raw).hexdigest() == mine.decode():
                    with self._lock:
                        self._contended.pop(agent, None)
                state = load_record(raw, agent, self._client.where)
            mine = None
            result = step(state)
            # Written back even when only a denial happened, like the SQLite store:
            # `updated` and the TTL then both mean "last guarded call", so an agent that
            # keeps calling after its cap stays capped instead of expiring.
            state.touch()
            record = state.dumps()
            multi, queued, done = self._client.write(
                conn,
                deadline,
                [("MULTI",), ("SET", key, record, "PX", self._ttl_ms), ("EXEC",)],
                False,
                asking,
            )
            ok(multi)
            if done is None:
                # Another client changed this agent between our GET and EXEC: decide
                # again on what it wrote, so the rules see every earlier decision.
                continue
            failed = [r for r in (queued, done, *items(done)) if isinstance(r, ErrorReply)]
            if failed:  # e.g. out of memory: nothing was stored, so nothing counted
                raise StoreUnavailable(
                    f"{self._client.where}: the write failed ({failed[0].decode(errors='replace')})"
                )
            self._remember(agent, state, record)
            return result

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
            ok(self._client.round_trip(conn, deadline, [("PING",)], fresh=fresh)[0])

        self._client.with_connection(None, run)

    def reset(self, agent: str) -> None:
        key = self._key(agent)
        with self._lock:
            self._seen.pop(agent, None)
            self._contended.pop(agent, None)

        def run(conn: AbstractConnection, deadline: float, fresh: bool, asking: bool) -> None:
            (deleted,) = self._client.round_trip(
                conn, deadline, [("DEL", key)], fresh=fresh, asking=asking
            )
            ok(deleted)

        self._client.with_connection(key, run)

    def agents(self) -> Iterator[tuple[str, AgentState | None]]:
        """Every live agent under this store's prefix: a SCAN of each master, for tools,
        not hot paths. Each page (SCAN, then MGET of its keys, one GET per key on a
        cluster) has a budget of its own. None for a record that cannot be read."""
        masters: list[Address] = self._client.with_connection(
            None, lambda conn, deadline, fresh, asking: self._client.masters(deadline)
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
                (scanned,) = self._client.round_trip(
                    conn,
                    deadline,
                    [("SCAN", cursor, "MATCH", pattern, "COUNT", 500)],
                    limit=self._record_limit,
                    fresh=fresh,
                )
                after, keys = pair(scanned)
                if not keys:
                    return after, [], []
                # One GET per key rather than MGET: on a cluster, the keys of one node's
                # page may still span slots, and MGET would be CROSSSLOT.
                values = self._client.round_trip(
                    conn,
                    deadline,
                    [("GET", key) for key in keys],
                    limit=len(keys) * self._record_limit,
                    redirects=False,
                )
                return after, keys, values

            cursor, keys, values = self._client.with_connection(None, page, master)
            for key, raw in zip(keys, values, strict=True):
                # None: expired or reset between SCAN and GET; an error: moved away since.
                if raw is not None and not isinstance(raw, ErrorReply):
                    agent = key[len(self._prefix) :].decode("utf-8", "surrogateescape")
                    yield agent, AgentState.readable(raw)
            if cursor == b"0":
                return

    def close(self) -> None:
        with self._lock:
            self._seen.clear()
            self._contended.clear()
        self._client.close()

    def _key(self, agent: str) -> bytes:
        return self._prefix + agent.encode("utf-8", "surrogateescape")


def _glob_escape(raw: bytes) -> bytes:
    out = bytearray()
    for byte in raw:
        if byte in b"*?[]\\":
            out.append(ord("\\"))
        out.append(byte)
    return bytes(out)


def from_url(url: str, config: Config) -> RedisStore:
    """The store of a `redis://` state URL (its forms: `redis_url.client_from_url`)."""
    client, prefix = client_from_url(url, config.store_timeout)
    return RedisStore(client, config, prefix=prefix or DEFAULT_PREFIX)
