"""Results as progress (issue 25): what normalizing masks and keeps, and the rules with
results. The store-independent parts; tests/test_store_contract.py runs the rest on every
store."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.results import normalize, result_digest, result_text
from dsh_circuit_breaker.core.state import AgentState

pytestmark = pytest.mark.timeout(60)

SAME = [
    ("finished at 2026-12-02T04:44:21.123Z", "finished at 2026-12-02T05:01:09.9Z"),
    ("Date: Wed, 02 Dec 2026 04:44:21 GMT", "Date: Thu, 03 Dec 2026 11:02:00 GMT"),
    ("Dec  2 04:44:21 host sshd", "Dec 12 23:01:59 host sshd"),
    ("[04:44:21] polling", "[04:45:02] polling"),
    ("created 1764650661", "created 1764650999"),
    ("took 1.52s", "took 230ms"),
    ("elapsed: 12", "elapsed: 13"),
    ("attempt 3 of 5", "attempt 4 of 5"),
    ("retry #2 failed", "retry #3 failed"),
    ("started pid 4242", "started pid 4250"),
    # Gemini CLI's run_shell_command result names the command's process group.
    ("Exit Code: 0\nProcess Group PGID: 23130", "Exit Code: 0\nProcess Group PGID: 23188"),
    ("wrote /tmp/pytest-of-root/abc123/out.txt", "wrote /tmp/pytest-of-root/xyz789/out.txt"),
    ("<Job object at 0x7f3a2c1b9d60>", "<Job object at 0x7f3a2c1c0010>"),
    ("id 3f2b6c1e-8d4a-4c2b-9e1f-0a1b2c3d4e5f", "id 0b6e1a2c-1d2e-4f3a-8b9c-a1b2c3d4e5f6"),
    ("\x1b[32mok\x1b[0m", "ok"),
    ("\u280b waiting", "\u2819 waiting"),
    ("progress 10%\rprogress 40%\rdone", "done"),
    ("line  \n\n\n\nnext", "line\n\nnext"),
    ('{"durationMs":100,"ok":true}', '{"durationMs":101,"ok":true}'),
    ('{"pid":1000,"sessionId":"sess-0"}', '{"pid":1001,"sessionId":"sess-1"}'),
    ('{"runId": "run_0", "createdAt": 17}', '{"runId": "run_1", "createdAt": 18}'),
    ('"{\\"messageId\\": \\"om_0\\"}"', '"{\\"messageId\\": \\"om_1\\"}"'),
    ('{"timestamp":"1/2/2026","nonce":1}', '{"timestamp":"2/3/2026","nonce":2}'),
    ('{"first":1,"second":2}', '{"second":2,"first":1}'),
    ("still running (session sess-3)", "still running (session sess-4)"),
]
MOVES = [
    ("12% done", "13% done"),
    ("ingested 3 books", "ingested 4 books"),
    ("42 lines", "43 lines"),
    ("state: queued", "state: running"),
    ("ok\n", "ok\nnew line\n"),
    ("exit code 1", "exit code 0"),
    ('{"valid":1,"items":2}', '{"valid":2,"items":2}'),  # not an id, not a time
    ('{"done":3,"total":9}', '{"done":4,"total":9}'),
    ("task 3 of 10 done", "task 4 of 10 done"),
]


@pytest.mark.parametrize(("one", "other"), SAME)
def test_what_changes_on_every_call_is_masked(one: str, other: str) -> None:
    assert normalize(result_text(one)) == normalize(result_text(other))
    assert result_digest(one) == result_digest(other)


@pytest.mark.parametrize(("one", "other"), MOVES)
def test_what_a_moving_poll_moves_is_kept(one: str, other: str) -> None:
    assert result_digest(one) != result_digest(other)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "text",
    [
        "p" * 10**6,
        " " * 10**6 + "x",
        "1" * 10**6,
        '"' + "a" * 10**6,
        "ab " * 300_000,
        "\r" * 10**6,
        "0x" * 500_000,
        "Dec " * 250_000,
        "attempt " * 120_000,
        '{"aId":' * 140_000,
    ],
    ids=[
        "word",
        "spaces",
        "digits",
        "quote",
        "words",
        "returns",
        "hex",
        "months",
        "attempts",
        "keys",
    ],
)
def test_normalizing_is_linear_on_hostile_text(text: str) -> None:
    # Capped at 64 KiB and linear: well under a second each, where a quadratic pattern
    # took minutes (`[ \t]+$` on one long line of spaces: 20 s for 60,000).
    assert len(result_digest(text)) == 8


def test_a_json_result_is_digested_by_its_canonical_text() -> None:
    assert result_digest({"b": 1, "a": [1, 2]}) == result_digest({"a": [1, 2], "b": 1})
    assert result_digest({"n": 1}) != result_digest({"n": 2})
    assert len(result_digest("x" * 1_000_000)) == 8


def test_observe_with_results_off_changes_nothing() -> None:
    breaker = CircuitBreaker(Config(result_progress=False))  # calls alone
    for i in range(5):
        assert breaker.check("a", "t", {}).allowed
        breaker.observe("a", "t", {}, f"moved {i}")
    assert not breaker.check("a", "t", {}).allowed
    ((_, state),) = breaker.store.agents()
    assert state is not None and not state.awaiting and not state.results
    assert "results" not in state.to_record()


def test_progress_restarts_the_count_from_that_copy() -> None:
    breaker = CircuitBreaker(Config(result_progress=True))
    answers = ["a", "a", "a", "b", "b", "b", "b", "b", "b", "b"]
    seen = []
    for answer in answers:
        decision = breaker.check("x", "t", {})
        seen.append(decision.allowed)
        if decision.allowed:
            breaker.observe("x", "t", {}, answer)
    # "b" at the 4th call restarts the count there: it and four more copies run, then none.
    assert seen == [True] * 8 + [False] * 2


def test_an_answer_that_flips_between_two_is_not_progress() -> None:
    breaker = CircuitBreaker(Config(result_progress=True))
    seen = []
    for i in range(8):
        decision = breaker.check("x", "t", {})
        seen.append(decision.allowed)
        if decision.allowed:
            breaker.observe("x", "t", {}, "A" if i % 2 else "B")
    # The first A is new (progress at the 2nd call); after it, B and A were both seen.
    assert seen == [True] * 6 + [False] * 2


def test_the_record_carries_results_across_processes() -> None:
    breaker = CircuitBreaker(Config(result_progress=True, same_result_limit=4))
    for answer in ["a", "b", "b", "b"]:
        assert breaker.check("x", "t", {}).allowed
        breaker.observe("x", "t", {}, answer)
    assert breaker.check("x", "t", {}).allowed  # awaiting its result
    ((_, state),) = breaker.store.agents()
    assert state is not None
    again = AgentState.loads(state.dumps())
    assert again.to_record() == state.to_record()
    assert again.since == state.since and again.results == state.results
    assert again.awaiting == state.awaiting


@pytest.mark.parametrize("value", [-1, 1, True, 2.5, "4"])
def test_same_result_limit_refuses_bad_values(value: object) -> None:
    from dsh_circuit_breaker.core.config import ConfigError

    with pytest.raises(ConfigError, match="sameResultLimit"):
        Config.from_mapping({"sameResultLimit": value})


CALLS = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), max_size=120)


@settings(max_examples=150, deadline=None)
@given(CALLS)
def test_without_results_the_rule_is_exactly_todays(calls: list[tuple[int, int]]) -> None:
    today = CircuitBreaker(Config(duplicate_limit=4, window=10, result_progress=False))
    results_on = CircuitBreaker(
        Config(duplicate_limit=4, window=10, result_progress=True, same_result_limit=3)
    )
    for call, _ in calls:
        assert today.check("a", "t", call) == results_on.check("a", "t", call)


@settings(max_examples=150, deadline=None)
@given(CALLS)
def test_rebuilt_from_its_record_a_state_decides_the_same(calls: list[tuple[int, int]]) -> None:
    config = Config(duplicate_limit=4, window=8, result_progress=True, same_result_limit=4)
    live = CircuitBreaker(config)
    for call, answer in calls:
        before = live.check("a", "t", call)
        if before.allowed:
            live.observe("a", "t", call, f"answer {answer}")
        ((_, state),) = live.store.agents()
        assert state is not None
        rebuilt = AgentState.loads(state.dumps())
        assert rebuilt.since == state.since
        assert rebuilt.counts == state.counts
        assert rebuilt.results == state.results and rebuilt.awaiting == state.awaiting


def test_a_cycle_whose_results_move_runs_on_and_one_that_freezes_is_refused() -> None:
    breaker = CircuitBreaker()
    seen = []
    for i in range(7):
        args = {"job": "AB"[i % 2]}
        decision = breaker.check("x", "t", args)
        seen.append(decision.allowed)
        if decision.allowed:
            breaker.observe("x", "t", args, f"same {args['job']} at 12:00:0{i}")  # time masked
    assert seen == [True] * 6 + [False]
    # One result that moved in the last round is enough: the cycle is doing something.
    once = CircuitBreaker()
    for i in range(6):
        args = {"job": "AB"[i % 2]}
        assert once.check("z", "t", args).allowed
        once.observe("z", "t", args, "B moved" if i == 5 else f"same {args['job']}")
    assert once.check("z", "t", {"job": "A"}).allowed
    moving = CircuitBreaker()
    allowed = []
    for i in range(12):
        args = {"job": "AB"[i % 2]}
        allowed.append(moving.check("y", "t", args).allowed)
        moving.observe("y", "t", args, f"{i} rows")  # every result new
    assert allowed == [True] * 12


def test_results_of_parallel_copies_are_judged_as_not_arrived() -> None:
    # Six copies issued before any result (a parallel batch): the sixth is refused, and
    # the results that come back cannot be told apart, so none of them is progress.
    breaker = CircuitBreaker()
    batch = [breaker.check("x", "t", {}) for _ in range(6)]
    assert [d.allowed for d in batch] == [True] * 5 + [False]
    for n in range(5):
        breaker.observe("x", "t", {}, f"result {n}")  # each one different
    assert not breaker.check("x", "t", {}).allowed
    # One copy at a time again: its result is its own, and a new one is progress.
    fresh = CircuitBreaker()
    for n in range(8):
        assert fresh.check("y", "t", {}).allowed
        fresh.observe("y", "t", {}, f"result {n}")
