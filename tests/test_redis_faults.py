"""Faults: Redis stopped and restarted mid-run, a listener that never answers, a slow
link, nothing listening. A call is never held past `storeTimeout`; during an outage the
breaker allows with a warning (or denies with failClosed); afterwards enforcement
resumes on a consistent state."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.state import AgentState
from support.hostile_redis import HostileRedis, bulk, endless, replacing, trickled
from support.redis_server import RedisServer, free_port, redis_available

# What a call may take beyond its budget: its own work (building a TLS context, say), not
# time spent waiting for a CPU, which `own` leaves out so that a busy machine cannot fail
# a test that the breaker passed.
SLACK = 0.25


@pytest.fixture(autouse=True)
def _need_redis() -> None:
    require(redis_available(), "redis-server and the redis extra")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis", persistent=True) as server:
        yield server


def _queued() -> float:
    """Seconds this thread has been runnable but waiting for a CPU (Linux schedstat; 0
    where the kernel does not say, and then `own` is the wall clock)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class Timed(NamedTuple):
    decision: Any
    wall: float  # the wall clock: what a lower bound ("it waited") is checked on
    own: float  # the wall clock less the time the scheduler kept this thread off a CPU


def _timed(breaker: CircuitBreaker, *call: Any) -> Timed:
    start, queued = time.monotonic(), _queued()
    decision = breaker.check(*call)
    wall = time.monotonic() - start
    return Timed(decision, wall, wall - (_queued() - queued))


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "sigkill"])
def test_outage_allows_with_warning_then_enforcement_resumes(
    server: RedisServer, caplog: Any, crash: bool
) -> None:
    url = server.url + "?retry_after=0.2"
    breaker = CircuitBreaker(Config(store_timeout=0.5), state=url)
    call = ("agent-1", "bash", {"command": "make test"})
    assert [breaker.check(*call).allowed for _ in range(3)] == [True] * 3

    server.stop(kill=crash)
    with caplog.at_level(logging.WARNING, logger="dsh_circuit_breaker"):
        outage = [_timed(breaker, *call) for _ in range(8)]
    assert all(t.decision.allowed for t in outage)  # fail open ...
    assert max(t.own for t in outage) < 0.5 + SLACK  # ... within the budget
    warnings = [r for r in caplog.records if "state store unavailable" in r.getMessage()]
    assert len(warnings) == len(outage)  # ... and says so, every time

    server.start()  # same port, same data directory
    time.sleep(0.25)  # past retry_after: the store tries Redis again
    # The 3 calls made before the outage still count; the 8 made during it do not
    # (they were not recorded anywhere). So 2 more may run, then the 6th copy is refused.
    after = [breaker.check(*call) for _ in range(3)]
    assert [d.allowed for d in after] == [True, True, False]
    assert (after[-1].kind, after[-1].count) == ("duplicate", 6)
    states = dict(breaker.store.agents())
    assert states["agent-1"].calls == 5 and len(states["agent-1"].window) == 5
    breaker.close()


def test_fail_closed_denies_during_outage(server: RedisServer) -> None:
    url = server.url + "?retry_after=0.2"
    breaker = CircuitBreaker(Config(store_timeout=0.5, fail_closed=True), state=url)
    assert breaker.check("a", "t", {"i": 0}).allowed
    server.stop()
    denied = breaker.check("a", "t", {"i": 1})
    assert (denied.allowed, denied.kind) == (False, "unavailable")
    assert denied.message and "NOT run" in denied.message
    server.start()
    time.sleep(0.25)
    assert breaker.check("a", "t", {"i": 2}).allowed
    assert dict(breaker.store.agents())["a"].calls == 2
    breaker.close()


def test_stopped_mid_run_under_concurrent_load(server: RedisServer) -> None:
    """Four workers race one agent towards its cap while Redis is killed and restarted.
    Every decision taken while Redis answered is counted exactly once; the record is
    never torn; and once Redis is back the cap holds exactly."""
    cap = 120
    url = server.url + "?retry_after=0.1"
    config = Config(max_calls_per_agent=cap, window=cap, store_timeout=0.5)
    enforced = [0] * 4
    failed_open = [0] * 4
    stop = threading.Event()

    def worker(n: int) -> None:
        breaker = CircuitBreaker(config, state=url)
        store_errors: list[str] = []
        handler = _Collect(store_errors)
        i = 0
        while not stop.is_set() and i < 400:
            before = len(handler.records)
            decision = breaker.check("shared", "t", {"w": n, "i": i})
            i += 1
            if len(handler.records) > before:
                failed_open[n] += 1
            elif decision.allowed:
                enforced[n] += 1
            time.sleep(0.002)
        breaker.close()

    handler_lock = threading.Lock()

    class _Collect(logging.Handler):
        """Per-thread warning counter (logging handlers are global: filter by thread)."""

        def __init__(self, sink: list[str]) -> None:
            super().__init__(logging.WARNING)
            self.records = sink
            self.thread = threading.get_ident()
            with handler_lock:
                logging.getLogger("dsh_circuit_breaker").addHandler(self)

        def emit(self, record: logging.LogRecord) -> None:
            if record.thread == self.thread:
                self.records.append(record.getMessage())

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.15)
    server.stop(kill=True)
    time.sleep(0.3)
    server.start()
    for t in threads:
        t.join(timeout=60)
    stop.set()
    for handler in list(logging.getLogger("dsh_circuit_breaker").handlers):
        if isinstance(handler, _Collect):
            logging.getLogger("dsh_circuit_breaker").removeHandler(handler)

    assert sum(failed_open) > 0  # the outage really happened mid-run
    breaker = CircuitBreaker(config, state=url)
    state = dict(breaker.store.agents())["shared"]
    # Killed Redis can lose a reply after committing (the client then failed open), so
    # the count may exceed the enforced allows by at most the failed-open calls...
    assert sum(enforced) <= state.calls <= sum(enforced) + sum(failed_open)
    # ... and the cap holds exactly: enforcement resumed on that consistent state.
    assert state.calls == cap and len(state.window) == cap
    assert breaker.check("shared", "t", {"w": 9}).kind == "cap"
    breaker.close()


@contextlib.contextmanager
def _listener(
    on_accept: Callable[[socket.socket, threading.Event], list[socket.socket]],
) -> Iterator[int]:
    """A TCP listener on 127.0.0.1 (yields its port) whose thread hands each connection to
    `on_accept(connection, done)`. At the end `done` is set, and the sockets `on_accept`
    returned are shut down and closed, with the listener."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.05)
    done = threading.Event()
    sockets: list[socket.socket] = []

    def accept() -> None:
        while not done.is_set():
            try:
                connection = listener.accept()[0]
            except OSError:
                continue
            sockets.extend(on_accept(connection, done))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        thread.join()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        listener.close()


def _black_hole() -> contextlib.AbstractContextManager[int]:
    """A TCP listener on 127.0.0.1 that accepts connections and never answers."""
    return _listener(lambda connection, done: [connection])


@pytest.mark.parametrize(
    ("scheme", "fail_closed"), [("redis", False), ("redis", True), ("rediss", False)]
)
def test_unresponsive_redis_never_hangs_a_call(scheme: str, fail_closed: bool, caplog: Any) -> None:
    budget = 0.4
    with _black_hole() as port:
        # retry_after=0: every call really tries the silent server, and each must still
        # come back within the budget (for rediss://, a TLS handshake that never ends).
        url = f"{scheme}://127.0.0.1:{port}/0?retry_after=0"
        breaker = CircuitBreaker(Config(store_timeout=budget, fail_closed=fail_closed), state=url)
        with caplog.at_level(logging.WARNING, logger="dsh_circuit_breaker"):
            results = [_timed(breaker, "a", "t", {"i": i}) for i in range(3)]
        breaker.close()
    for t in results:
        assert t.wall >= budget * 0.9 and t.own < budget + SLACK  # waited, then gave up
        assert t.decision.allowed is (not fail_closed)
    assert caplog.text.count("state store unavailable") == 3


def test_unresponsive_redis_costs_one_budget_per_retry_period() -> None:
    with _black_hole() as port:
        url = f"redis://127.0.0.1:{port}/0?retry_after=30"
        breaker = CircuitBreaker(Config(store_timeout=0.3), state=url)
        first = _timed(breaker, "a", "t", {}).wall
        rest = [_timed(breaker, "a", "t", {"i": i}).own for i in range(20)]
        breaker.close()
    assert first >= 0.27
    assert max(rest) < 0.1  # no new attempt until retry_after has passed


def _slow_proxy(target_port: int, delay: float) -> contextlib.AbstractContextManager[int]:
    """Forwards to Redis on 127.0.0.1, holding every reply back by `delay` seconds: a
    server that answers, but slowly (an overloaded Redis, a congested link)."""

    def pump(src: socket.socket, dst: socket.socket, wait: float, done: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while not done.is_set():
                data = src.recv(65536)
                if not data:
                    break
                if wait:
                    time.sleep(wait)
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def forward(client: socket.socket, done: threading.Event) -> list[socket.socket]:
        upstream = socket.create_connection(("127.0.0.1", target_port))
        for src, dst, wait in ((client, upstream, 0.0), (upstream, client, delay)):
            threading.Thread(target=pump, args=(src, dst, wait, done), daemon=True).start()
        return [client, upstream]

    return _listener(forward)


def test_slow_redis_within_budget_still_enforces(server: RedisServer) -> None:
    # Two round trips for the first decision at 0.1 s each fit in a 1 s budget; the next
    # ones are one compare-and-set each (this process wrote the agent's record last).
    with _slow_proxy(server.port, 0.1) as port:
        url = f"redis://127.0.0.1:{port}/0?retry_after=0"
        breaker = CircuitBreaker(Config(duplicate_limit=3, window=3, store_timeout=1.0), state=url)
        results = [_timed(breaker, "a", "t", {}) for _ in range(3)]
        breaker.close()
    assert [t.decision.allowed for t in results] == [True, True, False]
    assert results[0].wall >= 0.2 and all(0.1 <= t.wall < 0.2 for t in results[1:])
    assert all(t.own < 1.0 for t in results)


def test_slow_redis_past_budget_gives_up_in_time(server: RedisServer, caplog: Any) -> None:
    # Each reply alone fits in the budget, but one decision needs two of them: the
    # budget is for the whole call, not per socket read, so the call still ends in time.
    budget = 0.5
    with _slow_proxy(server.port, 0.3) as port:
        url = f"redis://127.0.0.1:{port}/0?retry_after=0"
        breaker = CircuitBreaker(Config(store_timeout=budget), state=url)
        with caplog.at_level(logging.WARNING, logger="dsh_circuit_breaker"):
            results = [_timed(breaker, "a", "t", {"i": i}) for i in range(3)]
        breaker.close()
    for t in results:
        assert t.decision.allowed and t.own < budget + SLACK
    assert caplog.text.count("state store unavailable") == 3


def test_nothing_listening_fails_open_fast(caplog: Any) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    breaker = CircuitBreaker(Config(store_timeout=2.0), state=url)
    with caplog.at_level(logging.WARNING, logger="dsh_circuit_breaker"):
        decision, _, own = _timed(breaker, "a", "t", {})
    breaker.close()
    assert decision.allowed and own < 0.5  # refused at once: no need to wait the budget
    assert "state store unavailable" in caplog.text and "127.0.0.1" in caplog.text


# -- a hostile server (support/hostile_redis.py): what a real Redis never sends ----------


def _decide_in_time(url: str, config: Config, limit: float) -> Timed:
    """One decision through a new breaker, run in a thread so that a store that does not
    keep its budget fails the test instead of hanging it."""
    breaker = CircuitBreaker(config, state=url)
    out: list[Timed] = []
    thread = threading.Thread(target=lambda: out.append(_timed(breaker, "a", "t", {})))
    thread.start()
    thread.join(timeout=limit)
    assert out, f"the decision was still running after {limit}s"
    breaker.close()
    return out[0]


def test_trickling_server_is_held_to_one_budget_for_the_whole_decision(caplog: Any) -> None:
    # Each byte arrives well within the budget; the record's ~120 bytes never do (a read
    # timeout alone would let GET's reply take 0.05 s x 120).
    budget = 1.0
    record = bulk(AgentState().dumps())
    with (
        HostileRedis(trickled(replacing(b"GET", record), only=b"GET"), pace=0.05) as server,
        caplog.at_level(logging.WARNING, logger="dsh_circuit_breaker"),
    ):
        timed = _decide_in_time(server.url, Config(store_timeout=budget), 20)
    assert timed.decision.allowed
    assert timed.wall >= budget * 0.9 and timed.own < budget + SLACK
    assert "did not answer within storeTimeout=1.0s" in caplog.text


@pytest.mark.parametrize(
    ("header", "filler"),
    [(b"$10000000000\r\n", b"x"), (b"*999999999\r\n", b":1\r\n"), (b"+", b"x")],
    ids=["10GB-bulk", "billion-array", "endless-line"],
)
def test_reply_larger_than_any_record_is_refused_unread(
    header: bytes, filler: bytes, caplog: Any
) -> None:
    # The client would read a capped 64 MiB at most; it must stop at once instead.
    with HostileRedis(endless(header, filler)) as server:
        with caplog.at_level(logging.WARNING, logger="dsh_circuit_breaker"):
            timed = _decide_in_time(server.url, Config(store_timeout=2.0), 10)
        sent = server.sent
    assert timed.decision.allowed and timed.own < 1.0
    assert sent < 8 * 1024 * 1024  # record limit (~1 MiB) plus socket buffers
    assert "refused (larger than any record)" in caplog.text


@pytest.mark.parametrize("fail_closed", [False, True])
def test_error_inside_exec_is_a_failed_write(fail_closed: bool, caplog: Any) -> None:
    exec_error = b"*1\r\n-ERR invalid expire time in 'set' command\r\n"
    with (
        HostileRedis(replacing(b"EXEC", exec_error)) as server,
        caplog.at_level(logging.WARNING, logger="dsh_circuit_breaker"),
    ):
        decision = _decide_in_time(server.url, Config(fail_closed=fail_closed), 10).decision
    assert decision.allowed is not fail_closed
    assert "the write failed (ERR invalid expire time" in caplog.text


def test_out_of_memory_redis_is_a_failed_write_not_an_outage(tmp_path: Path, caplog: Any) -> None:
    with RedisServer(tmp_path / "redis", extra=("--maxmemory", "1")) as server:
        breaker = CircuitBreaker(Config(), state=server.url + "?retry_after=30")
        with caplog.at_level(logging.WARNING, logger="dsh_circuit_breaker"):
            results = [_timed(breaker, "a", "t", {"i": i}) for i in range(3)]
        breaker.close()
    assert all(t.decision.allowed for t in results)
    # Each call tried again (the server answers; it is not marked down for retry_after).
    assert caplog.text.count("the write failed (OOM") == 3
