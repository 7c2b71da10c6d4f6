"""SPEC's budget rule (toolLimits) and the stop after it (stopAfterDenials), through the
public API on the in-memory store; tests/test_store_contract.py runs the same rules on
every store."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker import AgentStopped, CircuitBreaker, Config, ConfigError, Decision
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES
from dsh_circuit_breaker.core.state import AgentState


def searches(breaker: CircuitBreaker, n: int, tool: str = "web_search", agent: str = "a") -> list:
    """`n` different searches (no two alike, so only a budget can refuse them)."""
    return [breaker.check(agent, tool, {"query": f"q{i}"}) for i in range(n)]


# --- budgets ---


def test_web_search_budget_of_12_refuses_the_13th_with_the_budget_text() -> None:
    breaker = CircuitBreaker(Config(tool_limits={"web_search": 12}))
    decisions = searches(breaker, 14)
    assert [d.allowed for d in decisions] == [True] * 12 + [False] * 2
    refused = decisions[12]
    assert (refused.kind, refused.count, refused.limit) == ("budget", 12, 12)
    assert refused.message == DEFAULT_MESSAGES["budget"].format(
        tool="web_search", count=12, limit=12, kind="budget"
    )
    assert refused.message.startswith("Circuit breaker: NOT run, web_search budget used up")
    assert "(made: 12, limit: 12): this agent has used up its budget for web_search" in (
        refused.message
    )
    # Other tools are not under the budget.
    assert breaker.check("a", "read_file", {"path": "x"}).allowed


def test_a_wildcard_entry_counts_its_tools_together() -> None:
    breaker = CircuitBreaker(Config(tool_limits={"mcp__web__*": 3}))
    assert breaker.check("a", "mcp__web__search", {"q": 1}).allowed
    assert breaker.check("a", "mcp__web__fetch", {"u": 1}).allowed
    assert breaker.check("a", "mcp__web__search", {"q": 2}).allowed
    refused = breaker.check("a", "mcp__web__fetch", {"u": 2})
    assert (refused.kind, refused.count, refused.limit) == ("budget", 3, 3)
    assert breaker.check("a", "mcp__fs__read", {"p": 1}).allowed


def test_a_call_under_several_entries_is_checked_against_each() -> None:
    breaker = CircuitBreaker(Config(tool_limits={"web_*": 5, "web_fetch": 2}))
    assert breaker.check("a", "web_fetch", {"u": 1}).allowed
    assert breaker.check("a", "web_fetch", {"u": 2}).allowed
    fetch = breaker.check("a", "web_fetch", {"u": 3})
    assert (fetch.kind, fetch.count, fetch.limit) == ("budget", 2, 2)  # its own entry is spent
    # The two fetches that ran count under web_* too: three searches are left of five.
    assert all(d.allowed for d in searches(breaker, 3))
    search = breaker.check("a", "web_search", {"query": "more"})
    assert (search.kind, search.count, search.limit) == ("budget", 5, 5)


def test_denied_calls_are_not_counted_against_a_budget() -> None:
    config = Config(tool_limits={"web_search": 3}, duplicate_limit=2, window=10)
    breaker = CircuitBreaker(config)
    assert breaker.check("a", "web_search", {"query": "same"}).allowed
    for _ in range(5):  # duplicates, refused: they did not run, so they spend nothing
        assert breaker.check("a", "web_search", {"query": "same"}).kind == "duplicate"
    assert breaker.check("a", "web_search", {"query": "two"}).allowed
    assert breaker.check("a", "web_search", {"query": "three"}).allowed
    assert breaker.check("a", "web_search", {"query": "four"}).kind == "budget"


def test_rules_run_in_order_cap_budget_duplicate() -> None:
    config = Config(tool_limits={"t": 2}, max_calls_per_agent=3, duplicate_limit=2)
    breaker = CircuitBreaker(config)
    assert breaker.check("a", "t", "A").allowed
    assert breaker.check("a", "t", "B").allowed
    assert breaker.check("a", "t", "A").kind == "budget"  # spent before the duplicate is judged
    assert breaker.check("a", "u", "C").allowed  # the third call, of another tool
    assert breaker.check("a", "t", "D").kind == "cap"  # the cap comes first


def test_budgets_are_per_agent_and_start_afresh_on_reset() -> None:
    breaker = CircuitBreaker(Config(tool_limits={"web_search": 2}))
    assert [d.allowed for d in searches(breaker, 3)] == [True, True, False]
    assert [d.allowed for d in searches(breaker, 3, agent="b")] == [True, True, False]
    breaker.reset("a")  # what a user prompt does with resetOnUserPrompt
    assert [d.allowed for d in searches(breaker, 3)] == [True, True, False]


def test_unguarded_tools_spend_no_budget() -> None:
    breaker = CircuitBreaker(Config(tool_limits={"*": 2}, exempt=("todo_write",)))
    assert all(breaker.check("a", "todo_write", {"n": i}).allowed for i in range(5))
    assert breaker.check("a", "x", 1).allowed and breaker.check("a", "y", 2).allowed
    assert breaker.check("a", "z", 3).kind == "budget"


# --- stop ---


def kinds(decisions: list[Decision]) -> list[str]:
    return ["stop" if d.stop else "deny" if not d.allowed else "ok" for d in decisions]


def test_stop_on_the_nth_refusal_in_a_row_and_every_one_after() -> None:
    breaker = CircuitBreaker()  # the default: 3
    decisions = [breaker.check("a", "bash", {"command": "ls"}) for _ in range(11)]
    assert kinds(decisions) == ["ok"] * 5 + ["deny"] * 2 + ["stop"] * 4
    stop = decisions[7]
    assert (stop.kind, stop.count, stop.limit) == ("duplicate", 6, 6)  # the refusal as usual
    assert stop.message == decisions[5].message
    assert stop.stop_reason == DEFAULT_MESSAGES["stop"].format(
        tool="bash", kind="duplicate", count=3, limit=3
    )
    assert "this agent is being stopped" in stop.stop_reason
    assert all(d.stop_reason is None for d in decisions[:7])


def test_an_allowed_call_ends_the_run_of_refusals() -> None:
    breaker = CircuitBreaker(Config(stop_after_denials=3))
    ls = {"command": "ls"}
    decisions = [breaker.check("a", "bash", ls) for _ in range(7)]  # 5 run, 2 refused
    decisions.append(breaker.check("a", "bash", {"command": "pwd"}))  # a new call: allowed
    decisions += [breaker.check("a", "bash", ls) for _ in range(3)]  # ls counts afresh
    decisions += [breaker.check("a", "bash", {"command": "pwd"}) for _ in range(8)]  # 4 more run
    assert kinds(decisions) == (
        ["ok"] * 5 + ["deny"] * 2 + ["ok"] + ["ok"] * 3 + ["ok"] * 4 + ["deny"] * 2 + ["stop"] * 2
    )


def test_refusals_of_any_kind_add_up_to_a_stop() -> None:
    config = Config(tool_limits={"web_search": 1}, duplicate_limit=2, max_calls_per_agent=3)
    breaker = CircuitBreaker(config)
    assert breaker.check("a", "web_search", {"query": "q"}).allowed
    assert breaker.check("a", "bash", "ls").allowed
    refused = [
        breaker.check("a", "web_search", {"query": "r"}),
        breaker.check("a", "bash", "ls"),
        breaker.check("a", "web_search", {"query": "s"}),
    ]
    assert [(d.kind, d.stop) for d in refused] == [
        ("budget", False),
        ("duplicate", False),
        ("budget", True),
    ]
    assert (
        refused[2].stop_reason is not None and "a web_search call, budget" in refused[2].stop_reason
    )
    assert breaker.check("a", "bash", "pwd").allowed  # the third allowed call: the cap
    capped = [breaker.check("a", "bash", f"c{i}") for i in range(3)]
    assert [(d.kind, d.stop) for d in capped] == [("cap", False), ("cap", False), ("cap", True)]


def test_stop_after_denials_zero_never_stops() -> None:
    breaker = CircuitBreaker(Config(stop_after_denials=0))
    decisions = [breaker.check("a", "t", {}) for _ in range(50)]
    assert not any(d.stop for d in decisions)
    assert sum(not d.allowed for d in decisions) == 45


def test_stop_after_one_denial() -> None:
    breaker = CircuitBreaker(Config(stop_after_denials=1, duplicate_limit=2))
    assert breaker.check("a", "t", {}).allowed
    assert breaker.check("a", "t", {}).stop


def test_unguarded_and_unjudged_calls_do_not_end_a_run_of_refusals() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2))
    assert breaker.check("a", "t", "A").allowed
    assert not breaker.check("a", "t", "A").allowed
    assert breaker.check("a", "todo_write", {"x": 1}).allowed  # exempt: invisible
    assert breaker.check("a", "t", {"bytes": b"?"}).allowed  # no key: not judged
    assert not breaker.check("a", "t", "A").allowed
    assert breaker.check("a", "t", "A").stop


def test_each_agent_has_its_own_run_of_refusals() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2))
    for agent in ("a", "b"):
        assert breaker.check(agent, "t", {}).allowed
    assert [breaker.check("a", "t", {}).stop for _ in range(2)] == [False, False]
    assert [breaker.check("b", "t", {}).stop for _ in range(2)] == [False, False]
    assert breaker.check("a", "t", {}).stop and breaker.check("b", "t", {}).stop


def test_a_reset_ends_the_run_of_refusals() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2))
    assert breaker.check("a", "t", {}).allowed
    assert [breaker.check("a", "t", {}).stop for _ in range(2)] == [False, False]
    breaker.reset("a")
    assert breaker.check("a", "t", {}).allowed
    assert [breaker.check("a", "t", {}).stop for _ in range(3)] == [False, False, True]


def test_allowed_decisions_never_stop() -> None:
    breaker = CircuitBreaker(Config(tool_limits={"t": 100}))
    decisions = [breaker.check("a", "t", {"i": i}) for i in range(100)]
    assert all(d.allowed and not d.stop and d.stop_reason is None for d in decisions)


# --- the incident log ---


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_incident_log_has_the_first_budget_and_the_first_stop(tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    config = Config(tool_limits={"web_search": 2}, incident_log=str(log))
    breaker = CircuitBreaker(config)
    searches(breaker, 6)
    breaker.check("a", "read_file", {"path": "x"})  # ends the run of refusals
    searches(breaker, 4)  # stopped again: not a second line
    entries = lines(log)
    assert [e["kind"] for e in entries] == ["budget", "stop"]
    budget, stop = entries
    assert budget == {**budget, "tool": "web_search", "count": 2, "limit": 2, "agent": "a"}
    assert stop == {**stop, "tool": "web_search", "count": 3, "limit": 3, "agent": "a"}
    assert "q3" not in log.read_text()  # no argument content
    searches(breaker, 5, agent="b")
    assert [(e["kind"], e["agent"]) for e in lines(log)][2:] == [("budget", "b"), ("stop", "b")]


def test_a_first_denial_that_is_also_the_first_stop_logs_both(tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    breaker = CircuitBreaker(Config(stop_after_denials=1, duplicate_limit=2, incident_log=str(log)))
    breaker.check("a", "t", {})
    breaker.check("a", "t", {})
    assert [(e["kind"], e["count"], e["limit"]) for e in lines(log)] == [
        ("duplicate", 2, 2),
        ("stop", 1, 1),
    ]


# --- configuration ---


def test_defaults() -> None:
    config = Config()
    assert config.tool_limits == {} and config.stop_after_denials == 3
    mapping = config.to_mapping()
    assert (mapping["toolLimits"], mapping["stopAfterDenials"]) == ({}, 3)


def test_camel_and_snake_case_and_round_trip() -> None:
    camel = Config.from_mapping({"toolLimits": {"web_*": 12}, "stopAfterDenials": 4})
    snake = Config.from_mapping({"tool_limits": {"web_*": 12}, "stop_after_denials": 4})
    assert camel == snake == Config(tool_limits={"web_*": 12}, stop_after_denials=4)
    assert Config.from_mapping(json.loads(json.dumps(camel.to_mapping()))) == camel


def test_config_keeps_its_own_copy_of_the_limits() -> None:
    limits = {"web_search": 2}
    config = Config(tool_limits=limits)
    limits["web_search"] = 100
    assert config.tool_limits == {"web_search": 2}


@pytest.mark.parametrize(
    ("mapping", "problem"),
    [
        ({"toolLimits": {"web_search": 0}}, "toolLimits: web_search: must be a positive integer"),
        ({"toolLimits": {"web_search": -1}}, "toolLimits: web_search: must be a positive"),
        ({"toolLimits": {"web_search": True}}, "toolLimits: web_search: must be a positive"),
        ({"toolLimits": {"web_search": 1.5}}, "toolLimits: web_search: must be a positive"),
        ({"toolLimits": {"web_search": "12"}}, "toolLimits: web_search: must be a positive"),
        ({"toolLimits": {"": 3}}, "toolLimits: keys must be tool names or patterns"),
        ({"toolLimits": ["web_search"]}, "toolLimits: must be dict"),
        ({"toolLimits": 12}, "toolLimits: must be dict"),
        ({"stopAfterDenials": -1}, "stopAfterDenials: must be 0 .off. or more"),
        ({"stopAfterDenials": True}, "stopAfterDenials"),
        ({"stopAfterDenials": "3"}, "stopAfterDenials"),
        ({"denyMessage": {"stopp": "x"}}, "denyMessage: unknown kind 'stopp'"),
        ({"denyMessage": {"budget": "{oops}"}}, "denyMessage: unknown placeholder"),
        ({"denyMessage": {"stop": 3}}, "denyMessage: stop must be a string"),
    ],
)
def test_bad_values_fail_at_load_naming_the_key(mapping: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=f"config key {problem}"):
        Config.from_mapping(mapping)


def test_custom_budget_and_stop_texts_use_the_placeholders() -> None:
    config = Config(
        tool_limits={"web_search": 1},
        deny_message={"budget": "{tool}: {count}/{limit} ({kind})", "stop": "halt {tool} x{count}"},
        stop_after_denials=2,
    )
    breaker = CircuitBreaker(config)
    searches(breaker, 1)
    first, second = searches(breaker, 2)
    assert first.message == second.message == "web_search: 1/1 (budget)"
    assert second.stop_reason == "halt web_search x2"
    # One string serves every kind, the stop text included.
    breaker = CircuitBreaker(Config(duplicate_limit=2, deny_message="no {tool}"))
    decisions = [breaker.check("a", "t", {}) for _ in range(4)]
    assert decisions[3].message == decisions[3].stop_reason == "no t"


# --- AgentStopped, and old state records ---


def test_agent_stopped_carries_the_decision_and_pickles() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, stop_after_denials=1))
    breaker.check("a", "t", {})
    decision = breaker.check("a", "t", {})
    error = AgentStopped(decision, "a")
    assert (error.decision, error.agent, error.reason, str(error)) == (
        decision,
        "a",
        decision.stop_reason,
        decision.stop_reason,
    )
    again = pickle.loads(pickle.dumps(error))
    assert (again.decision, again.agent, again.reason) == (decision, "a", decision.stop_reason)
    assert pickle.loads(pickle.dumps(decision)) == decision


def test_a_record_from_before_budgets_and_stop_loads() -> None:
    # What the previous version wrote: no "budgets", no "denials".
    old = {"v": 1, "calls": 2, "last_new": 1, "window": "aa" * 16 + "bb" * 16, "reported": []}
    state = AgentState.from_record(old)
    assert (state.calls, state.spent, state.denials) == (2, {}, 0)
    state.spent["web_*"] = 3
    state.denials = 2
    again = AgentState.loads(state.dumps())
    assert (again.spent, again.denials, again.calls) == ({"web_*": 3}, 2, 2)


def test_a_record_with_malformed_budgets_is_refused() -> None:
    bad = {"v": 1, "calls": 0, "last_new": -1, "window": "", "reported": [], "budgets": [1]}
    with pytest.raises(ValueError, match="budgets"):
        AgentState.from_record(bad)
