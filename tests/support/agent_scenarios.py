"""The scenarios the framework integration tests (tests/test_integration_*.py) all drive,
written once and framework-neutral: a model that loops on one search call, the refusal it
must be sent, and a healthy edit-test cycle. Each test turns these calls into its own
framework's messages and keeps its own checks of how the framework delivered them.

conftest.py registers this module for pytest's assertion rewriting, so a failing check
here reports the values as one written in a test would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

Call = tuple[str, dict[str, Any], str]  # tool name, arguments, call id
T = TypeVar("T")

DENIED = "Circuit breaker: this search call was NOT run"  # how a refused search's result begins
GIVE_UP = "I keep being refused; stopping here."  # what the looping model ends with


def is_refusal(text: str) -> bool:
    """Whether a tool result's text is the breaker's refusal (the default message)."""
    return "Circuit breaker" in text


def since_last_prompt(messages: list[T], is_prompt: Callable[[T], bool]) -> list[T]:
    """The messages from the latest user prompt on (all of them when there is none): what
    the model has been sent in the current turn."""
    starts = [i for i, m in enumerate(messages) if is_prompt(m)]
    return messages[starts[-1] :] if starts else messages


def loop_call(tag: str, n: int) -> Call:
    """The looping model's call number `n` (from 0): the same search every time, each
    under its own id `<tag>-<n>`."""
    return ("search", {"query": "same"}, f"{tag}-{n}")


def assert_loop_refusal(text: str) -> None:
    """The text a refused repeat of the looping search must carry: the default refusal,
    naming the six identical calls that ran and the limit."""
    assert text.startswith(DENIED)
    assert "as often as allowed (runs: 6, limit: 6)" in text


def edit_test_cycle(edits: int) -> list[Call]:
    """A healthy loop: run the tests, edit, `edits` times over, then run them once more.
    The run_tests calls are all identical, but an edit comes between any two of them, so
    none may be refused."""
    script: list[Call] = []
    for i in range(edits):
        script.append(("run_tests", {"path": "tests/"}, f"t{i}"))
        script.append(("edit", {"file": "a.py", "text": f"fix {i}"}, f"e{i}"))
    script.append(("run_tests", {"path": "tests/"}, "final"))
    return script


def search_function(ran: list[str]) -> Callable[[str], str]:
    """The looping model's tool as a plain function (each framework wraps it its own way):
    records each query it runs in `ran`."""

    def search(query: str) -> str:
        """Search the web."""
        ran.append(query)
        return f"results for {query}"

    return search


def edit_test_functions(ran: list[str]) -> tuple[Callable[[str], str], Callable[[str, str], str]]:
    """The edit-test cycle's two tools as plain functions: `run_tests` always reports a
    failure, `edit` succeeds; each records "test" or "edit" in `ran` when it runs."""

    def run_tests(path: str) -> str:
        """Run the tests."""
        ran.append("test")
        return "1 failed"

    def edit(file: str, text: str) -> str:
        """Edit a file."""
        ran.append("edit")
        return "ok"

    return run_tests, edit
