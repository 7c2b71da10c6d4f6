"""Load: 32 processes decide for 8 shared agents at once over loopback, and the totals of
allowed calls are exactly what the rules say, whatever the interleaving."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config
from support.breaker_warnings import count_warnings
from support.redis_server import fresh_url, redis_available

PROCESSES = 32
AGENTS = [f"agent-{i}" for i in range(8)]
DUPLICATE_ROUNDS = 3  # 32 x 3 identical calls per agent: the rules allow exactly 5
DISTINCT_ROUNDS = 5  # 32 x 5 distinct calls per agent: allowed until the cap
CAP = 100


def _config(incident_log: str) -> Config:
    # A generous budget: this test is about atomicity under contention; a timeout here
    # would fail open and show up as a warning, which the test counts and forbids.
    return Config(max_calls_per_agent=CAP, incident_log=incident_log, store_timeout=30.0)


def _worker(index: int, url: str, log: str, barrier: Any, results: Any) -> None:
    warnings = count_warnings()
    breaker = CircuitBreaker(_config(log), state=url)
    # Each process walks the agents from its own starting point, so every agent has
    # several processes contending for it at any moment.
    order = AGENTS[index % len(AGENTS) :] + AGENTS[: index % len(AGENTS)]
    allowed = {agent: [0, 0] for agent in AGENTS}
    barrier.wait()
    for _ in range(DUPLICATE_ROUNDS):
        for agent in order:
            if breaker.check(agent, "bash", {"command": "ls -la"}).allowed:
                allowed[agent][0] += 1
    # Phase two starts only when every process is done with phase one: with
    # resetOnNewCall a new call in between would (correctly) restart the duplicate count.
    barrier.wait()
    for i in range(DISTINCT_ROUNDS):
        for agent in order:
            decision = breaker.check(agent, "web_search", {"q": f"p{index} r{i}"})
            if decision.allowed:
                allowed[agent][1] += 1
            elif decision.kind != "cap":
                allowed[agent][1] -= 10_000  # any other denial is a bug
    breaker.close()
    results.put((index, allowed, warnings.count))


def test_32_processes_8_agents_exact_totals(tmp_path: Path) -> None:
    require(redis_available(), "redis-server and the redis extra")
    url = fresh_url()
    log = tmp_path / "incidents.jsonl"
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    processes = [
        context.Process(target=_worker, args=(i, url, str(log), barrier, results))
        for i in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    collected = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0

    assert sum(warnings for _, _, warnings in collected) == 0  # nothing failed open
    for agent in AGENTS:
        duplicates = sum(allowed[agent][0] for _, allowed, _ in collected)
        distinct = sum(allowed[agent][1] for _, allowed, _ in collected)
        assert duplicates == 5, agent  # duplicateLimit 6: the 6th identical call is refused
        assert distinct == CAP - 5, agent  # the cap counts every allowed call

    breaker = CircuitBreaker(_config(str(log)), state=url)
    states = dict(breaker.store.agents())
    assert sorted(states) == AGENTS
    assert all(state.calls == CAP and len(state.window) == CAP for state in states.values())
    # Many refusals in a row, so each agent was also stopped: logged once, like the kinds.
    assert all(state.reported == {"duplicate", "cap", "stop"} for state in states.values())
    breaker.close()

    # One incident line per kind per agent for the whole fleet, not one per process.
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted((line["agent"], line["kind"]) for line in lines) == sorted(
        (agent, kind) for agent in AGENTS for kind in ("cap", "duplicate", "stop")
    )


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
