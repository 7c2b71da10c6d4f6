"""The real Cline CLI (`cline --json PROMPT`, pinned in tests/e2e/package.json) with the
plugin the installed wheel's `dsh-circuit-breaker install cline` (tests/support/installed.py)
puts into its plugins directory, against a
scripted fake model speaking OpenAI Chat Completions on 127.0.0.1
(tests/support/fake_openai.py), set up as a user would: `cline auth -p openai -b URL`.

Each scenario asserts what really ran (a side-effect file the commands append to) and what
the model was sent back (the `tool` messages of the next request, from the server's log).

Cline has a loop guard of its own: five consecutive identical calls end the run, and so do
three consecutive iterations whose every call failed (a refusal is a failure). The
breaker's own work shows where Cline's does not reach: calls repeated with others in
between.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from support.fake_openai import FakeOpenAI, function_call
from support.harness_run import edit_test_project, json_lines, run_json_lines, side_lines
from support.installed import Installed
from support.polls import CONFIG, poll, refused, runs

CLINE = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "cline"
pytestmark = [
    pytest.mark.timeout(300),  # each test runs the CLI once
    # Cline runs side by side (xdist workers) let through calls the breaker refuses when they
    # run one at a time: with -n 3, 3 of 4 runs of the cycle tests failed, none in one
    # process. Until what the runs share is found, they keep to one worker, in turn.
    pytest.mark.xdist_group("cline-cli"),
]


@pytest.fixture
def cline() -> Path:
    require(CLINE.exists(), "the Cline CLI (tests/e2e: npm ci)")
    return CLINE


def cline_env(installed: Installed) -> dict[str, str]:
    """A private HOME; no hub daemon (the local session backend), no telemetry."""
    home = installed.home
    env = {k: v for k, v in installed.env.items() if not k.startswith(("CLINE_", "OPENAI_"))}
    env.update(CLINE_SESSION_BACKEND_MODE="local", CLINE_NO_AUTO_UPDATE="1")
    settings = home / ".cline" / "data" / "settings"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "global-settings.json").write_text(
        json.dumps({"telemetryOptOut": True, "autoUpdateEnabled": False})
    )
    return env


class Run:
    """`cline --json` in a private HOME with our plugin installed by our own CLI."""

    def __init__(self, installed: Installed, config: dict[str, Any] | None = None) -> None:
        self.home = home = installed.home
        self.work = home / "work"
        self.work.mkdir()
        self.env = cline_env(installed)
        if config is not None:
            path = home / "breaker.json"
            path.write_text(json.dumps(config))
            self.env["DSH_CIRCUIT_BREAKER_CONFIG"] = str(path)
        done = installed.run("install", "cline", env=self.env, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        plugin = home / ".cline" / "plugins" / "dsh-circuit-breaker.js"
        assert str(plugin) in done.stdout
        # The guard the plugin starts is the installed interpreter, not this checkout's.
        assert str(installed.python) in plugin.read_text()
        self.incidents = home / "state" / "dsh-circuit-breaker" / "incidents.jsonl"

    def __call__(self, model: FakeOpenAI, prompt: str) -> list[dict[str, Any]]:
        auth = [str(CLINE), "auth", "-p", "openai", "-k", "sk-fake", "-m", "fake-model"]
        configured, _ = run_json_lines([*auth, "-b", model.url], self.env, self.work, 120)
        assert configured.returncode == 0, configured.stdout + configured.stderr
        done, events = run_json_lines([str(CLINE), "--json", prompt], self.env, self.work)
        assert model.errors == []
        assert [e for e in events if e["type"] == "run_result"], done.stdout[-2000:] + done.stderr
        return events

    def incident_lines(self) -> list[dict[str, Any]]:
        return json_lines(self.incidents)


def run_commands(*commands: str) -> dict[str, Any]:
    return function_call("run_commands", {"commands": list(commands)})


def refusal(kind: str, count: int, limit: int) -> str:
    """The tool result Cline gives the model for a call our plugin skipped."""
    text = render(DEFAULT_MESSAGES[kind], "run_commands", kind, count, limit)
    return json.dumps({"error": text}, separators=(",", ":"))


# Rule 5's refusal of two calls in turn that answer the same every round: at the 7th.
CYCLE_TEXT = render(DEFAULT_MESSAGES["cycle"], "run_commands", "duplicate", 3, 3, 2)
CYCLE = json.dumps({"error": CYCLE_TEXT}, separators=(",", ":"))
# Where a model that alternates `a` and `b` whatever it is told is refused (0-based): the
# 7th call (the frozen cycle); then, the count of each call going on under resetOnNewCall,
# the 12th (`b`'s 6th copy), and from the 14th on. What runs between is the other call.
ALTERNATING_REFUSED = {6: CYCLE, 11: refusal("duplicate", 6, 6)}
ALTERNATING_RAN = ["a", "b"] * 3 + ["b", "a", "b", "a", "a"]  # calls 1-6, 8-11, 13


def results_in_next_requests(model: FakeOpenAI, calls: list[dict[str, Any]]) -> list[str]:
    return [model.result_in_next_request(call["id"]).text for call in calls]


def finish_reason(events: list[dict[str, Any]]) -> str:
    (result,) = [e for e in events if e["type"] == "run_result"]
    return str(result["finishReason"])


def root_agent(events: list[dict[str, Any]]) -> str:
    (agent,) = {
        e["agentId"] for e in events if e["type"] == "hook_event" and e.get("parentAgentId") is None
    }
    return str(agent)


def stop_text(count: int, limit: int) -> str:
    return render(DEFAULT_MESSAGES["stop"], "run_commands", "duplicate", count, limit)


def loop_ends(home: Path) -> list[dict[str, Any]]:
    """Cline's log lines for runs that ended by an error or a stop, in order: its
    `errorName` and `errorMessage` (~/.cline/data/logs/cline.log, pino JSON lines)."""
    lines = json_lines(home / ".cline" / "data" / "logs" / "cline.log")
    return [line for line in lines if line.get("msg") == "Agent loop caught error"]


def session_messages(home: Path) -> list[dict[str, Any]]:
    """The main agent's conversation as Cline saved it (its session's messages file)."""
    (path,) = (home / ".cline" / "data" / "sessions").glob("*/*.messages.json")
    messages: list[dict[str, Any]] = json.loads(path.read_text())["messages"]
    return messages


def results_saved_for(messages: list[dict[str, Any]], call_id: str) -> list[Any]:
    return [
        block
        for message in messages
        for block in message["content"]
        if block.get("type") == "tool_result" and block.get("tool_use_id") == call_id
    ]


@pytest.mark.parametrize("stop_after", [None, 2, 0])
def test_a_repeated_cycle_is_refused_then_the_breaker_stops_the_run(
    cline: Path, installed: Installed, stop_after: int | None
) -> None:
    # Two calls in turn: never five identical in a row, so Cline's own guard lets it go on.
    # Each answers the same every time: a frozen cycle, refused at its 7th call (rule 5).
    run = Run(installed, None if stop_after is None else {"stopAfterDenials": stop_after})
    side = run.work / "side.txt"
    calls = [run_commands(f"echo {'ab'[i % 2]} >> {side}") for i in range(24)]
    with FakeOpenAI([*calls, "All attempted."]) as model:
        events = run(model, "Run the probe.")
    assert side_lines(side) == ALTERNATING_RAN
    refusals = 3 if stop_after is None else stop_after
    last = 13 + (refusals or 3)  # the call that ended the run (a stop, or Cline's own limit)
    texts = results_in_next_requests(model, calls[: last - 1])
    assert {i: texts[i] for i in ALTERNATING_REFUSED} == ALTERNATING_REFUSED
    assert texts[13:] == [refusal("duplicate", 6, 6)] * (last - 14)
    assert [i for i, t in enumerate(texts[:13]) if "Circuit breaker" in t] == [6, 11]
    # No model request after the call that ended the run.
    assert len(model.model_requests) == last
    assert finish_reason(events) == "aborted"
    assert events[-1] == {
        "ts": events[-1]["ts"],
        "type": "run_aborted",
        "reason": "external_abort",
        "message": "aborted by another client",
    }
    (ended,) = loop_ends(run.home)
    saved = session_messages(run.home)
    incident, *stop = run.incident_lines()
    assert (incident["kind"], incident["tool"], incident["count"]) == (
        "duplicate",
        "run_commands",
        3,  # the first refusal, the cycle's: 3 rounds
    )
    assert incident["agent"] == root_agent(events)
    if refusals:
        # Our stop: the run ends before that call runs; Cline logs the stop text as the
        # run's end and saves no result for it (the model is never asked again).
        assert (ended["errorName"], ended["errorMessage"]) == (
            "ControlledStopError",
            stop_text(refusals, refusals),
        )
        assert results_saved_for(saved, calls[last - 1]["id"]) == []
        assert [(s["kind"], s["count"], s["limit"]) for s in stop] == [("stop", refusals, refusals)]
    else:
        # stopAfterDenials 0: the old behaviour. Cline's own limit of three failed
        # iterations in a row ends the run, after the third refusal reached the history.
        assert (ended["errorName"], ended["errorMessage"]) == (
            "AgentRuntimeAbortError",
            "max consecutive mistakes reached (3) in yolo mode",
        )
        assert len(results_saved_for(saved, calls[last - 1]["id"])) == 1
        assert stop == []


@pytest.mark.parametrize("limit", [None, 4])
def test_identical_calls_in_a_row(cline: Path, installed: Installed, limit: int | None) -> None:
    # The probe, ten identical calls: Cline's own guard ends the run at the fifth, before
    # the breaker's default refusal of the sixth; with duplicateLimit 4 the breaker refuses
    # the fourth, first.
    run = Run(installed, None if limit is None else {"duplicateLimit": limit})
    side = run.work / "side.txt"
    calls = [run_commands(f"echo cbprobe4 >> {side}") for _ in range(10)]
    with FakeOpenAI([*calls, "All ten attempted."]) as model:
        events = run(model, "Run the cbprobe4 probe ten times.")
    stopped = [e for e in events if "5 consecutive identical calls" in json.dumps(e)]
    assert stopped and finish_reason(events) == "aborted"
    assert len(model.model_requests) == 5
    if limit is None:
        assert side_lines(side) == ["cbprobe4"] * 4
        assert run.incident_lines() == []
    else:
        assert side_lines(side) == ["cbprobe4"] * 3
        assert results_in_next_requests(model, calls[3:4]) == [refusal("duplicate", 4, 4)]
        assert [i["count"] for i in run.incident_lines()] == [4]


def test_with_result_progress_a_moving_poll_runs_on_and_a_frozen_one_is_refused(
    cline: Path, installed: Installed
) -> None:
    # The plugin's afterTool reports each allowed call's result (by default). Cline ends a
    # run at the fifth identical call in a row itself, so duplicateLimit 4 here: four copies
    # of each, the frozen poll's 4th refused.
    run = Run(installed, {**CONFIG, "duplicateLimit": 4})
    moving, frozen = run.work / "moving.count", run.work / "frozen.count"
    calls = [run_commands(poll(moving, True)) for _ in range(4)]
    calls += [run_commands(poll(frozen, False)) for _ in range(4)]
    with FakeOpenAI([*calls, "Polled."]) as model:
        events = run(model, "Poll the two jobs.")
    assert finish_reason(events) == "completed"
    texts = results_in_next_requests(model, calls)
    assert [f"step {n}" in t for n, t in enumerate(texts[:4])] == [True] * 4
    assert runs(moving) == 4
    assert [t == refusal("duplicate", 4, 4) for t in texts[4:]] == refused(4, 4)
    assert runs(frozen) == 3
    assert [i["count"] for i in run.incident_lines()] == [4]


def test_healthy_edit_test_cycle_is_never_denied(cline: Path, installed: Installed) -> None:
    run = Run(installed)
    app = edit_test_project(run.work)
    rounds = 10
    script: list[Any] = [function_call("read_files", {"files": [{"path": str(app)}]})]
    for i in range(1, rounds + 1):
        edit = {"path": str(app), "old_text": f"value = {i - 1}", "new_text": f"value = {i}"}
        script.append(function_call("editor", edit))
        script.append(run_commands("python3 check.py"))
    with FakeOpenAI([*script, "All green after ten rounds."]) as model:
        events = run(model, "Fix the value, test after each edit.")
    assert finish_reason(events) == "completed"
    texts = [r.text for r in model.tool_results()]
    assert len(texts) == 1 + 2 * rounds
    assert not [t for t in texts if "Circuit breaker" in t]
    assert side_lines(run.work / "test-runs.log") == [f"value = {i}" for i in range(1, rounds + 1)]
    assert run.incident_lines() == []


SUBAGENT_MARK = "SUBAGENT-TASK: run the two loop commands in turn."


def is_child(body: dict[str, Any]) -> bool:
    """A request of the subagent: its messages carry the task the parent gave it."""
    return any(SUBAGENT_MARK in json.dumps(m.get("content")) for m in body["messages"])


def test_a_looping_subagent_is_stopped_while_its_parent_goes_on(
    cline: Path, installed: Installed
) -> None:
    run = Run(installed)
    side = run.work / "side.txt"

    def loop(i: int, who: str) -> dict[str, Any]:
        return run_commands(f"echo {'ab'[i % 2]} >> {side}  # {who}")

    def respond(body: dict[str, Any]) -> Any:
        done = sum(1 for m in body["messages"] if m.get("role") == "tool")
        if is_child(body):
            return loop(done, "child") if done < 40 else "Subagent: stopped."
        if done == 0:  # the parent: delegate, then run the very same cycle itself
            task = {"systemPrompt": "You run commands.", "task": SUBAGENT_MARK}
            return function_call("spawn_agent", task)
        # Three rounds of the same cycle: as many as may run, for an agent of its own.
        return loop(done - 1, "parent") if done <= 6 else "Parent: done."

    with FakeOpenAI([], after=respond) as model:
        events = run(model, "PARENT-TASK: delegate the loop, then run it yourself.")
    calls = [c for c in model.tool_uses() if c["name"] == "run_commands"]
    child = [c for c in calls if c["input"]["commands"][0].endswith("# child")]
    parent = [c for c in calls if c["input"]["commands"][0].endswith("# parent")]
    # The child: refused at its 7th (the frozen cycle) and 12th, then the 14th and 15th,
    # and the 16th stops it (its third refusal in a row; Cline's own limit for a subagent
    # is six), and it is not asked again.
    assert len(child) == 16
    child_texts = results_in_next_requests(model, child[:15])
    assert {i: child_texts[i] for i in ALTERNATING_REFUSED} == ALTERNATING_REFUSED
    assert [i for i, t in enumerate(child_texts) if "Circuit breaker" in t] == [6, 11, 13, 14]
    assert child_texts[13:] == [refusal("duplicate", 6, 6)] * 2
    assert len([b for b in model.model_requests if is_child(b)]) == 16
    # The parent gets the child's end as spawn_agent's result, and goes on: it ran the
    # same two commands in turn six times, an agent of its own, never refused.
    (spawn,) = [c for c in model.tool_uses() if c["name"] == "spawn_agent"]
    (spawned_text,) = [r.text for r in model.tool_results() if r.call_id == spawn["id"]]
    spawned = json.loads(spawned_text)
    assert (spawned["finishReason"], spawned["iterations"]) == ("aborted", 16)
    assert len(parent) == 6
    assert not [t for t in results_in_next_requests(model, parent) if "Circuit breaker" in t]
    assert finish_reason(events) == "completed"
    assert len(side_lines(side)) == 11 + 6  # what ran: the child's 11, the parent's 6
    # The child's first duplicate and its stop; Cline logs the stop text as its run's end.
    incident, stop = run.incident_lines()
    assert (incident["kind"], stop["kind"]) == ("duplicate", "stop")
    (sub,) = {e["agentId"] for e in events if e["type"] == "hook_event" and e["parentAgentId"]}
    assert incident["agent"] == stop["agent"] == f"{root_agent(events)}/{sub}"
    (ended,) = loop_ends(run.home)
    assert (ended["agentId"], ended["errorMessage"]) == (sub, stop_text(3, 3))


def test_cap_text_reaches_the_model(cline: Path, installed: Installed) -> None:
    run = Run(installed, {"maxCallsPerAgent": 3, "window": 6})
    side = run.work / "side.txt"
    calls = [run_commands(f"echo {i} >> {side}") for i in range(5)]
    with FakeOpenAI([*calls, "Out of calls."]) as model:
        run(model, "Do five different things.")
    assert side_lines(side) == ["0", "1", "2"]
    assert results_in_next_requests(model, calls[3:]) == [refusal("cap", 3, 3)] * 2


def test_the_leads_run_on_its_teammates_report_keeps_counting(
    cline: Path, installed: Installed
) -> None:
    # Agent teams (on by default): the lead hands a teammate a task to run in the
    # background, works on, and ends its run; Cline then starts the lead's next run by
    # itself with the teammate's report. That run is no prompt of the person's (issue 24):
    # the lead's count goes on.
    run = Run(installed)
    side = run.work / "side.txt"
    cycle = [run_commands(f"echo {w} >> {side}") for _ in range(3) for w in "ab"]
    after = [run_commands(f"echo {w} >> {side}") for w in "aba"]
    lead = [
        function_call("team_spawn_teammate", {"agentId": "helper", "rolePrompt": "You help."}),
        function_call(
            "team_run_task", {"agentId": "helper", "task": "Say hi.", "runMode": "async"}
        ),
        *cycle,
        "Waiting for the helper.",
        *after,
        "All done.",
    ]
    turns = iter(lead)

    def respond(body: dict[str, Any]) -> Any:
        system = [m for m in body.get("messages") or [] if m.get("role") == "system"]
        if "You help." in json.dumps(system):
            return "Hi from the helper."
        return next(turns, "All done.")

    with FakeOpenAI([], after=respond) as model:
        events = run(model, "Spawn a helper, then run the commands.")
        results = results_in_next_requests(model, after)
    reports = [m for body in model.model_requests for m in body.get("messages") or []]
    assert any("System-delivered teammate async run updates" in json.dumps(m) for m in reports)
    # Three rounds of `a` `b` ran, each answering the same: the next run's first call, an
    # `a`, would start a 4th round, and is refused (rule 5); a reset would have let it run.
    # Then `b` and `a` are no longer the cycle's next: they run.
    assert side_lines(side) == ["a", "b"] * 3 + ["b", "a"]
    assert results[0] == CYCLE
    assert not [t for t in results[1:] if "Circuit breaker" in t]
    assert finish_reason(events) == "completed"
