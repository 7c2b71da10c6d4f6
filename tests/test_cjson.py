"""cjson must be json, byte for byte, or call keys would differ between processes."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_circuit_breaker.core import cjson

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and infinities included: json writes them, so must we
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children)
        | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=25,
)


@given(values)
def test_canonical_is_json_dumps_sorted_compact(value: Any) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"))
    assert cjson.canonical(value) == expected
    assert cjson.canonical_unchecked(value) == expected


@given(values, st.sampled_from(["", " ", "\n\t ", "\r\n"]))
def test_loads_is_json_loads(value: Any, pad: str) -> None:
    text = pad + json.dumps(value) + pad
    expected = json.loads(text)
    for data in (text, text.encode()):
        got = cjson.loads(data)
        assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


@pytest.mark.parametrize(
    "value",
    [{"b": b"x"}, {"s": {1}}, {"o": object()}, {(1, 2): 1}, {"a": 1, 2: "mixed key types"}],
)
def test_canonical_raises_where_json_does(value: Any) -> None:
    with pytest.raises(TypeError):
        json.dumps(value, sort_keys=True)
    with pytest.raises(TypeError):
        cjson.canonical(value)
    with pytest.raises(TypeError):
        cjson.canonical_unchecked(value)


def test_canonical_unchecked_meets_a_cycle_with_a_recursion_error() -> None:
    cycle: dict[str, Any] = {}
    cycle["self"] = [cycle]
    with pytest.raises(RecursionError):
        cjson.canonical_unchecked(cycle)
    assert cjson.canonical_unchecked({"after": "a cycle"}) == '{"after":"a cycle"}'


def test_canonical_detects_cycles_like_json() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular"):
        cjson.canonical(cycle)
    assert cjson.canonical([1, [2]]) == "[1,[2]]"  # nothing left behind by the failure


@pytest.mark.parametrize(
    "data", ["", "  ", "{", '{"a": 1} x', "[1,]", "nul", '"\\ud800"x', b"\xff\xfe{"]
)
def test_loads_errors_are_jsons(data: str | bytes) -> None:
    with pytest.raises(ValueError) as ours:
        cjson.loads(data)
    with pytest.raises(ValueError) as theirs:
        json.loads(data)
    assert str(ours.value) == str(theirs.value)


def test_loads_takes_what_json_takes() -> None:
    assert cjson.loads(b'\xef\xbb\xbf{"bom": 1}') == {"bom": 1}
    assert cjson.loads('{"a": 1}'.encode("utf-16")) == {"a": 1}
    assert cjson.loads("NaN") != cjson.loads("NaN")
    assert cjson.loads("-Infinity") == float("-inf")


def test_a_hook_decision_imports_neither_json_nor_re(tmp_path: Any) -> None:
    # The point of the module: the allow path of a hook process stays free of both.
    event = {
        "session_id": "s",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
    }
    code = (
        "import sys; from dsh_circuit_breaker.hook import main; main(['--state', sys.argv[1]]);"
        "print(sorted(m for m in ('json', 're', 'enum', 'logging') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, f"sqlite:///{tmp_path}/state.db"],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        env={"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path), "PATH": "/usr/bin"},
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[]", done.stderr
