"""End to end, for every command-hook harness in `harnesses.HARNESSES`: the real CLI,
pinned in tests/e2e/package.json, run headless in a scratch HOME with the hook that the
installed wheel's `dsh-circuit-breaker install NAME` wrote, against a scripted model on
127.0.0.1 (tests/support/command_hook_harnesses.py says how, per harness).

Each scenario asserts what really ran (a side-effect file the shell commands append to),
what the model was sent back (the tool results of the next request, from the fake's
log), and the incident log. A harness whose hook can end the agent (a `stop.json` among
its captured events) is stopped at the third refusal in a row; the others refuse every
call from there on, and the run goes on. The install is the default one: it adds the
post-tool hook, and the breaker judges each repeat by what came back (`resultProgress`).
A scenario a harness cannot take part in is named in its `not_in`, with the reason;
tests/test_harness_registry.py checks that every registered harness is described.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from support.command_hook_harnesses import HARNESSES, Harness, in_scratch_home
from support.harness_run import edit_test_project, side_lines
from support.installed import Installed
from support.scripted_server import Block

T = TypeVar("T")
pytestmark = pytest.mark.timeout(660)  # up to two runs of a CLI (300 s apiece)

SUBAGENT_MARK = "SUBAGENT-TASK: run the loop"
# test function -> the scenario it is: what a harness's `not_in` names.
SCENARIOS: dict[str, str] = {}


def scenario(key: str) -> Callable[[T], T]:
    """Run the test for every described harness but those whose `not_in` names `key`
    (tests/test_harness_registry.py lists those, with the reason)."""

    def mark(test: T) -> T:
        SCENARIOS[test.__name__] = key
        names = sorted(name for name, h in HARNESSES.items() if key not in h.not_in)
        return pytest.mark.parametrize("harness", names, indirect=True)(test)

    return mark


@pytest.fixture
def harness(request: pytest.FixtureRequest, installed: Installed, harness_cache: Path) -> Harness:
    return in_scratch_home(request.param, installed, harness_cache)


def check_refused(h: Harness, result: Any, message: str) -> None:
    """A refused call's result: the breaker's text, in the harness's wording."""
    said = (result.text, h.last_stderr[-2000:])
    if h.whole_refusal:
        assert result.text == h.refusal_prefix + message, said
    else:
        assert result.text.startswith(h.refusal_prefix + message), said
    if h.flags_errors:
        assert result.is_error


def check_ran(h: Harness, result: Any) -> None:
    assert "Circuit breaker" not in result.text, result.text
    if h.flags_errors:
        assert not result.is_error


def incident(kind: str, tool: str, count: int, limit: int, agent: str | None) -> dict[str, Any]:
    return {"kind": kind, "tool": tool, "count": count, "limit": limit, "agent": agent}


def without_time(incidents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for entry in incidents:
        assert isinstance(entry.pop("time"), str)
    return incidents


@scenario("probe_stop_off")
def test_probe_with_stop_off_five_run_five_refused(harness: Harness) -> None:
    # stopAfterDenials 0: every refusal reaches the model and the run goes on to its end.
    # The probe prints nothing: every copy returns the same, and the 6th is refused.
    h = harness
    h.configure({"stopAfterDenials": 0})
    side = h.work / "side.txt"
    with h.model([*h.probe(side), "All ten probe steps attempted."]) as model:
        outcome = h.run(model, "Run the cbprobe4 probe ten times.")
    assert side_lines(side) == ["cbprobe4"] * 5  # five really ran
    calls = model.tool_uses()
    results = [model.result_in_next_request(c["id"]) for c in calls]
    for result in results[:5]:
        check_ran(h, result)
    for result in results[5:]:
        check_refused(h, result, h.duplicate())
    assert len(results) == 10
    assert len(model.model_requests) == 11  # every refusal answered, then the final text
    assert outcome.final == "All ten probe steps attempted."
    # The first duplicate, and no stop; under the harness's own session id.
    assert without_time(h.incident_lines()) == [
        incident("duplicate", h.shell_tool, 6, 6, outcome.session)
    ]
    assert outcome.session
    assert "cbprobe4" not in h.incidents.read_text()  # no argument content on disk
    assert h.ended_by_stop(outcome) in (False, None)
    h.check_denials(outcome, [c["id"] for c in calls[5:]])
    h.check_went_on(outcome, model, calls)


@scenario("probe")
def test_a_looping_agent_is_stopped_or_refused_past_the_stop(harness: Harness) -> None:
    # Defaults: the 6th call is refused, the third refusal in a row (the 8th call) stops
    # the agent, where the harness's hook can end it; elsewhere the stop is the plain
    # refusal, every call from there on is refused like the 6th, and the run goes on to
    # the model's end.
    h = harness
    side = h.work / "side.txt"
    with h.model([*h.probe(side), "All ten probe steps attempted."]) as model:
        outcome = h.run(
            model, "Run the cbprobe4 probe ten times.", *(h.stop_flags if h.stops() else ())
        )
    assert side_lines(side) == ["cbprobe4"] * 5  # five really ran
    calls = model.tool_uses()
    for call in calls[:5]:
        check_ran(h, model.result_in_next_request(call["id"]))
    for call in calls[5:7]:
        check_refused(h, model.result_in_next_request(call["id"]), h.duplicate())
    incidents = without_time(h.incident_lines())
    (agent,) = {i["agent"] for i in incidents}
    # The first duplicate, then the first stop (the third refusal in a row).
    assert incidents == [
        incident("duplicate", h.shell_tool, 6, 6, agent),
        incident("stop", h.shell_tool, 3, 3, agent),
    ]
    if h.stops():
        # Eight calls asked for; the eighth stopped the agent: no model request after it,
        # so its refusal never reached the model.
        assert len(calls) == len(model.model_requests) == 8
        assert [r.call_id for r in model.tool_results()] == [c["id"] for c in calls[:7]]
        assert h.stop_shown(outcome) == [h.stop_text()]
        assert h.ended_by_stop(outcome) in (True, None)
        h.check_stopped(outcome, model, calls)
    else:
        assert len(calls) == 10
        for call in calls[7:]:
            check_refused(h, model.result_in_next_request(call["id"]), h.duplicate())
        assert len(model.model_requests) == 11
        assert outcome.final == "All ten probe steps attempted."
        h.check_denials(outcome, [c["id"] for c in calls[5:]])
        h.check_went_on(outcome, model, calls)
    if outcome.session is not None:
        assert agent == outcome.session  # the harness's session id reaches the hook


@scenario("subagent")
def test_only_the_looping_subagent_is_refused(harness: Harness) -> None:
    # The subagent makes the same call for ever; the parent delegates once, waits, then
    # makes the very same call twice itself: an agent of its own, it is not refused.
    h = harness
    shape = h.subagent
    assert shape is not None
    side = h.work / "side.txt"
    loop = f"echo loop >> {side}"
    child: list[str] = []
    parent: list[str] = []
    delegation = shape.delegate(SUBAGENT_MARK)

    def respond(body: dict[str, Any]) -> Any:
        done = len(h.fake.results_of(body))
        if shape.is_child(body):
            if done < 8:  # eight identical calls, then (if it still runs) a report
                call = h.shell(loop, f"Child attempt number {done + 1}")
                child.append(call["id"])
                return call
            return "Subagent: the loop was refused by the circuit breaker."
        if done == 0:
            return delegation
        if done < 3:
            call = h.shell(loop, f"Parent check number {done}")
            parent.append(call["id"])
            return call
        return "Parent: done."

    with h.model([], after=respond) as model:
        outcome = h.run(model, "PARENT-TASK: delegate the loop, then check it twice.")
    results = {r.call_id: r for r in model.tool_results()}
    assert len(child) == 8 and len(parent) == 2
    for call_id in child[:5]:
        check_ran(h, results[call_id])
    for call_id in child[5:7]:
        check_refused(h, results[call_id], h.duplicate())
    if h.stops():  # the 8th ended the subagent: no request of its own came after it
        assert child[7] not in results
        assert len([b for b in model.model_requests if shape.is_child(b)]) == 8
        assert h.stop_shown(outcome) == [h.stop_text()]
    else:
        check_refused(h, results[child[7]], h.duplicate())
    for call_id in parent:
        check_ran(h, results[call_id])
    assert side_lines(side) == ["loop"] * 7  # the child's five, the parent's two
    assert outcome.final == "Parent: done."
    incidents = without_time(h.incident_lines())
    (agent,) = {i["agent"] for i in incidents}
    assert incidents == [
        incident("duplicate", h.shell_tool, 6, 6, agent),
        incident("stop", h.shell_tool, 3, 3, agent),
    ]
    assert shape.own_key(agent, outcome), (agent, outcome.session)
    assert "Circuit breaker" not in results[delegation["id"]].text
    assert h.ended_by_stop(outcome) in (False, None)  # the parent went on
    h.check_subagent(outcome, model, delegation, child)


@scenario("edit_cycle")
def test_healthy_edit_test_cycle_is_never_refused(harness: Harness) -> None:
    # Ten identical test runs, more than duplicateLimit (6), an edit between each two.
    h = harness
    app = edit_test_project(h.work)
    rounds = 10
    script: list[Any] = [h.read_call(app)]
    for i in range(1, rounds + 1):
        script.append(h.edit_call(app, f"value = {i - 1}", f"value = {i}"))
        script.append(h.shell("python3 check.py", "Run the tests"))
    with h.model([*script, "All green after ten rounds."]) as model:
        outcome = h.run(model, "Fix the value, test after each edit.")
    results = [model.result_in_next_request(c["id"]) for c in model.tool_uses()]
    assert len(results) == 1 + 2 * rounds
    for result in results:
        check_ran(h, result)
    assert side_lines(h.work / "test-runs.log") == [f"value = {i}" for i in range(1, rounds + 1)]
    assert app.read_text() == f"value = {rounds}\n"
    assert outcome.final == "All green after ten rounds."
    assert h.incident_lines() == []
    h.check_denials(outcome, [])


@pytest.mark.parametrize("reset", [True, False])
@scenario("new_prompt")
def test_a_new_user_prompt_starts_the_main_agent_afresh(harness: Harness, reset: bool) -> None:
    # Within one prompt the count goes on across tool results (a harness that sends a
    # prompt event before every model request must not reset it); the person's next prompt
    # in the same session starts it afresh, unless resetOnUserPrompt is off.
    h = harness
    h.configure({"resetOnUserPrompt": reset})
    side = h.work / "side.txt"

    def call(i: int) -> Block:
        return h.shell(f"echo again >> {side}", f"Try number {i}")

    with h.model([*[call(i) for i in range(1, 7)], "Stuck."]) as first:
        one = h.run(first, "Keep trying.")
    firsts = [first.result_in_next_request(c["id"]) for c in first.tool_uses()]
    assert len(firsts) == 6
    for result in firsts[:5]:
        check_ran(h, result)
    check_refused(h, firsts[5], h.duplicate())
    with h.model([call(7), call(8), "Done."]) as second:
        two = h.run(second, "Try it once more, differently.", *h.resume(one))
    assert two.session == one.session
    seven, eight = (c["id"] for c in second.tool_uses())
    if reset:
        check_ran(h, second.result_in_next_request(seven))
        check_ran(h, second.result_in_next_request(eight))
        assert side_lines(side) == ["again"] * 7
        assert two.final == "Done."
    else:  # the count carries over the session: the 8th call is the 3rd refusal
        check_refused(h, second.result_in_next_request(seven), h.duplicate())
        assert side_lines(side) == ["again"] * 5
        if h.stops():
            assert len(second.model_requests) == 2  # stopped at the 8th, nothing after
            assert h.stop_text() in h.stop_shown(two)
            assert h.ended_by_stop(two) in (True, None)
        else:
            check_refused(h, second.result_in_next_request(eight), h.duplicate())


@scenario("cap")
def test_cap_text_reaches_the_model(harness: Harness) -> None:
    h = harness
    h.configure({"maxCallsPerAgent": 3, "window": 6})
    side = h.work / "side.txt"
    calls = [h.shell(f"echo {i} >> {side}", f"Step {i}") for i in range(5)]
    with h.model([*calls, "Out of calls."]) as model:
        outcome = h.run(model, "Do five different things.")
    assert side_lines(side) == ["0", "1", "2"]
    results = [model.result_in_next_request(c["id"]) for c in model.tool_uses()]
    capped = render(DEFAULT_MESSAGES["cap"], h.shell_tool, "cap", 3, 3)
    for result in results[:3]:
        check_ran(h, result)
    for result in results[3:]:
        check_refused(h, result, capped)
    assert len(results) == 5
    h.check_denials(outcome, [c["id"] for c in model.tool_uses()[3:]])
    (entry,) = without_time(h.incident_lines())
    assert entry == incident("cap", h.shell_tool, 3, 3, outcome.session or entry["agent"])


# -- results as progress (issues 25 and 32, docs/results.md) ---------------------------------
POLL_SCRIPT = 'n=$(cat polls 2>/dev/null || echo 0)\necho $((n + 1)) > polls\necho "done $n%"\n'
FROZEN_SCRIPT = 'echo ran >> frozen-runs\necho "job 7: 50% done"\n'
NOTES = "notes.txt"


def with_results(h: Harness, config: dict[str, Any] | None = None) -> None:
    """The default install (it said it added the post-tool hook), `config` if given, and
    the scripts the scenarios poll."""
    assert "results: " in h.installed_out, h.installed_out
    if config is not None:
        h.configure(config)
    (h.work / "poll.sh").write_text(POLL_SCRIPT)
    (h.work / "frozen.sh").write_text(FROZEN_SCRIPT)
    (h.work / NOTES).write_text("step 3 is blocked on the job\n")


def run_script(h: Harness, script: list[Block], final: str) -> tuple[Any, list[Any]]:
    """One run of `script`, then `final`: the outcome, and each call's result as the model
    got it (every call answered, the final text reached)."""
    with h.model([*script, final]) as model:
        outcome = h.run(model, "Poll the job until it is done, doing the steps between.")
    results = [model.result_in_next_request(c["id"]) for c in model.tool_uses()]
    assert len(results) == len(script)
    assert outcome.final == final
    return outcome, results


def check_one_duplicate(h: Harness, outcome: Any, count: int = 6, limit: int = 6) -> None:
    (entry,) = without_time(h.incident_lines())
    expected = incident("duplicate", h.shell_tool, count, limit, outcome.session or entry["agent"])
    assert entry == expected


def poll(h: Harness, script: str, i: int) -> Block:
    return h.shell(f"sh {script}", f"Poll the job, check {i}")


@scenario("moving_results")
def test_a_poll_whose_output_moves_runs_past_six_copies(harness: Harness) -> None:
    h = harness
    with_results(h)
    _, results = run_script(h, [poll(h, "poll.sh", i) for i in range(1, 11)], "Done.")
    for i, result in enumerate(results):
        check_ran(h, result)
        assert f"done {i}%" in result.text, result.text
    assert (h.work / "polls").read_text().strip() == "10"  # all ten really ran
    assert h.incident_lines() == []


@scenario("results")
def test_the_same_poll_frozen_is_refused_at_the_sixth(harness: Harness) -> None:
    # Seven copies: the 6th and 7th refused, two refusals in a row (no stop).
    h = harness
    with_results(h)
    outcome, results = run_script(h, [poll(h, "frozen.sh", i) for i in range(1, 8)], "Stuck.")
    # All seven results and the run's stderr on a failure: Qwen Code in CI once ran a 6th
    # copy, and the run left nothing to tell why (a result that moved, a prompt, a warning).
    seen = ["refused" if "Circuit breaker" in r.text else "ran" for r in results]
    said = ([r.text for r in results], outcome.stderr[-3000:])
    assert seen == ["ran"] * 5 + ["refused"] * 2, said
    for result in results[:5]:
        check_ran(h, result)
    for result in results[5:]:
        check_refused(h, result, h.duplicate())
    check_one_duplicate(h, outcome)
    assert side_lines(h.work / "frozen-runs") == ["ran"] * 5, said


@scenario("same_results")  # every copy's result back before the next copy
def test_an_interleaved_frozen_poller_is_refused_at_the_seventh_copy(harness: Harness) -> None:
    # A new call after each copy restarts SPEC's count every time; sameResultLimit counts
    # the copies whose result came back the same, new calls between or not: the 7th
    # follows six alike. (Every step is new: no block repeats, so no frozen cycle.)
    h = harness
    with_results(h, {"sameResultLimit": 6})
    steps = h.work / "steps"
    script: list[Block] = []
    for i in range(1, 9):
        script.append(poll(h, "frozen.sh", i))
        script.append(h.shell(f"echo step {i} >> {steps}", f"Do step {i}"))
    outcome, results = run_script(h, script, "Stuck.")
    assert side_lines(h.work / "frozen-runs") == ["ran"] * 6
    assert side_lines(steps) == [f"step {i}" for i in range(1, 9)]  # every new call ran
    polls, news = results[0::2], results[1::2]
    for result in [*polls[:6], *news]:
        check_ran(h, result)
    for result in polls[6:]:
        check_refused(h, result, h.duplicate())
    check_one_duplicate(h, outcome)


@scenario("moving_results")
def test_a_cycle_runs_on_while_a_result_moves_and_is_refused_frozen(harness: Harness) -> None:
    # SPEC rule 5 with the defaults. A read of the same notes alternated with a poll whose
    # output moves: four rounds (eight calls, more than three rounds) all run. Then the
    # frozen poll alternated with that read: a block of 2 calls repeated 3 rounds with
    # every result as the round before, so the call that would start a 4th round (the 7th
    # of this cycle) is refused; no call of it is a 6th copy (rule 4 sees 4 at most). (The
    # moving part ends on the poll: had it ended on the read, that read would have been
    # the cycle's first call, and its 7th the frozen part's 6th.)
    h = harness
    with_results(h)

    def read(i: int) -> Block:  # one key: its label is an annotation the breaker drops
        return h.shell(f"cat {NOTES}", f"Read my notes again ({i})")

    moving = [b for i in range(1, 5) for b in (read(i), poll(h, "poll.sh", i))]
    frozen = [b for i in range(5, 9) for b in (poll(h, "frozen.sh", i), read(i))]
    outcome, results = run_script(h, [*moving, *frozen[:7]], "Stuck.")
    for i, result in enumerate(results[:8]):
        check_ran(h, result)
        expected = "step 3 is blocked on the job" if i % 2 == 0 else f"done {i // 2}%"
        assert expected in result.text, result.text
    for result in results[8:14]:
        check_ran(h, result)
    cycle = render(DEFAULT_MESSAGES["cycle"], h.shell_tool, "duplicate", 3, 3, 2)
    check_refused(h, results[14], cycle)
    assert (h.work / "polls").read_text().strip() == "4"
    assert side_lines(h.work / "frozen-runs") == ["ran"] * 3
    check_one_duplicate(h, outcome, 3, 3)
