"""A big hook event read in bounded memory (bounded.py): what is read as a parse would
read it, what becomes a digest, and that a call's key still counts copies exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_circuit_breaker.core.bounded import BUDGET, MAX_MEMBERS, read
from dsh_circuit_breaker.core.keys import call_key
from dsh_circuit_breaker.core.lenient import OPAQUE
from dsh_circuit_breaker.judge import BIG_EVENT_BYTES, event_of


def test_an_event_read_the_usual_way_fits_a_members_budget() -> None:
    assert BIG_EVENT_BYTES <= BUDGET


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from('[]{}"\\,:')),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6), st.booleans())
def test_an_event_within_its_budget_reads_as_a_parse_does(
    event: dict[str, Any], spaced: bool
) -> None:
    text = json.dumps(event, indent=1 if spaced else None, ensure_ascii=spaced)
    assert read(text.encode()) == (json.loads(text), [])


def rows(count: int, first: int = 0) -> list[dict[str, int]]:
    return [{"a": first + i} for i in range(count)]


def big_event(tool_input: Any, **more: Any) -> bytes:
    event = {
        "session_id": "s",
        "hook_event_name": "PreToolUse",
        "tool_name": "mcp__db__put",
        "tool_input": tool_input,
        "tool_use_id": "toolu_1",
        **more,
    }
    return json.dumps(event).encode()


MANY = BUDGET // 8  # rows of about 10 bytes: past a member's budget


def test_a_big_container_is_the_digest_of_its_bytes_the_rest_as_parsed() -> None:
    raw = big_event({"table": "t", "rows": rows(MANY), "when": [1, 2]})
    assert len(raw) > BIG_EVENT_BYTES
    event, notes = read(raw)
    assert notes == [f"1 containers past {BUDGET} bytes judged by a digest of their bytes"]
    assert (event["session_id"], event["tool_name"], event["tool_use_id"]) == (
        "s",
        "mcp__db__put",
        "toolu_1",
    )
    arguments = event["tool_input"]
    assert (arguments["table"], arguments["when"]) == ("t", [1, 2])
    assert set(arguments["rows"]) == {OPAQUE}
    assert event == event_of(raw)  # what the hook and serve --http judge
    # The same bytes, the same value; one byte changed anywhere in it, another.
    assert read(raw)[0] == event
    changed = big_event({"table": "t", "rows": [*rows(MANY - 1), {"a": MANY}], "when": [1, 2]})
    assert len(changed) == len(raw)
    assert read(changed)[0]["tool_input"]["rows"] != arguments["rows"]


def test_a_call_reads_alike_in_its_small_pre_event_and_its_big_post_event() -> None:
    """A member's budget is its own: the arguments of a call whose result is big read as
    in its pre-tool event, so the result is recorded against the key the call had."""
    arguments = {"rows": rows(MANY // 2), "note": "x"}  # under a budget: parsed
    pre = big_event(arguments)
    post = big_event(arguments, hook_event_name="PostToolUse", tool_response={"rows": rows(MANY)})
    assert len(pre) < BIG_EVENT_BYTES < len(post)
    read_pre, read_post = event_of(pre), event_of(post)
    assert read_post["tool_input"] == read_pre["tool_input"] == arguments
    assert set(read_post["tool_response"]["rows"]) == {OPAQUE}
    # ... and past the budget, both events take the same digest.
    big = {"rows": rows(MANY)}
    pre_big = event_of(big_event(big))["tool_input"]
    post_big = event_of(big_event(big, tool_response={"rows": rows(MANY)}))["tool_input"]
    assert call_key("t", pre_big, frozenset()) == call_key("t", post_big, frozenset())


def test_ignored_arguments_of_a_big_call_are_dropped_as_for_any_call() -> None:
    keys = [
        call_key(
            "Bash",
            event_of(big_event({"rows": rows(MANY), "description": d}))["tool_input"],
            frozenset({"description"}),
        )
        for d in ("one", "two")
    ]
    assert keys[0] is not None and keys[0] == keys[1]


@pytest.mark.parametrize(
    "text",
    [
        '{"a": "]}\\"[{", "b": [[[[[["deep"]]]]], {"c": {"d": {"e": {"f": [1]}}}}], "g": -1.5e3}',
        '{ "k" : { "x" : [ ] , "y" : { } } , "z" : "\\u00e9\\ud83d\\ude00" }',
        '{"w": [ [ { "a" : [ [ ] ] } ] , [\n] ,\t{ } ] , "v" : [[[[[[[[0]] ] ]]\r\n] ] ]}',
        '{"n": 1' + "0" * 5000 + "}",  # past Python's int digits: read as the harness does
    ],
)
def test_strings_brackets_and_numbers_the_scanner_must_not_miscount(text: str) -> None:
    padding = ', "pad": [' + ",".join(["0"] * (BIG_EVENT_BYTES // 2)) + "]"
    raw = (text[:-1] + padding + "}").encode()
    event, _ = read(raw)
    expected = json.loads(text) if '"n"' not in text else None
    if expected is not None:
        assert {k: v for k, v in event.items() if k != "pad"} == expected
    assert set(event["pad"]) == {OPAQUE}


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": [1, 2}',
        b'{"a": "unclosed',
        b'{"a": 1} trailing',
        b"[1, 2, 3]",
        b'{"a" 1}',
        b"{" + b"[" * 200_000,
        b'{"a": [' + b'"' * 3 + b"]}",
    ],
)
def test_what_is_not_an_event_object_raises_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        read(raw)


def test_deep_nesting_inside_a_big_event_is_read_without_recursion() -> None:
    deep = "[" * 600_000 + "]" * 600_000  # past the budget: its digest, no recursion
    raw = (
        '{"tool_input": {"deep": ' + deep + ', "small": ' + "[" * 2000 + "]" * 2000 + "}}"
    ).encode()
    event, notes = read(raw)
    assert set(event["tool_input"]["deep"]) == {OPAQUE}
    assert any("nesting" in note for note in notes)  # the small one, read as the harness does


def test_an_object_of_too_many_members_is_opaque_and_such_an_event_not_one() -> None:
    many = {f"k{i}": i for i in range(MAX_MEMBERS + 1)}
    event, _ = read(big_event({"command": "x", "many": many}, pad="p" * BIG_EVENT_BYTES))
    assert event["tool_input"]["many"] == many  # within its budget: parsed whole
    event, _ = read(big_event(many, pad="p" * BIG_EVENT_BYTES))
    assert set(event["tool_input"]) == {OPAQUE}
    with pytest.raises(ValueError, match="members"):
        read(json.dumps(many).encode())


@pytest.mark.timeout(60)
def test_nesting_millions_deep_is_counted_in_runs() -> None:
    half = (16 * 1024 * 1024 - 64) // 2
    for opening, closing in ((b"[", b"]"), (b"{ [", b"] }")):
        count = half // len(opening)
        raw = b'{"tool_input": {"a": ' + opening * count + closing * count + b"}}"
        assert set(read(raw)[0]["tool_input"]["a"]) == {OPAQUE}
        with pytest.raises(ValueError):
            read(raw[:-3] + b"}}")  # one bracket short


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.timeout(120)
def test_reading_a_16_mib_event_of_small_objects_stays_small() -> None:
    """Parsed whole, this event takes about 340 MB; read here, about twice its size. The
    child makes the event and reads its own VmHWM (ru_maxrss would count what the child
    shared with this process at the fork); the bound is generous, and load does not
    change a peak RSS."""
    program = (
        "from dsh_circuit_breaker.judge import event_of\n"
        "row = b'{\"a\": 10}, '\n"
        "count = (16 * 1024 * 1024 - 4096) // len(row)\n"
        'raw = b\'{"session_id": "s", "tool_input": {"rows": [\' + row * count + b\'0]}}\'\n'
        "assert set(event_of(raw)['tool_input']['rows']) == {'dsh-circuit-breaker/opaque'}\n"
        "with open('/proc/self/status') as status:\n"
        "    print(next(line.split()[1] for line in status if line.startswith('VmHWM:')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    peak = int(done.stdout) // 1024
    assert peak < 120, f"peak RSS {peak} MB"
