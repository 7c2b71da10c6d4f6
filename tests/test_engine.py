"""SPEC's rules through the public API, on the in-memory store (issue 2's list)."""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
import threading
from typing import Any

import pytest

from dsh_circuit_breaker import CircuitBreaker, Config, ConfigError, Decision
from dsh_circuit_breaker.demo import probe_calls


def run(breaker: CircuitBreaker, calls: list[tuple[str, Any]], agent: Any = "agent") -> list[bool]:
    return [breaker.check(agent, tool, args).allowed for tool, args in calls]


def first_denial(results: list[bool]) -> int | None:
    """1-based number of the first denied call."""
    return next((i for i, ok in enumerate(results, start=1) if not ok), None)


def test_probe_with_rewritten_description_is_refused_at_the_sixth_call() -> None:
    # The original plugin's README: asked to run `echo cbprobe4` ten times, "the sixth call
    # was denied". `count` counts the refused call too.
    breaker = CircuitBreaker()
    decisions = [breaker.check("a", "bash", args) for args in probe_calls()]
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 5
    denied = decisions[5]
    assert denied.kind == "duplicate"
    assert (denied.count, denied.limit) == (6, 6)
    assert denied.message is not None
    assert "bash" in denied.message and "(copies: 6, limit: 6)" in denied.message
    assert all(d.message is None and d.kind is None for d in decisions[:5])
    assert [d.count for d in decisions[:5]] == [1, 2, 3, 4, 5]


def test_probe_without_ignore_args_is_never_denied() -> None:
    breaker = CircuitBreaker(Config(ignore_args=()))
    assert all(breaker.check("a", "bash", args).allowed for args in probe_calls())


def test_argument_order_never_changes_the_key() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, window=5))
    assert breaker.check("a", "t", {"x": 1, "y": {"p": [1, 2], "q": {"m": 1, "n": 2}}}).allowed
    second = breaker.check("a", "t", {"y": {"q": {"n": 2, "m": 1}, "p": [1, 2]}, "x": 1})
    assert not second.allowed


def test_list_order_does_change_the_key() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, window=5))
    assert breaker.check("a", "t", {"p": [1, 2]}).allowed
    assert breaker.check("a", "t", {"p": [2, 1]}).allowed


def test_ignore_args_is_top_level_only() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, window=5))
    assert breaker.check("a", "t", {"q": 1, "description": "x"}).allowed
    assert not breaker.check("a", "t", {"q": 1, "description": "y"}).allowed
    assert breaker.check("a", "t", {"q": {"description": "x"}}).allowed
    assert breaker.check("a", "t", {"q": {"description": "y"}}).allowed


def test_same_arguments_different_tools_are_different_calls() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, window=5))
    assert breaker.check("a", "read_file", {"path": "x"}).allowed
    assert breaker.check("a", "write_file", {"path": "x"}).allowed


class Opaque:
    pass


class IntKeyed(dict):  # type: ignore[type-arg]
    """Iterates string keys but holds an int key, which json reads through items()."""

    def __init__(self, shown: dict[str, Any]) -> None:
        super().__init__({**shown, 7: "hidden"})
        self._shown = shown

    def __iter__(self) -> Any:
        return iter(self._shown)


def _cycle() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["self"] = d
    return d


@pytest.mark.parametrize(
    "arguments",
    [
        {"data": b"bytes"},
        {"s": {1, 2}},
        {"o": Opaque()},
        {1: "int key"},
        {"nested": {(1, 2): "tuple key"}},
        {"deep": [{"x": {2: "int key deep"}}]},
        [{"in": "a list", None: "key"}],
        {"brace": "{", "then": {True: "bool key"}},
        IntKeyed({"looks": "fine"}),
        _cycle(),
    ],
    ids=[
        "bytes",
        "set",
        "object",
        "int-key",
        "tuple-key",
        "deep-int-key",
        "list-of-none-key",
        "brace-then-bool-key",
        "dict-subclass",
        "cycle",
    ],
)
def test_unserializable_arguments_are_allowed_and_not_counted(arguments: Any) -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, window=5, max_calls_per_agent=1))
    for _ in range(5):
        decision = breaker.check("a", "t", arguments)
        assert decision.allowed
    # Nothing was counted: the cap of 1 still admits a first real call.
    assert breaker.check("a", "t", {"ok": 1}).allowed


def test_int_key_does_not_collide_with_string_key() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, window=5))
    assert breaker.check("a", "t", {"1": "x"}).allowed
    assert breaker.check("a", "t", {1: "x"}).allowed


def test_raw_string_arguments_are_compared_as_strings() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=3, window=5))
    assert run(breaker, [("t", "{not json")] * 3) == [True, True, False]


def test_denied_calls_are_not_counted_and_do_not_enter_the_window() -> None:
    config = Config(duplicate_limit=3, window=4, reset_on_new_call=False, max_calls_per_agent=5)
    breaker = CircuitBreaker(config)
    assert run(breaker, [("t", "A")] * 2) == [True, True]
    # Many denials of A: they must neither use up the cap nor push B/C/D out of the window.
    assert run(breaker, [("t", "A")] * 10) == [False] * 10
    assert run(breaker, [("t", "B"), ("t", "B")]) == [True, True]
    assert not breaker.check("agent", "t", "B").allowed
    assert breaker.check("agent", "t", "C").allowed  # 5th allowed call: cap not reached
    capped = breaker.check("agent", "t", "D")
    assert (capped.kind, capped.count) == ("cap", 5)


def test_a_repeat_ages_out_of_the_window() -> None:
    config = Config(duplicate_limit=3, window=4, reset_on_new_call=False)
    breaker = CircuitBreaker(config)
    assert run(breaker, [("t", "A"), ("t", "A")]) == [True, True]
    assert not breaker.check("agent", "t", "A").allowed
    assert run(breaker, [("t", "B"), ("t", "C")]) == [True, True]
    assert not breaker.check("agent", "t", "A").allowed  # window: A A B C
    assert breaker.check("agent", "t", "D").allowed  # window: A B C D; one A aged out
    assert breaker.check("agent", "t", "A").allowed


def edit_test_cycle(rounds: int = 20) -> list[tuple[str, Any]]:
    calls: list[tuple[str, Any]] = []
    for i in range(rounds):
        calls.append(("bash", {"command": "pytest -x tests/"}))
        calls.append(("edit", {"path": "src/a.py", "new": f"fix {i}"}))
    return calls


def test_edit_test_cycle_is_never_denied_by_default() -> None:
    assert all(run(CircuitBreaker(), edit_test_cycle()))


def test_edit_test_cycle_is_denied_on_sixth_run_with_the_original_rule() -> None:
    results = run(CircuitBreaker(Config(reset_on_new_call=False)), edit_test_cycle())
    assert first_denial(results) == 11  # the 6th test run: calls 1, 3, ..., 11


def test_straight_repeat_denied_on_sixth_copy() -> None:
    assert first_denial(run(CircuitBreaker(), [("t", "A")] * 20)) == 6


def test_two_cycle_is_a_frozen_cycle_refused_at_the_seventh_call() -> None:
    # Rule 5: A B, three rounds, no result between: the call that would start a fourth.
    calls = [("t", "AB"[i % 2]) for i in range(30)]
    breaker = CircuitBreaker()
    decisions = [breaker.check("agent", tool, args) for tool, args in calls[:7]]
    assert [d.allowed for d in decisions] == [True] * 6 + [False]
    refused = decisions[6]
    assert (refused.kind, refused.count, refused.limit) == ("duplicate", 3, 3)
    assert refused.message is not None
    assert "a frozen cycle (the same 2 calls, rounds: 3, limit: 3" in refused.message


def test_three_cycle_is_a_frozen_cycle_refused_at_the_tenth_call() -> None:
    calls = [("t", "ABC"[i % 3]) for i in range(40)]
    assert first_denial(run(CircuitBreaker(), calls)) == 10


def test_a_cycle_refused_leaves_the_agent_free_to_change_course() -> None:
    breaker = CircuitBreaker()
    assert run(breaker, [("t", "AB"[i % 2]) for i in range(6)]) == [True] * 6
    assert not breaker.check("agent", "t", "A").allowed
    assert breaker.check("agent", "t", "B").allowed  # not the block's next call
    assert breaker.check("agent", "t", "C").allowed


def test_a_cycle_of_one_key_is_rule_four_not_rule_five() -> None:
    # AAB AAB AAB: a block with two keys, one of them twice; A A alone is not a block.
    calls = [("t", "AAB"[i % 3]) for i in range(12)]
    assert first_denial(run(CircuitBreaker(), calls)) == 10


def test_new_call_resets_the_count() -> None:
    calls = [("t", "A")] * 5 + [("t", "NEW")] + [("t", "A")] * 5
    assert all(run(CircuitBreaker(), calls))


def test_cap_allows_n_then_denies_forever_with_exempt_passing() -> None:
    breaker = CircuitBreaker(Config(max_calls_per_agent=10))
    assert all(breaker.check("a", "t", {"i": i}).allowed for i in range(10))
    for i in range(10, 30):
        decision = breaker.check("a", "t", {"i": i})
        assert (decision.allowed, decision.kind, decision.count, decision.limit) == (
            False,
            "cap",
            10,
            10,
        )
    assert decision.message and "no further tool calls will run" in decision.message
    assert breaker.check("a", "ask_user_question", {"q": "help?"}).allowed


def test_cap_zero_disables() -> None:
    breaker = CircuitBreaker(Config(max_calls_per_agent=0))
    assert all(breaker.check("a", "t", {"i": i}).allowed for i in range(1000))


def test_only_overrides_exempt_and_wildcards_match() -> None:
    config = Config(duplicate_limit=2, exempt=("mcp__*",), only=("mcp__fs__*", "bash"))
    breaker = CircuitBreaker(config)
    assert breaker.check("a", "mcp__fs__read", {}).allowed
    assert not breaker.check("a", "mcp__fs__read", {}).allowed
    assert all(breaker.check("a", "mcp__web__get", {}).allowed for _ in range(5))
    assert all(breaker.check("a", "read_file", {}).allowed for _ in range(5))


def test_exempt_wildcard() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, exempt=("todo_*",)))
    assert all(breaker.check("a", "todo_write", {}).allowed for _ in range(5))
    assert breaker.check("a", "todo", {}).allowed
    assert not breaker.check("a", "todo", {}).allowed


def test_wildcard_is_the_only_special_character() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, exempt=("a?c", "[x]")))
    assert breaker.check("a", "abc", {}).allowed
    assert not breaker.check("a", "abc", {}).allowed
    assert all(breaker.check("a", "[x]", {}).allowed for _ in range(3))


def test_unguarded_calls_are_invisible() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=3, max_calls_per_agent=3))
    # An exempt call between repeats must not count as a new call (resetting the count)...
    calls = [("t", "A"), ("todo_write", {"n": 1}), ("t", "A"), ("todo_write", {"n": 2})]
    assert all(run(breaker, calls))
    assert not breaker.check("agent", "t", "A").allowed
    # ...and must not use up the cap: only two guarded calls have been allowed so far.
    assert breaker.check("agent", "t", "B").allowed
    assert breaker.check("agent", "t", "C").kind == "cap"


def test_disabled_allows_and_records_nothing() -> None:
    breaker = CircuitBreaker(Config(enabled=False, duplicate_limit=2, max_calls_per_agent=1))
    assert all(breaker.check("a", "t", {}).allowed for _ in range(10))


def test_agents_are_isolated() -> None:
    breaker = CircuitBreaker()
    assert run(breaker, [("t", "A")] * 5, agent="one") == [True] * 5
    assert run(breaker, [("t", "A")] * 5, agent="two") == [True] * 5
    assert not breaker.check("one", "t", "A").allowed
    assert not breaker.check("two", "t", "A").allowed


class Agent:
    def __init__(self, name: str) -> None:
        self.name_ = name


def test_agent_objects_are_isolated_and_freed_when_collected() -> None:
    breaker = CircuitBreaker()
    first, second = Agent("x"), Agent("x")
    assert run(breaker, [("t", "A")] * 5, agent=first) == [True] * 5
    assert breaker.check(second, "t", "A").allowed
    assert not breaker.check(first, "t", "A").allowed
    assert len(list(breaker.store.agents())) == 2
    del first
    gc.collect()
    assert len(list(breaker.store.agents())) == 1


def test_agents_that_cannot_be_weakly_referenced_still_work() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2))
    unhashable: dict[str, Any] = {"no": "id"}
    for agent in [("tuple", 1), 42, unhashable, ["list"]]:
        assert breaker.check(agent, "t", {}).allowed
        assert not breaker.check(agent, "t", {}).allowed


def test_reset_forgets_object_agent_state() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2))
    agent = Agent("x")
    assert breaker.check(agent, "t", {}).allowed
    assert not breaker.check(agent, "t", {}).allowed
    breaker.reset(agent)
    assert breaker.check(agent, "t", {}).allowed


def test_parallel_batch_of_agents_never_interferes() -> None:
    breaker = CircuitBreaker()
    outcome: dict[int, list[bool]] = {}

    def agent_run(n: int) -> None:
        outcome[n] = run(breaker, [("t", "A")] * 10, agent=f"agent-{n}")

    threads = [threading.Thread(target=agent_run, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == [True] * 5 + [False] * 5 for r in outcome.values())


def test_two_threads_on_one_agent_never_lose_a_count() -> None:
    breaker = CircuitBreaker(Config(max_calls_per_agent=1000, duplicate_limit=7, window=2000))
    allowed: list[int] = []

    def hammer(offset: int) -> None:
        allowed.append(
            sum(breaker.check("one", "t", {"i": offset + i}).allowed for i in range(500))
        )

    threads = [threading.Thread(target=hammer, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(allowed) == 1000  # exactly the cap: no count lost, none doubled


def test_internal_error_fails_open_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenStore:
        def transact(self, agent: str, step: Any) -> Any:
            raise RuntimeError("disk on fire")

        def reset(self, agent: str) -> None: ...

        def agents(self) -> Any:
            return iter(())

        def close(self) -> None: ...

    breaker = CircuitBreaker(Config(), state=BrokenStore())
    assert breaker.check("a", "t", {}) == Decision(True)
    assert "internal error" in caplog.text


def test_unknown_tool_name_type_fails_open() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2))
    assert breaker.check("a", None, {}).allowed  # type: ignore[arg-type]
    assert breaker.check("a", None, {}).allowed  # type: ignore[arg-type]


def test_custom_deny_messages_use_placeholders() -> None:
    config = Config(
        duplicate_limit=2,
        max_calls_per_agent=2,
        deny_message={"duplicate": "{kind}: {tool} x{count}/{limit}", "cap": "capped at {limit}"},
    )
    breaker = CircuitBreaker(config)
    breaker.check("a", "t", "A")
    assert breaker.check("a", "t", "A").message == "duplicate: t x2/2"
    breaker.check("a", "t", "B")
    assert breaker.check("a", "t", "C").message == "capped at 2"


def test_single_deny_message_serves_both_kinds() -> None:
    breaker = CircuitBreaker(
        Config(duplicate_limit=2, max_calls_per_agent=2, deny_message="no {tool}")
    )
    breaker.check("a", "t", "A")
    assert breaker.check("a", "t", "A").message == "no t"
    breaker.check("a", "u", "B")
    assert breaker.check("a", "u", "C").message == "no u"


def test_decision_json_roundtrip_of_config() -> None:
    config = Config(exempt=("x",), deny_message={"cap": "c"})
    assert Config.from_mapping(json.loads(json.dumps(config.to_mapping()))) == config


def test_denial_texts_read_right_for_a_limit_of_one() -> None:
    duplicate = CircuitBreaker(Config(duplicate_limit=2, window=2))
    cap = CircuitBreaker(Config(max_calls_per_agent=1))
    texts = []
    for breaker in (duplicate, cap):
        breaker.check("a", "bash", {"command": "ls"})
        denied = breaker.check("a", "bash", {"command": "ls"})
        assert not denied.allowed and denied.message is not None
        texts.append(denied.message)
    for text in texts:
        assert not re.search(r"\b1 (time|call|tool call|identical call)s\b", text), text
    # the count and the limit are still said (a duplicate's count includes the refused call)
    assert "copies: 2, limit: 2)" in texts[0]
    assert "made: 1, limit: 1)" in texts[1]


def test_large_limits_count_exactly() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=101, window=101))
    decisions = [breaker.check("a", "t", {}) for _ in range(101)]
    assert [(d.allowed, d.count, d.limit) for d in decisions[:100]] == [
        (True, n, 101) for n in range(1, 101)
    ]
    assert (decisions[100].kind, decisions[100].count) == ("duplicate", 101)


def test_building_a_breaker_does_not_grow_with_its_limits() -> None:
    # In a child held to 512 MiB: building anything per possible count would run out of
    # memory (or time) long before 10**9.
    code = (
        "import resource, time\n"
        "resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))\n"
        "from dsh_circuit_breaker import CircuitBreaker, Config\n"
        "start = time.perf_counter()\n"
        "breaker = CircuitBreaker(Config(duplicate_limit=10**9, window=10**9))\n"
        "built = time.perf_counter() - start\n"
        "counts = [breaker.check('a', 't', {}).count for _ in range(3)]\n"
        "print(built, counts)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    built, counts = out.stdout.split(" ", 1)
    assert float(built) < 0.5 and counts.strip() == "[1, 2, 3]"


def test_cycle_rounds_sets_rule_five_and_zero_turns_it_off() -> None:
    calls = [("t", "AB"[i % 2]) for i in range(30)]
    assert first_denial(run(CircuitBreaker(Config(cycle_rounds=2)), calls)) == 5
    assert first_denial(run(CircuitBreaker(Config(cycle_rounds=4)), calls)) == 9
    # Off: rule 4 alone; B's first call (2) is the last new one, its sixth copy is call 12.
    assert first_denial(run(CircuitBreaker(Config(cycle_rounds=0)), calls)) == 12


@pytest.mark.parametrize("rounds", [-1, 1, 11, True])
def test_cycle_rounds_out_of_range_fails_at_load(rounds: int) -> None:
    with pytest.raises(ConfigError, match="cycleRounds"):
        Config(cycle_rounds=rounds)
