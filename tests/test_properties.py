"""Properties of call keys and of `check`, over generated inputs."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.keys import call_key

IGNORED = frozenset({"description", "reason"})

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same value with every object's key order permuted, at every depth."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


@given(json_objects, st.randoms(use_true_random=False))
def test_key_is_invariant_under_key_order(arguments: dict[str, Any], rng: random.Random) -> None:
    assert call_key("t", arguments, IGNORED) == call_key("t", shuffled(arguments, rng), IGNORED)


@given(json_objects, json_values, json_values)
def test_key_is_invariant_under_ignored_values(
    arguments: dict[str, Any], first: Any, second: Any
) -> None:
    base = {k: v for k, v in arguments.items() if k not in IGNORED}
    one = call_key("t", {**base, "description": first}, IGNORED)
    two = call_key("t", {**base, "description": second, "reason": first}, IGNORED)
    assert one == two == call_key("t", base, IGNORED)
    assert one is not None and len(one) == 16


@given(json_objects, json_objects)
def test_different_arguments_give_different_keys(one: dict[str, Any], two: dict[str, Any]) -> None:
    if one != two:
        assert call_key("t", one, frozenset()) != call_key("t", two, frozenset())


# Values json accepts whose keys may be other scalars (json writes 1 and "1" alike), and
# strings with braces in them (the key's fast path looks for braces in the JSON text).
scalar_keys = st.text(alphabet="{}a1", max_size=3) | st.integers() | st.booleans() | st.none()
keyed_values = st.recursive(
    st.integers() | st.text(alphabet="{}x", max_size=4),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(scalar_keys, children, max_size=3)
    ),
    max_leaves=12,
)


def has_other_keys(value: Any) -> bool:
    if isinstance(value, dict):
        return any(not isinstance(k, str) or has_other_keys(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_other_keys(v) for v in value)
    return False


string_keyed = st.dictionaries(st.text(alphabet="{}a", max_size=3), keyed_values, max_size=3)


@settings(max_examples=300)
@given(string_keyed | keyed_values)
def test_a_call_with_a_key_that_is_not_a_string_is_never_keyed(arguments: Any) -> None:
    key = call_key("t", arguments, frozenset())
    assert (key is None) == has_other_keys(arguments)


anything = st.recursive(
    json_values
    | st.binary(max_size=4)
    | st.sets(st.integers(), max_size=3)
    | st.floats()
    | st.builds(object),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=4) | st.integers() | st.none(), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from(["bash", "read", "todo_write"]), anything), max_size=30))
def test_check_never_raises(calls: list[tuple[str, Any]]) -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=3, window=5, max_calls_per_agent=10))
    for tool, arguments in calls:
        decision = breaker.check("agent", tool, arguments)
        assert decision.allowed or decision.kind in ("duplicate", "cap")


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.sampled_from(["web_search", "web_fetch", "bash"]), st.integers(0, 3))),
    st.dictionaries(st.sampled_from(["web_*", "web_search", "*"]), st.integers(1, 4), max_size=3),
    st.integers(0, 4),
)
def test_budgets_hold_and_stop_follows_the_refusals_in_a_row(
    calls: list[tuple[str, int]], limits: dict[str, int], stop_after: int
) -> None:
    config = Config(duplicate_limit=3, window=4, tool_limits=limits, stop_after_denials=stop_after)
    breaker = CircuitBreaker(config)
    spent = dict.fromkeys(limits, 0)
    in_a_row = 0
    for tool, argument in calls:
        decision = breaker.check("agent", tool, {"q": argument})
        matching = [p for p in limits if p == tool or (p.endswith("*") and tool.startswith(p[:-1]))]
        if decision.allowed:
            for pattern in matching:
                spent[pattern] += 1
            in_a_row = 0
        else:
            in_a_row += 1
            if decision.kind == "budget":
                assert any(spent[p] >= limits[p] for p in matching)
        assert all(spent[p] <= limits[p] for p in limits)  # no budget is ever overspent
        assert decision.stop == (0 < stop_after <= in_a_row)
        assert (decision.stop_reason is not None) == decision.stop
