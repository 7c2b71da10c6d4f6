"""The integrations' shared way of reporting a call's result (integrations/_common.py):
what reaches `CircuitBreaker.observe`, and what never does. The frameworks' own paths are
tested end to end in tests/test_integration_<framework>.py (test_results_as_progress)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.integrations._common import RanCalls, arun_observed, run_observed

ON = Config()  # results are observed by default (resultProgress)
CALL = ("agent", "poll", {"job": "7"})


class Recording(CircuitBreaker):
    """The real breaker, which also keeps what it was asked to observe."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.seen: list[Any] = []

    def observe(self, agent: Any, tool: str, arguments: Any, result: Any) -> None:
        self.seen.append(((agent, tool, arguments), result))
        super().observe(agent, tool, arguments, result)


def test_a_wrapped_call_reports_its_value_or_its_error_text() -> None:
    breaker = Recording(ON)
    assert run_observed(breaker, CALL, lambda: {"state": "queued"}) == {"state": "queued"}

    def fails() -> None:
        raise ValueError("step 3 failed")

    with pytest.raises(ValueError):
        run_observed(breaker, CALL, fails)
    with pytest.raises(KeyError):
        asyncio.run(arun_observed(breaker, CALL, _raises(KeyError())))
    assert breaker.seen == [
        (CALL, {"state": "queued"}),
        (CALL, "step 3 failed"),
        (CALL, "KeyError"),
    ]


async def _raises(error: Exception) -> None:
    raise error


def test_an_unreadable_result_is_not_reported_and_the_call_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    breaker = Recording(ON)

    def unreadable(value: Any) -> Any:
        raise TypeError("odd framework object")

    assert run_observed(breaker, CALL, lambda: "fine", unreadable) == "fine"
    assert breaker.seen == []
    assert "result not recorded" not in caplog.text  # the breaker never saw it
    assert "unreadable tool result" in caplog.text


def test_with_results_off_nothing_is_reported() -> None:
    breaker = Recording(Config(result_progress=False))
    ran = RanCalls(breaker)
    decision = breaker.check(*CALL)
    ran.add("c1", CALL, decision)
    asyncio.run(ran.observe("c1", "out"))
    assert run_observed(breaker, CALL, lambda: "out") == "out"
    assert breaker.seen == []


def test_ran_calls_report_only_allowed_calls_once_and_forget_old_ones() -> None:
    breaker = Recording(Config(result_progress=True, duplicate_limit=2))
    ran = RanCalls(breaker, keep=2)
    ran.add("allowed", CALL, breaker.check(*CALL))
    ran.add("refused", CALL, breaker.check(*CALL))  # the second copy: the limit-th, refused
    for call_id in ("refused", "allowed", "allowed"):  # a refusal, then a result twice
        asyncio.run(ran.observe(call_id, "out"))
    assert breaker.seen == [(CALL, "out")]

    for n in range(3):  # three allowed calls whose results never come: the oldest goes
        note = ("agent", "note", {"n": n})
        ran.add(f"lost-{n}", note, breaker.check(*note))
    asyncio.run(ran.observe("lost-0", "late"))
    assert breaker.seen == [(CALL, "out")]
