"""SPEC's rules, run against every state store, so no backend drifts from the others."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.state import AgentState


def test_probe_allows_five_then_denies_the_sixth(state_url: str) -> None:
    breaker = CircuitBreaker(Config(), state=state_url)
    allowed = [
        breaker.check("agent-1", "bash", {"command": "echo cbprobe4", "description": f"step {i}"})
        for i in range(10)
    ]
    assert [d.allowed for d in allowed] == [True] * 5 + [False] * 5
    assert allowed[5].kind == "duplicate"
    breaker.close()


def test_frozen_cycle_refused_at_the_seventh_call(state_url: str) -> None:
    # One breaker per call where the store is shared: the cycle's results travel in the record.
    breaker = one_process_per_call(state_url, Config())
    results = []
    for i in range(7):
        args = {"k": "AB"[i % 2]}
        allowed = breaker().check("a", "t", args).allowed
        results.append(allowed)
        if allowed:
            breaker().observe("a", "t", args, f"the same for {args['k']}")
    assert results == [True] * 6 + [False]
    assert not breaker().check("a", "t", {"k": "A"}).allowed  # still the block's next call
    # The same cycle whose results move is doing something: it runs on.
    moving = []
    for i in range(12):
        args = {"k": "AB"[i % 2]}
        allowed = breaker().check("m", "t", args).allowed
        moving.append(allowed)
        breaker().observe("m", "t", args, f"{i * 8}% done")
    assert moving == [True] * 12


def test_cap_holds_and_exempt_passes(state_url: str) -> None:
    breaker = CircuitBreaker(Config(max_calls_per_agent=5, window=10), state=state_url)
    assert all(breaker.check("a", "t", {"i": i}).allowed for i in range(5))
    capped = breaker.check("a", "t", {"i": 99})
    assert (capped.allowed, capped.kind, capped.count, capped.limit) == (False, "cap", 5, 5)
    assert breaker.check("a", "todo_write", {"x": 1}).allowed
    assert breaker.check("b", "t", {"i": 0}).allowed
    breaker.close()


def test_reset_forgets_one_agent(state_url: str) -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, window=5), state=state_url)
    assert breaker.check("a", "t", {}).allowed
    assert breaker.check("b", "t", {}).allowed
    assert not breaker.check("a", "t", {}).allowed
    breaker.reset("a")
    assert breaker.check("a", "t", {}).allowed
    assert not breaker.check("b", "t", {}).allowed
    breaker.close()


def test_window_ages_out_a_repeat(state_url: str) -> None:
    config = Config(duplicate_limit=3, window=3, reset_on_new_call=False)
    breaker = CircuitBreaker(config, state=state_url)
    # The window keeps the last 3 calls: at the 5th it holds A, B, C (the first A has left),
    # so A counts twice with the 5th, under the limit of 3; without the window, three times.
    calls = ["A", "A", "B", "C", "A"]
    assert [breaker.check("a", "t", c).allowed for c in calls] == [True] * 5
    breaker.close()


def test_threads_never_lose_a_count(state_url: str) -> None:
    breaker = CircuitBreaker(Config(), state=state_url)
    results: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(10):
            allowed = breaker.check("shared", "bash", {"command": "ls"}).allowed
            with lock:
                results.append(allowed)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 5
    breaker.close()


def one_process_per_call(state_url: str, config: Config) -> Callable[[], CircuitBreaker]:
    """A breaker per call, as the command hook makes one per process (a persistent store
    must carry everything between them); the in-memory store lives in one breaker."""
    if state_url.startswith("memory:"):
        shared = CircuitBreaker(config, state=state_url)
        return lambda: shared
    return lambda: CircuitBreaker(config, state=state_url)


def test_budget_refuses_the_thirteenth_search_and_resets(state_url: str) -> None:
    breaker = one_process_per_call(state_url, Config(tool_limits={"web_*": 12}))
    tools = ["web_search", "web_fetch"]
    decisions = [breaker().check("a", tools[i % 2], {"q": i}) for i in range(14)]
    assert [d.allowed for d in decisions] == [True] * 12 + [False] * 2
    assert (decisions[12].kind, decisions[12].count, decisions[12].limit) == ("budget", 12, 12)
    assert breaker().check("b", "web_search", {"q": 0}).allowed  # per agent
    breaker().reset("a")
    assert breaker().check("a", "web_search", {"q": 99}).allowed


def test_stop_on_the_third_refusal_in_a_row_until_an_allowed_call(state_url: str) -> None:
    breaker = one_process_per_call(state_url, Config(duplicate_limit=3, window=10))
    stops = [breaker().check("a", "t", "A").stop for _ in range(6)]
    assert stops == [False, False, False, False, True, True]
    assert breaker().check("a", "t", "B").allowed  # a new call: ends the run of refusals
    # ...and A counts afresh since it: two run, then three refusals in a row again.
    assert [breaker().check("a", "t", "A").stop for _ in range(5)] == [False] * 4 + [True]


def test_a_record_from_before_budgets_and_stop_still_loads(
    state_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = Config(duplicate_limit=3, window=10, tool_limits={"t": 3})
    breaker = one_process_per_call(state_url, config)
    new_record = AgentState.to_record

    def previous_version(state: AgentState) -> dict[str, Any]:
        record = new_record(state)
        del record["budgets"], record["denials"]  # the fields this version added
        return record

    with monkeypatch.context() as patch:
        patch.setattr(AgentState, "to_record", previous_version)
        assert breaker().check("a", "u", "A").allowed
        assert breaker().check("a", "u", "A").allowed
    # The old record's window still holds; its budget counts start at zero.
    assert breaker().check("a", "u", "A").kind == "duplicate"
    assert [breaker().check("a", "t", c).allowed for c in "BCDE"] == [True, True, True, False]
    assert [a for a, _ in breaker().store.agents()] == ["a"]


def _poll(breaker: CircuitBreaker, agent: str, result: str) -> bool:
    allowed = breaker.check(agent, "bash", {"command": "gh run view 42"}).allowed
    if allowed:
        breaker.observe(agent, "bash", {"command": "gh run view 42"}, result)
    return allowed


def test_a_moving_poll_runs_on_and_a_frozen_one_is_refused_at_the_sixth(
    state_url: str,
) -> None:
    breaker = CircuitBreaker(Config(result_progress=True), state=state_url)
    moving = [_poll(breaker, "mover", f"{i * 5}% at 2026-12-02T04:{i:02}Z") for i in range(20)]
    frozen = [_poll(breaker, "stuck", f"running, {i}.2s elapsed") for i in range(8)]
    assert moving == [True] * 20
    assert frozen == [True] * 5 + [False] * 3
    breaker.close()


def test_a_stuck_poll_between_new_calls_is_refused_at_the_same_result_limit(
    state_url: str,
) -> None:
    breaker = CircuitBreaker(Config(result_progress=True, same_result_limit=8), state=state_url)
    polls = []
    for i in range(12):
        polls.append(_poll(breaker, "a", "state: pending"))
        assert breaker.check("a", "read", {"path": f"notes-{i}.md"}).allowed
    assert polls == [True] * 8 + [False] * 4
    breaker.close()


def test_a_result_for_a_refused_or_answered_call_changes_nothing(state_url: str) -> None:
    breaker = CircuitBreaker(Config(result_progress=True), state=state_url)
    for _ in range(5):
        assert _poll(breaker, "a", "same")
    args = {"command": "gh run view 42"}
    assert not breaker.check("a", "bash", args).allowed
    # The refused 6th's "result", and a second result for the 5th: neither is progress.
    breaker.observe("a", "bash", args, "something new")
    breaker.observe("a", "bash", args, "something newer")
    assert not breaker.check("a", "bash", args).allowed
    breaker.close()
