"""Redis Cluster and Sentinel, real ones started here (support/redis_server.py): decisions
go on while a slot moves between cluster nodes and while Sentinel fails a killed master
over, and the counts stay exact, except for the calls in flight when the master died."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config, ConfigError
from dsh_circuit_breaker.core.stores import store_from_url
from dsh_circuit_breaker.core.stores.redis_topology import key_slot
from support.breaker_warnings import count_warnings
from support.redis_server import RedisCluster, RedisSentinel, cluster_available, command

WORKERS = 4
AGENTS = [f"agent-{i}" for i in range(6)]


def _config() -> Config:
    # A budget that outlasts a failover (Sentinel took about two seconds here, more on a
    # busy machine), no cap.
    return Config(max_calls_per_agent=0, store_timeout=30.0)


def _worker(index: int, url: str, rounds: int, start: Any, busy: Any, results: Any) -> None:
    """Identical calls first (the rules allow 5 per agent, whoever makes them), then
    distinct ones (all allowed); counts what was allowed, what failed open, and how many
    decisions were made while `busy` (a slot migrating, a failover) was set."""
    warnings = count_warnings()
    breaker = CircuitBreaker(_config(), state=url)
    order = AGENTS[index % len(AGENTS) :] + AGENTS[: index % len(AGENTS)]
    allowed = {agent: [0, 0] for agent in AGENTS}
    failed_open = during = 0
    start.wait()
    for _ in range(3):
        for agent in order:
            allowed[agent][0] += breaker.check(agent, "bash", {"command": "ls"}).allowed
    start.wait()  # phase two: a new call in between would restart the duplicate count
    for i in range(rounds):
        for agent in order:
            before = warnings.count
            decision = breaker.check(agent, "web_search", {"q": f"w{index} r{i}"})
            during += busy.value
            if warnings.count > before:
                failed_open += 1
            elif decision.allowed:
                allowed[agent][1] += 1
    breaker.close()
    results.put((allowed, failed_open, during))


def _run(url: str, rounds: int, busy: Any, meanwhile: Any) -> list[Any]:
    context = multiprocessing.get_context("fork")
    start = context.Barrier(WORKERS + 1)
    results = context.Queue()
    processes = [
        context.Process(target=_worker, args=(i, url, rounds, start, busy, results))
        for i in range(WORKERS)
    ]
    for process in processes:
        process.start()
    start.wait()
    start.wait()
    meanwhile()
    collected = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    return collected


def _stored_calls(url: str) -> dict[str, int]:
    store = store_from_url(url, _config())
    try:
        return {agent: state.calls for agent, state in store.agents() if state is not None}
    finally:
        store.close()


@pytest.mark.timeout(180)
def test_cluster_slot_migrated_during_load_counts_stay_exact() -> None:
    require(cluster_available(), "redis-server, redis-cli and the redis extra")
    # A hash tag in the prefix puts every agent in one slot, so moving that slot key by
    # key leaves agents on both nodes for a while: MOVED and ASK both happen under load.
    tag = uuid.uuid4().hex[:8]
    rounds = 60
    context = multiprocessing.get_context("fork")
    busy = context.Value("i", 0)
    with RedisCluster() as cluster:
        url = f"{cluster.url}?prefix=test-{{{tag}}}:&retry_after=0"
        slot = key_slot(f"test-{{{tag}}}:x".encode())
        source = cluster.owner(slot)
        target = next(n.port for n in cluster.nodes if n.port != source)
        moved: list[int] = []

        def migrate() -> None:
            time.sleep(0.2)  # the workers are deciding by now
            busy.value = 1
            moved.append(cluster.migrate_slot(slot, target, pause=0.05))
            busy.value = 0

        collected = _run(url, rounds, busy, migrate)
        stored = _stored_calls(url)
        assert cluster.owner(slot) == target
        on_target = command(target, "CLUSTER", "COUNTKEYSINSLOT", slot)

    assert sum(failed for _, failed, _ in collected) == 0  # nothing failed open
    assert sum(during for _, _, during in collected) > 0  # decided while the slot moved
    assert moved == [len(AGENTS)] and on_target == len(AGENTS)
    for agent in AGENTS:
        assert sum(allowed[agent][0] for allowed, _, _ in collected) == 5, agent
        assert sum(allowed[agent][1] for allowed, _, _ in collected) == WORKERS * rounds
        assert stored[agent] == 5 + WORKERS * rounds, agent


@pytest.mark.timeout(180)
def test_sentinel_failover_under_load_loses_only_calls_in_flight(
    capsys: pytest.CaptureFixture[str],
) -> None:
    require(cluster_available(), "redis-server, redis-cli and the redis extra")
    rounds = 150
    context = multiprocessing.get_context("fork")
    busy = context.Value("i", 0)
    with RedisSentinel() as sentinel:
        url = f"{sentinel.url}?prefix=test-{uuid.uuid4().hex[:12]}:&retry_after=0"
        failover: list[float] = []

        def kill_the_master() -> None:
            time.sleep(0.3)
            busy.value = 1
            began = time.monotonic()
            sentinel.kill_master()
            sentinel.wait_failover()
            failover.append(time.monotonic() - began)
            busy.value = 0

        collected = _run(url, rounds, busy, kill_the_master)
        assert sentinel.master_port() == sentinel.replica.port
        stored = _stored_calls(url)

    in_flight = sum(failed for _, failed, _ in collected)
    duplicates = {a: sum(allowed[a][0] for allowed, _, _ in collected) for a in AGENTS}
    allowed = sum(allowed[a][1] for allowed, _, _ in collected for a in AGENTS)
    total = sum(stored[a] for a in AGENTS) - sum(duplicates.values())
    lost = allowed - total  # acknowledged by the old master, never replicated
    with capsys.disabled():
        print(
            f"\nsentinel failover: {failover[0]:.2f}s; {WORKERS * rounds * len(AGENTS)} "
            f"decisions, {allowed} allowed and counted by their worker, {in_flight} failed "
            f"open in flight (write sent when the master died), {total} stored, {lost} lost"
        )
    assert duplicates == dict.fromkeys(AGENTS, 5)  # before the failover: exact
    assert sum(during for _, _, during in collected) > 0  # decisions went on meanwhile
    # Each worker has at most one write in flight when the master dies.
    assert in_flight <= WORKERS
    # Every call the workers saw counted is stored, bar what replication had not carried
    # yet; calls in flight may or may not have been committed and replicated.
    assert 0 <= lost <= WORKERS
    assert total <= allowed + in_flight
    assert allowed + in_flight == WORKERS * rounds * len(AGENTS)  # nothing else failed


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("redis+sentinel://127.0.0.1:26379", "names no service"),
        ("redis+sentinel://127.0.0.1:26379/svc/x", "database number"),
        ("redis+cluster://127.0.0.1:7000/2", "database 0 only"),
        ("redis+cluster://127.0.0.1:x", "is not host:port"),
        ("redis+cluster://127.0.0.1:7000?retry_afer=1", "unknown parameter"),
        ("redis+cluster://127.0.0.1:7000?ssl_ca_certs=/ca.pem", "needs rediss://"),
    ],
)
def test_cluster_and_sentinel_urls_fail_at_load_naming_the_problem(url: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        store_from_url(url)


def test_no_sentinel_answering_fails_open_within_the_budget(caplog: Any) -> None:
    from support.redis_server import free_port

    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/svc"
    breaker = CircuitBreaker(Config(store_timeout=0.5), state=url)
    began = time.monotonic()
    with caplog.at_level("WARNING", logger="dsh_circuit_breaker"):
        assert breaker.check("a", "t", {}).allowed
    assert time.monotonic() - began < 1.5
    assert "no sentinel named a master" in caplog.text
    breaker.close()


@pytest.mark.timeout(120)
def test_cluster_map_lost_by_one_thread_while_others_decide(caplog: Any) -> None:
    """A node lost (the map emptied) by one thread while others read the map: each
    decision still finds its node, never an internal error, with or without failClosed."""
    require(cluster_available(), "redis-server, redis-cli and the redis extra")
    import sys
    import threading

    with RedisCluster() as cluster:
        url = f"{cluster.url}?prefix=test-{uuid.uuid4().hex[:8]}:&retry_after=0"
        config = Config(max_calls_per_agent=0, fail_closed=True, store_timeout=10.0)
        breaker = CircuitBreaker(config, state=url)
        topology = breaker.store._client.topology  # type: ignore[attr-defined]
        node = ("127.0.0.1", cluster.nodes[0].port)
        stop = time.monotonic() + 3.0
        denied: list[str] = []

        def decide(worker: int) -> None:
            for i in range(100_000):
                if time.monotonic() > stop:
                    return
                decision = breaker.check(f"agent-{worker}-{i % 7}", "t", {"i": i})
                if not decision.allowed:
                    denied.append(decision.kind or "")

        def lose() -> None:
            while time.monotonic() < stop:
                topology.lost(node)
                time.sleep(0)

        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # threads change hands often: the race shows at once
        try:
            with caplog.at_level("WARNING", logger="dsh_circuit_breaker"):
                threads = [threading.Thread(target=decide, args=(w,)) for w in range(4)]
                threads.append(threading.Thread(target=lose))
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(timeout=30)
        finally:
            sys.setswitchinterval(interval)
            breaker.close()
    assert "internal error" not in caplog.text
    assert denied == []
