"""Configuration: SPEC's defaults, camelCase and snake_case, loud errors naming the key."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dsh_circuit_breaker import CircuitBreaker, Config, ConfigError


def test_defaults_match_spec() -> None:
    c = Config()
    assert (c.enabled, c.duplicate_limit, c.window, c.reset_on_new_call) == (True, 6, 200, True)
    assert c.max_calls_per_agent == 300
    assert c.exempt == ("todo_write", "ask_user_question", "exit_plan_mode")
    assert c.only == ()
    assert c.ignore_args == ("description", "explanation", "reason", "thought", "purpose")
    assert c.deny_message is None and c.incident_log is None


def test_from_mapping_takes_camel_and_snake_case() -> None:
    camel = Config.from_mapping({"duplicateLimit": 4, "window": 50, "resetOnNewCall": False})
    snake = Config.from_mapping({"duplicate_limit": 4, "window": 50, "reset_on_new_call": False})
    assert camel == snake == Config(duplicate_limit=4, window=50, reset_on_new_call=False)


def test_from_mapping_lists_become_tuples() -> None:
    config = Config.from_mapping({"exempt": ["a", "b*"], "ignoreArgs": []})
    assert config.exempt == ("a", "b*") and config.ignore_args == ()


def test_from_mapping_over_a_base() -> None:
    base = Config(exempt=("TodoWrite",))
    assert Config.from_mapping({"window": 20}, base=base).exempt == ("TodoWrite",)


def test_empty_incident_log_means_off() -> None:
    assert Config(incident_log="").incident_log is None


@pytest.mark.parametrize(
    ("mapping", "named"),
    [
        ({"duplicateLimit": 0}, "duplicateLimit"),
        ({"window": 0}, "window"),
        ({"maxCallsPerAgent": -1}, "maxCallsPerAgent"),
        ({"window": 5}, "window"),  # smaller than duplicateLimit 6
        ({"duplicateLimit": "6"}, "duplicateLimit"),
        ({"duplicateLimit": True}, "duplicateLimit"),
        ({"duplicateLimit": 6.0}, "duplicateLimit"),
        ({"resetOnNewCall": "yes"}, "resetOnNewCall"),
        ({"enabled": 1}, "enabled"),
        ({"exempt": "todo_write"}, "exempt"),
        ({"exempt": ["ok", 3]}, "exempt"),
        ({"only": [""]}, "only"),
        ({"ignoreArgs": None}, "ignoreArgs"),
        ({"denyMessage": "stop {tool} {oops}"}, "denyMessage"),
        ({"denyMessage": "{0}"}, "denyMessage"),
        ({"denyMessage": "unclosed {tool"}, "denyMessage"),
        ({"denyMessage": {"loop": "x"}}, "denyMessage"),
        ({"denyMessage": {"cap": 3}}, "denyMessage"),
        ({"denyMessage": 7}, "denyMessage"),
        ({"incidentLog": 7}, "incidentLog"),
        ({"duplicateLimt": 6}, "duplicateLimt"),
        ({"idleExpirySeconds": 0}, "idleExpirySeconds"),
        ({"storeTimeout": 0}, "storeTimeout"),
        # Values that used to pass load and then switch the breaker off (issue 11).
        ({"storeTimeout": float("nan")}, "storeTimeout"),
        ({"storeTimeout": float("inf")}, "storeTimeout"),
        ({"storeTimeout": 2147484}, "storeTimeout"),  # past SQLite's busy-timeout range
        ({"storeTimeout": 3601}, "storeTimeout"),
        ({"idleExpirySeconds": 9_223_372_036_854_776}, "idleExpirySeconds"),  # Redis's TTL
        ({"idleExpirySeconds": 10**400}, "idleExpirySeconds"),  # a float timestamp
        ({"denyMessage": "{tool:d}"}, "cannot be rendered"),
        ({"denyMessage": {"cap": "{count:s}"}}, "cannot be rendered"),
        ({"denyMessage": "{tool:*^2000000000}"}, "width or precision above 100"),
        ({"denyMessage": "{count:>100000000}"}, "width or precision above 100"),
        ({"denyMessage": "{count:.1000f}"}, "width or precision above 100"),
        ({"denyMessage": "{count:>" + "9" * 5000 + "}"}, "width or precision above 100"),
        ({"denyMessage": "{tool:{count}}"}, "nested placeholder"),
        ({"denyMessage": "{tool:>100}" * 300}, "renders to"),
        # A count past 0x10FFFF has no character (refusals in a row grow without bound).
        ({"denyMessage": "{count:c}", "maxCallsPerAgent": 0x110000}, "denyMessage"),
        ({"denyMessage": {"stop": "{count:c}"}}, "the c .character. format"),
    ],
)
def test_bad_config_fails_naming_the_key(mapping: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Config.from_mapping(mapping)


def test_unknown_key_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'dupLimit'.*duplicateLimit"):
        Config.from_mapping({"dupLimit": 3})


def test_same_key_in_both_spellings_is_an_error() -> None:
    with pytest.raises(ConfigError, match="given twice"):
        Config.from_mapping({"window": 10, "duplicateLimit": 2, "duplicate_limit": 3})


def test_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="mapping"):
        Config.from_mapping(["duplicateLimit", 3])  # type: ignore[arg-type]


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ConfigError, match="window"):
        Config(duplicate_limit=10, window=9)


def test_literal_braces_are_allowed_in_messages() -> None:
    assert Config(deny_message="{{json}} {tool}").deny_message == "{{json}} {tool}"


def test_format_specs_within_bounds_still_work() -> None:
    config = Config(deny_message="[{tool:>8}] {count:03d}/{limit:<4}| {kind!r:.3}")
    breaker = CircuitBreaker(config.replace(duplicate_limit=2, window=2))
    breaker.check("a", "bash", {})
    assert breaker.check("a", "bash", {}).message == "[    bash] 002/2   | 'du"


def test_hostile_format_spec_is_refused_at_once() -> None:
    # CPU time, not wall time: the cost is computing, and a loaded machine (CI's parallel
    # runs) stretches wall time without any more work done.
    started = time.process_time()
    with pytest.raises(ConfigError):
        Config(deny_message="{tool:*^2000000000}")  # rendering it took 16 s and 3.8 GB
    assert time.process_time() - started < 0.5


def test_a_long_tool_name_is_cut_in_the_message() -> None:
    breaker = CircuitBreaker(Config(duplicate_limit=2, window=2))
    tool = "t" * 1_000_000
    breaker.check("a", tool, {})
    message = breaker.check("a", tool, {}).message
    assert message is not None and len(message) < 1000 and "t" * 199 + "\u2026" in message


def test_errors_show_huge_values_cut_short() -> None:
    # A YAML alias bomb builds a value like this: a few objects, shared, each repeated.
    bomb: Any = ["lol"] * 9
    for _ in range(9):
        bomb = [bomb] * 9
    started = time.process_time()  # the work done, as above
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"exempt": bomb})
    assert len(str(caught.value)) < 300 and time.process_time() - started < 0.5
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"x" * 10_000_000: 1})
    assert len(str(caught.value)) < 1000
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"idleExpirySeconds": 10**5000})
    assert len(str(caught.value)) < 300
