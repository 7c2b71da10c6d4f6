"""The incident log: one line per kind per agent, fail open, no torn lines."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker import CircuitBreaker, Config


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_first_denial_of_each_kind_logs_one_line(tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    breaker = CircuitBreaker(Config(max_calls_per_agent=8, incident_log=str(log)))
    for _ in range(10):
        breaker.check("agent-007", "bash", {"command": "ls", "description": "secret-ish"})
    breaker.check("agent-007", "bash", {"command": "pwd"})
    breaker.check("agent-007", "bash", {"command": "whoami"})
    for _ in range(3):
        breaker.check("agent-007", "bash", {"command": "date"})
    entries = lines(log)
    # The 3rd refusal of ls in a row also stops the agent (stopAfterDenials 3): one line
    # for that first stop; the three cap refusals of date are a second stop, not logged.
    assert [e["kind"] for e in entries] == ["duplicate", "stop", "cap"]
    dup, stop, cap = entries
    assert dup == {**dup, "tool": "bash", "count": 6, "limit": 6, "agent": "agent-007"}
    assert stop == {**stop, "tool": "bash", "count": 3, "limit": 3, "agent": "agent-007"}
    assert cap == {**cap, "tool": "bash", "count": 8, "limit": 8, "agent": "agent-007"}
    assert set(dup) == {"time", "kind", "tool", "count", "limit", "agent"}
    assert dup["time"].endswith("Z") and len(dup["time"]) == len("2026-09-01T23:10:07Z")
    assert "ls" not in log.read_text() and "secret-ish" not in log.read_text()
    assert os.stat(log).st_mode & 0o777 == 0o600


class NamedAgent:
    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id


class Anonymous:
    def __init__(self) -> None:
        self.model = "m"
        self.tools = ["bash"]


def _trip(breaker: CircuitBreaker, agent: Any) -> None:
    for _ in range(7):
        breaker.check(agent, "t", "x")


def test_agent_object_id_fields_and_agent_keys(tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    breaker = CircuitBreaker(Config(incident_log=str(log)))
    _trip(breaker, NamedAgent("sess-42"))
    _trip(breaker, Anonymous())
    _trip(breaker, {"session_id": "s-1", "other": 1})
    _trip(breaker, {"name": "researcher", "model": "m"})  # a name is not an id
    named, anonymous, mapping, only_named = lines(log)
    assert named["agent"] == "sess-42"
    assert "agent" not in anonymous and anonymous["agentKeys"] == ["model", "tools"]
    assert mapping["agent"] == "s-1"
    assert "agent" not in only_named and only_named["agentKeys"] == ["name", "model"]


@pytest.mark.parametrize("bad", ["/nonexistent-dir/x/incidents.jsonl", "{tmp}"])
def test_unwritable_log_never_raises_or_changes_a_decision(
    tmp_path: Path, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = bad.format(tmp=tmp_path)  # a directory is not a writable file either
    breaker = CircuitBreaker(Config(incident_log=path))
    results = [breaker.check("a", "t", "x").allowed for _ in range(8)]
    assert results == [True] * 5 + [False] * 3
    assert "cannot write incident log" in caplog.text


def _append_many(path: str, worker: int) -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, window=2, incident_log=path))
    for i in range(200):
        agent = f"worker-{worker}-agent-{i}-" + "x" * 300  # long lines make tearing visible
        breaker.check(agent, "t", "x")
        breaker.check(agent, "t", "x")


def test_concurrent_appenders_never_tear_a_line(tmp_path: Path) -> None:
    log = str(tmp_path / "incidents.jsonl")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(log, n)) for n in range(4)]
    threads = [threading.Thread(target=_append_many, args=(log, 10 + n)) for n in range(2)]
    for p in procs:
        p.start()
    for t in threads:
        t.start()
    for p in procs:
        p.join()
    for t in threads:
        t.join()
    entries = lines(Path(log))  # json.loads fails on any torn line
    assert len(entries) == 6 * 200
    assert len({e["agent"] for e in entries}) == 6 * 200
