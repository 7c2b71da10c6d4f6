"""End to end: the plugin inside the real DeepSeek Harness runtime, driven by the fake model.

The runtime, its patch layers, its bash tool, the plugin and the guard process are all
real, the plugin and guard those of the installed wheel (tests/support/installed.py); only
the model is scripted (tests/support/fake_anthropic.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from dsh_circuit_breaker.harnesses.dsh import SKILL_NAME
from support.dsh_runtime import (
    DshSession,
    create_profile,
    dsh_command,
    dsh_runtime_available,
    insert_row,
    insert_row_for,
    override_row,
    python,
    wait_gone,
)
from support.fake_anthropic import FakeAnthropic, tool_results_of, tool_use
from support.installed import Installed
from support.polls import CONFIG, COPIES, poll, refused, runs

OVERRULE_PLUGIN = Path(__file__).parent / "support" / "dsh_overrule_plugin.mjs"

pytestmark = pytest.mark.timeout(180)  # each test boots the runtime (~8 s on a busy machine)


@pytest.fixture
def session(tmp_path: Path, installed: Installed) -> DshSession:
    require(dsh_runtime_available(), "the DeepSeek Harness runtime (deepseek-harness-sdk)")
    return DshSession(tmp_path)


def probe(step: int, side: Path) -> dict[str, Any]:
    """The original plugin's probe call; `description` changes every time, the command
    does not (and leaves a line in `side` each time it really runs)."""
    return tool_use(
        "bash", {"command": f"echo cbprobe4 >> {side}", "description": f"Run probe step {step}"}
    )


def denial(count: int, limit: int) -> str:
    return "Error: " + render(DEFAULT_MESSAGES["duplicate"], "bash", "duplicate", count, limit)


def ran(side: Path) -> int:
    return len(side.read_text().splitlines()) if side.exists() else 0


def incidents(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def stop_text(count: int, limit: int) -> str:
    return render(DEFAULT_MESSAGES["stop"], "bash", "duplicate", count, limit)


def turn_ends(events: list[dict[str, Any]]) -> list[Any]:
    """The reasons of the `turn/end` events in a session's events."""
    return [e["data"]["reason"] for e in events if e.get("type") == "turn/end"]


def results_logged(events: list[dict[str, Any]]) -> list[str]:
    """The texts of the tool results the session logged (`tool/result` events)."""
    return [
        "".join(block.get("text", "") for block in e["data"]["message"]["content"])
        for e in events
        if e.get("type") == "tool/result"
    ]


AGAIN = "A new task: just say done."


def test_a_call_repeated_forever_runs_five_times_then_the_agent_is_stopped(
    session: DshSession,
) -> None:
    side = session.work / "side.txt"
    log = session.root / "incidents.jsonl"
    session.add_patch("breaker.yml", insert_row({"python": python(), "incidentLog": str(log)}))
    steps = iter(range(1, 1000))

    def model(body: dict[str, Any]) -> Any:
        # The same call, whatever the results say; a person's next prompt gets an answer.
        return "Done." if AGAIN in json.dumps(body["messages"][-1]) else probe(next(steps), side)

    run = session.run([], after=model, more_prompts=[AGAIN])

    assert ran(side) == 5
    # The 6th and 7th are refused; the 8th is refused and the agent stopped: its turn ends
    # with no model request after that call (8 requests, then the next prompt's).
    first, second = run.results
    requests = run.model.model_requests
    assert len(requests) == 8 + 1
    assert AGAIN in json.dumps(requests[8]["messages"][-1])
    assert first.finish_reason == "aborted"
    assert turn_ends(first.events) == [
        {"kind": "aborted", "reason": {"kind": "hook", "reason": stop_text(3, 3)}}
    ]
    # The stopping call's refusal stays in the session's history: the session logs it,
    # and the next prompt's request carries it to the model.
    assert results_logged(first.events)[5:] == [denial(6, 6)] * 3
    results = run.model.tool_results()
    assert [r.is_error for r in results] == [False] * 5 + [True] * 3
    assert [r.text for r in results[5:]] == [denial(6, 6)] * 3
    # The session is not broken: the person's next prompt is answered (and starts the
    # agent afresh, resetOnUserPrompt).
    assert (second.finish_reason, second.final_response) == ("completed", "Done.")
    assert second.session_id == first.session_id
    lines = incidents(log)
    assert [line["kind"] for line in lines] == ["duplicate", "stop"]
    assert lines[0]["tool"] == "bash" and (lines[0]["count"], lines[0]["limit"]) == (6, 6)
    assert (lines[1]["count"], lines[1]["limit"]) == (3, 3)
    assert {line["agent"] for line in lines} == {first.session_id}
    assert "cbprobe4" not in log.read_text()  # no argument content on disk
    assert [s["ok"] for s in run.starts()] == [True]
    assert run.warnings() == []


def test_the_probe_on_the_default_install_its_sixth_call_is_denied(
    session: DshSession, installed: Installed
) -> None:
    # The original plugin's contract, on the install a DSH user makes (`install dsh`, no
    # config): asked to run `echo cbprobe4` ten times, "the sixth call was denied".
    install_dsh(installed, session)
    side = session.work / "side.txt"
    run = session.run([probe(i, side) for i in range(1, 11)])

    assert ran(side) == 5
    results = run.model.tool_results()
    assert [r.is_error for r in results] == [False] * 5 + [True] * 2
    assert results[5].text == denial(6, 6)  # the sixth: 6 copies, limit 6
    # The 8th, the third refusal in a row, stops the agent: logged, sent to no model.
    assert results_logged(run.result.events)[5:] == [denial(6, 6)] * 3
    assert len(run.model.model_requests) == 8
    assert run.result.finish_reason == "aborted"
    assert turn_ends(run.result.events) == [
        {"kind": "aborted", "reason": {"kind": "hook", "reason": stop_text(3, 3)}}
    ]


TITLE_PROMPT = "Create a concise title"


def headless(
    session: DshSession, model: FakeAnthropic, *mode: str
) -> subprocess.CompletedProcess[str]:
    """`dsh --profile headless [--json] TASK`, DSH's own one-task CLI, against `model`."""
    env = {
        **os.environ,
        "DSH_HOME": str(session.home),
        "DSH_TELEMETRY_DISABLED": "1",
        "DSH_PERMISSION_MODE": "danger-full-access",  # no sandbox backend here
        "DSH_CIRCUIT_BREAKER_PYTHON": "",
        "DEEPSEEK_BASE_URL": model.url + "/anthropic",
        "DEEPSEEK_API_KEY": "fake-key",
    }
    patches = [arg for path in session.patches for arg in ("--patch", str(path))]
    return subprocess.run(
        [*dsh_command(), "--profile", "headless", *patches, *mode, "Run the probe."],
        env=env,
        cwd=session.work,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_headless_dsh_ends_the_task_with_the_stop_reason(session: DshSession) -> None:
    side = session.work / "side.txt"
    session.add_patch("breaker.yml", insert_row({"python": python()}))
    steps = iter(range(1, 1000))

    def model(body: dict[str, Any]) -> Any:
        if TITLE_PROMPT in json.dumps(body.get("system")):  # the session's title, on the side
            return "Probe"
        return probe(next(steps), side)

    with FakeAnthropic([], after=model) as fake:
        streamed = headless(session, fake, "--json")
        agent_requests = [
            b for b in fake.model_requests if TITLE_PROMPT not in json.dumps(b.get("system"))
        ]
        assert len(agent_requests) == 8  # none after the stopping call
        plain = headless(session, fake)
    assert ran(side) == 5 + 5  # two tasks, two sessions: each agent ran the call 5 times

    events = [json.loads(line) for line in streamed.stdout.splitlines()]
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["status"] for r in results] == ["completed"] * 5 + ["error"] * 3
    assert [r["result"] for r in results[5:]] == [denial(6, 6)] * 3
    assert events[-2:] == [
        {
            "type": "status",
            "phase": "turn_end",
            "turn": 1,
            "reason": {"kind": "aborted", "reason": {"kind": "hook", "reason": stop_text(3, 3)}},
        },
        {"type": "final", "text": ""},
    ]
    assert (streamed.returncode, streamed.stderr) == (1, "")
    # Without --json: the (empty) final message and exit status 1, nothing on stderr.
    assert (plain.returncode, plain.stdout, plain.stderr) == (1, "\n", "")


def test_stop_after_denials_zero_refuses_and_never_stops(session: DshSession) -> None:
    side = session.work / "side.txt"
    log = session.root / "incidents.jsonl"
    config = {"python": python(), "incidentLog": str(log), "stopAfterDenials": 0}
    session.add_patch("breaker.yml", insert_row(config))
    run = session.run([probe(i, side) for i in range(1, 11)])

    assert run.result.final_response == "All done."
    assert run.result.finish_reason == "completed"
    # The original plugin's probe: "the sixth call was denied", and every one after it.
    assert ran(side) == 5
    results = run.model.tool_results()
    assert [r.is_error for r in results] == [False] * 5 + [True] * 5
    assert [r.text for r in results[5:]] == [denial(6, 6)] * 5
    assert [line["kind"] for line in incidents(log)] == ["duplicate"]


def test_override_row_in_later_layer_configures_installed_plugin(
    session: DshSession, installed: Installed
) -> None:
    # Installed the documented way, then configured the documented way: a later layer's
    # `- id: circuit-breaker` row, which replaces the entry's whole config (so the
    # interpreter comes from the sidecar that install wrote).
    install_dsh(installed, session)
    (session.home / "cordis.patch.yml").write_text(override_row({"duplicateLimit": 4}))
    side = session.work / "side.txt"
    run = session.run([probe(i, side) for i in range(1, 6)])

    assert ran(side) == 3  # the 4th copy is the limit's
    assert [r.is_error for r in run.model.tool_results()] == [False] * 3 + [True] * 2
    assert run.model.tool_results()[3].text == denial(4, 4)
    start = run.starts()[0]
    assert start["config"]["duplicateLimit"] == 4
    assert start["python"] == python()  # from the sidecar: the override dropped `python`


def test_healthy_edit_test_cycle_is_never_denied(session: DshSession) -> None:
    session.add_patch("breaker.yml", insert_row({"python": python()}))
    app = str(session.work / "app.txt")
    test_cmd = {"command": "cat app.txt", "description": "Run the tests"}
    turns: list[Any] = [tool_use("write", {"file_path": app, "content": "version 1\n"})]
    for version in range(1, 10):  # nine identical test runs, more than duplicateLimit (6)
        turns.append(tool_use("bash", test_cmd))
        edit = {"file_path": app, "old_string": f"version {version}", "new_string": ""}
        edit["new_string"] = f"version {version + 1}"
        turns.append(tool_use("edit", edit))
    run = session.run(turns)

    results = run.model.tool_results()
    assert len(results) == 19
    assert [r for r in results if r.is_error] == []
    tests = results[1::2]
    assert [r.text.strip() for r in tests] == [f"version {v}" for v in range(1, 10)]
    assert run.starts()[0]["ok"]


def test_with_result_progress_a_moving_poll_runs_on_and_a_frozen_one_is_refused(
    session: DshSession,
) -> None:
    # The plugin's tools/post-execute stage reports each allowed call's result.
    session.add_patch("breaker.yml", insert_row({"python": python(), **CONFIG}))
    moving, frozen = session.work / "moving.count", session.work / "frozen.count"
    turns = [
        tool_use("bash", {"command": poll(c, c is moving), "description": "Poll"})
        for c in [moving] * COPIES + [frozen] * COPIES
    ]  # each call its own id
    run = session.run(turns, prompt="Poll the two jobs.")

    results = run.model.tool_results()
    assert [r.text.strip() for r in results[:COPIES]] == [f"step {n}" for n in range(COPIES)]
    assert runs(moving) == COPIES
    assert [r.text == denial(6, 6) for r in results[COPIES:]] == refused()
    assert [r.text.strip() for r in results[COPIES:]][:5] == ["step"] * 5
    assert runs(frozen) == 5
    assert run.warnings() == []


def test_denial_is_final_even_if_an_outer_listener_overrules_it(session: DshSession) -> None:
    overruled = session.root / "overruled.txt"
    # Inserted first, so its listener wraps ours and sees our decision come back.
    session.add_patch(
        "overrule.yml",
        insert_row_for(OVERRULE_PLUGIN, {"path": str(overruled)}, "test-overrule"),
    )
    session.add_patch("breaker.yml", insert_row({"python": python(), "duplicateLimit": 3}))
    side = session.work / "side.txt"
    run = session.run([probe(i, side) for i in range(1, 5)])

    assert len(overruled.read_text().splitlines()) == 2  # it did rewrite both denials
    assert [r.is_error for r in run.model.tool_results()] == [False, False, True, True]
    assert ran(side) == 2
    assert run.model.tool_results()[2].text == denial(3, 3)


def test_cap_refuses_every_further_call_but_exempt_tools_pass(session: DshSession) -> None:
    session.add_patch("breaker.yml", insert_row({"python": python(), "maxCallsPerAgent": 3}))
    calls: list[Any] = [
        tool_use("bash", {"command": f"echo {i}", "description": "Count"}) for i in range(5)
    ]
    todo = {"todos": [{"content": "write the report", "status": "pending"}]}
    calls.append(tool_use("todo_write", todo))
    run = session.run(calls)

    results = run.model.tool_results()
    assert [r.is_error for r in results[:5]] == [False] * 3 + [True] * 2
    cap = render(DEFAULT_MESSAGES["cap"], "bash", "cap", 3, 3)
    assert results[3].text == "Error: " + cap
    assert not results[5].text.startswith("Error: Circuit breaker")  # exempt by default


def test_guard_killed_mid_run_is_restarted_once_then_calls_pass_unchecked(
    session: DshSession,
) -> None:
    session.add_patch("breaker.yml", insert_row({"python": python(), "duplicateLimit": 4}))
    side = session.work / "side.txt"
    killed: list[int] = []

    def kill_guard_then(step: int) -> Any:
        def turn(body: dict[str, Any]) -> Any:
            pid = session_starts(session)[len(killed)]["pid"]
            os.kill(pid, signal.SIGKILL)
            assert wait_gone(pid), "the runtime never reaped its guard"
            killed.append(pid)
            return probe(step, side)

        return turn

    turns: list[Any] = [probe(1, side), probe(2, side)]
    turns += [kill_guard_then(3), probe(4, side), probe(5, side), probe(6, side)]
    turns += [kill_guard_then(7)] + [probe(i, side) for i in range(8, 12)]
    run = session.run(turns)

    assert run.result.final_response == "All done."
    errors = [r.is_error for r in run.model.tool_results()]
    # Guard A allowed 1-2 and died. Guard B (the one restart, fresh state) allowed 3-5 and
    # denied 6. B died; with no restart left, 7-11 pass unchecked instead of hanging.
    assert errors == [False] * 5 + [True] + [False] * 5
    assert ran(side) == 10
    starts = run.starts()
    assert [s["ok"] for s in starts] == [True, True]
    assert [s["pid"] for s in starts] == killed
    warnings = "\n".join(run.warnings())
    assert "guard process exited" in warnings
    assert "restarting the guard process" in warnings
    assert "all further tool calls are allowed unchecked" in warnings


def test_hung_guard_costs_two_budgets_then_a_fresh_guard_takes_over(
    session: DshSession,
) -> None:
    session.add_patch(
        "breaker.yml", insert_row({"python": python(), "duplicateLimit": 4, "timeoutMs": 400})
    )
    side = session.work / "side.txt"
    stopped: list[int] = []

    def stop_guard_then(step: int) -> Any:
        def turn(body: dict[str, Any]) -> Any:
            pid = session_starts(session)[0]["pid"]
            os.kill(pid, signal.SIGSTOP)  # alive but never answers
            stopped.append(pid)
            return probe(step, side)

        return turn

    turns = [probe(1, side), stop_guard_then(2)] + [probe(i, side) for i in range(3, 8)]
    try:
        run = session.run(turns)
    finally:
        for pid in stopped:  # the plugin SIGKILLs it; make sure, and never leave it stopped
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    errors = [r.is_error for r in run.model.tool_results()]
    # 1 by guard A; 2 timed out (allowed, A kept: it may only be slow); 3 timed out too,
    # so A is hung and killed; B allowed 4-6 and denied 7.
    assert errors == [False] * 6 + [True]
    assert ran(side) == 6
    warnings = "\n".join(run.warnings())
    assert "did not answer within 400 ms; the call is allowed, the guard is kept" in warnings
    assert "did not answer within 400 ms, twice in a row" in warnings
    assert [s["ok"] for s in run.starts()] == [True, True]
    assert run.seconds < 60


def test_missing_guard_interpreter_fails_open_with_warnings(session: DshSession) -> None:
    session.add_patch(
        "breaker.yml", insert_row({"python": "/nonexistent/python3", "duplicateLimit": 3})
    )
    side = session.work / "side.txt"
    run = session.run([probe(i, side) for i in range(1, 6)])

    assert run.result.final_response == "All done."
    assert ran(side) == 5
    assert not any(r.is_error for r in run.model.tool_results())
    warnings = "\n".join(run.warnings())
    assert "/nonexistent/python3" in warnings
    assert "all further tool calls are allowed unchecked" in warnings


def test_bad_config_fails_loudly_at_startup_naming_the_key(session: DshSession) -> None:
    session.add_patch("breaker.yml", insert_row({"python": python(), "duplicateLimt": 3}))
    run = session.run(["Nothing to do."])

    stderr = "\n".join(run.stderr)
    assert "did not activate" in stderr
    assert "unknown config key 'duplicateLimt'" in stderr


@pytest.mark.parametrize("reset", [True, False])
def test_a_new_user_prompt_starts_the_agent_afresh(session: DshSession, reset: bool) -> None:
    session.add_patch(
        "breaker.yml",
        insert_row({"python": python(), "duplicateLimit": 3, "resetOnUserPrompt": reset}),
    )
    side = session.work / "side.txt"
    first = [probe(i, side) for i in range(1, 4)] + ["Stopped: the breaker refused it."]
    second = [probe(i, side) for i in range(4, 6)] + ["Done again."]
    run = session.run(first + second, more_prompts=["Try it once more."])

    assert run.results[0].session_id == run.results[1].session_id
    assert run.results[0].final_response == "Stopped: the breaker refused it."
    errors = [r.is_error for r in run.model.tool_results()]
    if reset:  # the second prompt's two calls run again
        assert errors == [False, False, True, False, False]
        assert run.results[1].final_response == "Done again."
    else:
        # One window for the whole session, and one run of refusals: the second prompt's
        # two calls are the agent's 2nd and 3rd refusals in a row, and the 3rd stops it
        # (its refusal is logged, but no model request follows it).
        assert errors == [False, False, True, True]
        assert results_logged(run.results[1].events)[-1] == denial(3, 3)
        assert run.results[1].finish_reason == "aborted"


STOPPED_CHILD = "was stopped before it finished."


def test_looping_subagent_is_stopped_while_its_parent_goes_on(session: DshSession) -> None:
    """DSH's `subagent` tool starts a child agent with its own session id. Child and parent
    run the very same command; only the child repeats it past the limit, and only the
    child is refused, then stopped: state is per agent, keyed by the agent's id. The
    parent is told the child stopped and goes on."""
    log = session.root / "incidents.jsonl"
    session.add_patch(
        "breaker.yml",
        insert_row({"python": python(), "duplicateLimit": 4, "incidentLog": str(log)}),
    )
    side = session.work / "side.txt"
    command = f"echo cbprobe4 >> {side}"
    owner: dict[str, str] = {}
    pause = threading.Event()  # never set: a short wait per parent step

    def call(who: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        block = tool_use(name, arguments)
        owner[block["id"]] = who
        return block

    def model(body: dict[str, Any]) -> Any:
        done = len(tool_results_of(body))
        if "CHILD-TASK" in _first_user_text(body):  # the same call forever
            return call("child", "bash", {"command": command, "description": f"c{done}"})
        if done == 0:
            task = {"description": "probe loop", "prompt": "CHILD-TASK: run the probe."}
            return call("parent", "subagent", task)
        if done <= 3:
            return call("parent", "bash", {"command": command, "description": f"p{done}"})
        if STOPPED_CHILD in json.dumps(body["messages"]):
            return "All done."
        if done < 80:  # wait for the child, a new command each time
            pause.wait(0.2)
            return call("parent", "bash", {"command": f"echo waiting {done}", "description": "W"})
        return "Gave up waiting."

    run = session.run([], after=model)

    children = [n.payload for n in run.result.notifications if n.method == "subagent.started"]
    assert len(children) == 1
    child_id = children[0]["childSessionId"]
    assert child_id != run.result.session_id
    by_owner: dict[str, list[bool]] = {"child": [], "parent": []}
    for result in run.model.tool_results():
        by_owner[owner[result.call_id]].append(result.is_error)
    # The child: 3 run, the 4th and 5th refused, the 6th refused and stopped; it is not
    # asked again (its six requests; the 6th refusal is in its log, not in a request).
    assert by_owner["child"] == [False] * 3 + [True] * 2
    child_requests = [b for b in run.model.model_requests if "CHILD-TASK" in _first_user_text(b)]
    assert len(child_requests) == 6
    assert not any(by_owner["parent"])  # its own three identical calls all ran
    assert ran(side) == 6
    # The parent is told, and goes on to finish its turn.
    assert run.result.final_response == "All done."
    events = [n.payload for n in run.result.notifications if n.method == "session.event"]
    child_ends = [
        e["event"]["data"]["reason"]
        for e in events
        if e["sessionId"] == child_id and e["event"]["type"] == "turn/end"
    ]
    assert child_ends == [
        {"kind": "aborted", "reason": {"kind": "hook", "reason": stop_text(3, 3)}}
    ]
    (finished,) = [n.payload for n in run.result.notifications if n.method == "subagent.finished"]
    assert (finished["childSessionId"], finished["stopReason"]) == (child_id, "aborted")
    lines = incidents(log)
    assert [(line["kind"], line["agent"]) for line in lines] == [
        ("duplicate", child_id),
        ("stop", child_id),  # the child's third refusal in a row
    ]


def _first_user_text(body: dict[str, Any]) -> str:
    for message in body.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def session_starts(session: DshSession) -> list[dict[str, Any]]:
    path = session.marker_file
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def install_dsh(installed: Installed, session: DshSession, *more: str) -> None:
    """`install dsh` into the session's DSH home (a profile DSH created), run from the
    installed wheel's venv."""
    create_profile(session.home, "sdk")
    home = ["--dsh-home", str(session.home), "--profile", "sdk"]
    done = installed.run("install", "dsh", *home, *more)
    assert done.returncode == 0, done.stderr


def test_supervision_skill_is_listed_and_loads_in_dsh(
    session: DshSession, installed: Installed
) -> None:
    install_dsh(installed, session, "--skill")
    call = tool_use("skill", {"name": SKILL_NAME})
    run = session.run([call])

    assert SKILL_NAME in json.dumps(run.model.requests[0])  # offered to the model
    [result] = run.model.tool_results()
    assert not result.is_error
    assert f'<skill_content name="{SKILL_NAME}">' in result.text
    assert "interrupt_agent" in result.text and "record the gap" in result.text
