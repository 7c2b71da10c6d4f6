"""The real Claude Code CLI, headless, with the hook that the installed wheel's
`dsh-circuit-breaker install claude-code` wrote (tests/support/installed.py), against a
scripted fake model on 127.0.0.1 (tests/support/fake_anthropic.py).

Each scenario asserts what really ran (a side-effect file the Bash commands append to)
and what the model was sent back (the `tool_result` blocks the fake server logged).
The CLI is pinned in tests/e2e/package.json and installed by scripts/setup (`npm ci`).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from support.fake_anthropic import FakeAnthropic, tool_results_of, tool_use
from support.installed import Installed

CLAUDE = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "claude"
DENIAL_START = "Circuit breaker: this Bash call was NOT run."

pytestmark = pytest.mark.timeout(300)  # each test runs the CLI up to twice (240 s apiece)


@pytest.fixture
def claude() -> Path:
    require(CLAUDE.exists(), "the Claude Code CLI (tests/e2e: npm ci)")
    return CLAUDE


class Run:
    """One headless Claude Code run in a private HOME with the installed wheel's hook."""

    def __init__(self, installed: Installed, config: dict[str, Any] | None = None) -> None:
        self.home = home = installed.home
        self.work = home / "work"
        self.work.mkdir()
        self.settings = home / "claude-settings.json"
        self.env = {
            k: v
            for k, v in installed.env.items()
            if not k.startswith(("ANTHROPIC_", "CLAUDE_", "CLAUDECODE"))
        }
        if config is not None:
            path = home / "breaker.json"
            path.write_text(json.dumps(config))
            self.env["DSH_CIRCUIT_BREAKER_CONFIG"] = str(path)
        done = installed.run("install", "claude-code", "--settings", str(self.settings))
        assert done.returncode == 0 and "installed in" in done.stdout, done.stderr
        # The hook Claude Code will run is the installed interpreter, not this checkout's.
        (entry,) = json.loads(self.settings.read_text())["hooks"]["PreToolUse"]
        (handler,) = entry["hooks"]
        assert shlex.split(handler["command"])[0] == str(installed.python), handler
        self.incidents = home / "state" / "dsh-circuit-breaker" / "incidents.jsonl"

    def __call__(
        self, model: FakeAnthropic, prompt: str, tools: str = "Bash", *more: str
    ) -> list[dict[str, Any]]:
        env = dict(
            self.env,
            ANTHROPIC_BASE_URL=model.url,
            ANTHROPIC_API_KEY="sk-ant-fake-key-for-tests",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_TELEMETRY="1",
            DISABLE_AUTOUPDATER="1",
        )
        done = subprocess.run(
            [
                str(CLAUDE),
                "-p",
                prompt,
                "--output-format",
                "stream-json",
                "--verbose",
                "--allowedTools",
                tools,
                "--settings",
                str(self.settings),
                *more,
            ],
            env=env,
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
        assert model.errors == []
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        result = events[-1]
        assert result["type"] == "result" and result["is_error"] is False, result
        return events

    def transcripts(self) -> list[Path]:
        return sorted((self.home / ".claude" / "projects").rglob("*.jsonl"))


def side_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


STOP_TEXT = (
    "Circuit breaker: this agent is being stopped because it no longer reads the breaker's "
    "answers: it kept calling after its calls were refused (refusals in a row: 3, stop "
    "limit: 3; the last one a Bash call, duplicate). None of the refused calls ran. Look at "
    "the transcript for what it kept repeating, then restart it with a changed task or "
    "configuration."
)


def probe_calls(side: Path, count: int = 10) -> list[dict[str, Any]]:
    return [
        tool_use("Bash", {"command": f"echo cbprobe4 >> {side}", "description": f"Probe step {i}"})
        for i in range(1, count + 1)
    ]


def stops_in(transcript: Path) -> list[dict[str, Any]]:
    """The `hook_stopped_continuation` attachments Claude Code wrote into a transcript."""
    found = []
    for line in transcript.read_text().splitlines():
        entry = json.loads(line)
        attachment = entry.get("attachment") or {}
        if entry.get("type") == "attachment" and attachment.get("type") == (
            "hook_stopped_continuation"
        ):
            found.append(attachment)
    return found


def test_probe_six_run_then_the_session_is_stopped(claude: Path, installed: Installed) -> None:
    run = Run(installed)
    side = run.work / "side.txt"
    calls = probe_calls(side)
    with FakeAnthropic([*calls, "All ten probe steps attempted."]) as model:
        events = run(model, "Run the cbprobe4 probe ten times.")
    assert side_lines(side) == ["cbprobe4"] * 6  # six really ran
    # Nine calls asked for; the ninth (the third refusal in a row) stopped the session:
    # no model request came after it, so its refusal never reached the model.
    assert len(model.model_requests) == 9
    uses = model.tool_uses()
    assert len(uses) == 9
    results = model.tool_results()
    assert [r.call_id for r in results] == [u["id"] for u in uses[:8]]
    assert [r.is_error for r in results] == [False] * 6 + [True] * 2
    for denied in results[6:]:
        assert DENIAL_START in denied.text  # our text, as an error tool result
        assert "as often as allowed (runs: 6, limit: 6)" in denied.text
    # The headless result: not an error, `terminal_reason` names the hook's stop; the stop
    # reason itself is not in it (nor anywhere on stdout).
    result = events[-1]
    assert (result["subtype"], result["terminal_reason"], result["result"]) == (
        "success",
        "hook_stopped",
        "",
    )
    assert not any("being stopped" in json.dumps(event) for event in events)
    denied_ids = {d["tool_use_id"] for d in result["permission_denials"]}
    assert denied_ids == {u["id"] for u in uses[6:]}  # the stopping call was refused too
    session = result["session_id"]
    incidents = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    assert incidents == [
        {
            "time": incidents[0]["time"],
            "kind": "duplicate",
            "tool": "Bash",
            "count": 6,
            "limit": 6,
            "agent": session,
        },
        # The third refusal in a row is the agent's first stop (stopAfterDenials 3).
        {
            "time": incidents[1]["time"],
            "kind": "stop",
            "tool": "Bash",
            "count": 3,
            "limit": 3,
            "agent": session,
        },
    ]
    # The transcript holds the three refusals and the stop reason, as Claude Code's
    # "hook stopped continuation" note on the stopping call.
    (transcript,) = run.transcripts()
    assert transcript.read_text().count(DENIAL_START) >= 3
    (stop,) = stops_in(transcript)
    assert stop["message"] == STOP_TEXT
    assert (stop["hookName"], stop["toolUseID"]) == ("PreToolUse:Bash", uses[8]["id"])


def test_with_stop_off_the_session_goes_on(claude: Path, installed: Installed) -> None:
    run = Run(installed, {"stopAfterDenials": 0})
    side = run.work / "side.txt"
    with FakeAnthropic([*probe_calls(side), "All ten probe steps attempted."]) as model:
        events = run(model, "Run the cbprobe4 probe ten times.")
    assert side_lines(side) == ["cbprobe4"] * 6
    assert len(model.model_requests) == 11  # every refusal answered, then the final text
    assert [r.is_error for r in model.tool_results()] == [False] * 6 + [True] * 4
    assert events[-1]["terminal_reason"] != "hook_stopped"
    assert events[-1]["result"] == "All ten probe steps attempted."
    (incident,) = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    assert incident["kind"] == "duplicate"
    (transcript,) = run.transcripts()
    assert stops_in(transcript) == []


SUBAGENT_MARK = "SUBAGENT-TASK: run the loop"


def first_user_text(body: dict[str, Any]) -> str:
    for message in body.get("messages") or []:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(str(b.get("text", "")) for b in content or [] if isinstance(b, dict))
    return ""


def count_results(body: dict[str, Any]) -> int:
    return len(tool_results_of(body))


def test_a_looping_subagent_is_stopped_while_the_parent_goes_on(
    claude: Path, installed: Installed
) -> None:
    run = Run(installed)
    side = run.work / "side.txt"
    loop = {"command": f"echo loop >> {side}", "description": "try again"}

    def respond(body: dict[str, Any]) -> Any:
        done = count_results(body)
        if SUBAGENT_MARK in first_user_text(body):
            # The subagent: the same call forever, whatever it is told.
            return tool_use("Bash", dict(loop, description=f"attempt {done + 1}"))
        # The parent: delegate once (waiting for the result), then make the same call
        # twice itself, then finish.
        if done == 0:
            task = {
                "description": "loop task",
                "prompt": SUBAGENT_MARK,
                "subagent_type": "general-purpose",
                "run_in_background": False,
            }
            return tool_use("Agent", task)
        if done < 3:
            return tool_use("Bash", dict(loop, description=f"parent check {done}"))
        return "Parent: done."

    with FakeAnthropic([], after=respond) as model:
        events = run(model, "PARENT-TASK: delegate the loop, then check it twice.", "Bash Agent")
    uses = model.tool_uses()
    results = {r.call_id: r for r in model.tool_results()}
    sub_calls = [u["id"] for u in uses if u["input"].get("description", "").startswith("attempt")]
    parent_calls = [u["id"] for u in uses if u["input"].get("description", "").startswith("parent")]
    # The subagent: 6 ran, 2 refused, the 9th refused and the subagent ended: no request
    # of the subagent's came after it, so that refusal never reached its model.
    assert len(sub_calls) == 9
    sub_requests = [b for b in model.model_requests if SUBAGENT_MARK in first_user_text(b)]
    assert len(sub_requests) == 9
    assert [results[i].is_error for i in sub_calls[:8]] == [False] * 6 + [True] * 2
    assert all(DENIAL_START in results[i].text for i in sub_calls[6:8])
    assert sub_calls[8] not in results
    # The parent got the Agent result (the subagent ended with no report) and went on:
    # its next request, then its two calls of the very same command, which ran (its own
    # agent), then its final answer.
    agent_use = next(u["id"] for u in uses if u["name"] == "Agent")
    requests = model.model_requests
    carrying = [
        i for i, b in enumerate(requests) if agent_use in {r.call_id for r in tool_results_of(b)}
    ]
    last_sub = max(i for i, b in enumerate(requests) if SUBAGENT_MARK in first_user_text(b))
    assert carrying and carrying[0] == last_sub + 1  # the parent's next request, at once
    handed_back = results[agent_use]
    assert not handed_back.is_error
    assert "(Subagent completed but returned no output.)" in handed_back.text
    assert [results[i].is_error for i in parent_calls] == [False, False]
    assert side_lines(side) == ["loop"] * 8
    assert events[-1]["result"] == "Parent: done."
    assert events[-1]["terminal_reason"] != "hook_stopped"
    session = events[-1]["session_id"]
    incidents = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    assert [i["kind"] for i in incidents] == ["duplicate", "stop"]
    agents = {i["agent"] for i in incidents}
    (agent,) = agents
    assert agent.startswith(session + "/") and len(agent) > len(session) + 1  # the subagent's
    stops = [stop for path in run.transcripts() for stop in stops_in(path)]
    assert [stop["message"] for stop in stops] == [STOP_TEXT]
    assert stops[0]["toolUseID"] == sub_calls[8]


CHECK_SCRIPT = """import pathlib
value = pathlib.Path("app.py").read_text().strip()
with open("test-runs.log", "a") as log:
    log.write(value + "\\n")
print("tests passed with", value)
"""


def test_healthy_edit_test_cycle_is_never_denied(claude: Path, installed: Installed) -> None:
    run = Run(installed)
    app = run.work / "app.py"
    app.write_text("value = 0\n")
    (run.work / "check.py").write_text(CHECK_SCRIPT)
    rounds = 20
    script: list[Any] = [tool_use("Read", {"file_path": str(app)})]
    for i in range(1, rounds + 1):
        edit = {
            "file_path": str(app),
            "old_string": f"value = {i - 1}",
            "new_string": f"value = {i}",
        }
        script.append(tool_use("Edit", edit))
        script.append(tool_use("Bash", {"command": "python3 check.py", "description": "Run tests"}))
    script.append("All green after twenty rounds.")
    with FakeAnthropic(script) as model:
        run(model, "Fix the value, test after each edit.", "Bash Edit Read")
    results = model.tool_results()
    assert len(results) == 1 + 2 * rounds
    assert [r for r in results if r.is_error] == []
    assert side_lines(run.work / "test-runs.log") == [f"value = {i}" for i in range(1, rounds + 1)]
    assert app.read_text() == f"value = {rounds}\n"
    assert not run.incidents.exists()


@pytest.mark.parametrize("reset", [True, False])
def test_a_new_user_prompt_starts_the_main_agent_afresh(
    claude: Path, installed: Installed, reset: bool
) -> None:
    run = Run(installed, {"resetOnUserPrompt": reset})
    side = run.work / "side.txt"

    def call(i: int) -> dict[str, Any]:
        return tool_use("Bash", {"command": f"echo again >> {side}", "description": f"try {i}"})

    with FakeAnthropic([*[call(i) for i in range(7)], "Stuck."]) as first:
        one = run(first, "Keep trying.")
    assert [r.is_error for r in first.tool_results()] == [False] * 6 + [True]
    # The person types a new prompt into the same session (--continue keeps its id).
    with FakeAnthropic([call(8), call(9), "Done."]) as second:
        two = run(second, "Try it once more, differently.", "Bash", "--continue")
    assert two[-1]["session_id"] == one[-1]["session_id"]
    eight, nine = (u["id"] for u in second.tool_uses())
    if reset:
        assert [second.result_in_next_request(i).is_error for i in (eight, nine)] == [False] * 2
        assert side_lines(side) == ["again"] * 8
        assert two[-1]["result"] == "Done."
    else:  # the count carries over the whole session: the 9th call is the 3rd refusal
        assert second.result_in_next_request(eight).is_error
        assert len(second.model_requests) == 2  # stopped at the 9th, no request after it
        assert two[-1]["terminal_reason"] == "hook_stopped"
        assert side_lines(side) == ["again"] * 6


def test_cap_text_reaches_the_model(claude: Path, installed: Installed) -> None:
    run = Run(installed, {"maxCallsPerAgent": 3, "window": 6})
    side = run.work / "side.txt"
    calls = [tool_use("Bash", {"command": f"echo {i} >> {side}"}) for i in range(5)]
    with FakeAnthropic([*calls, "Out of calls."]) as model:
        run(model, "Do five different things.")
    assert side_lines(side) == ["0", "1", "2"]
    results = model.tool_results()
    assert [r.is_error for r in results] == [False] * 3 + [True] * 2
    for denied in results[3:]:
        assert "This agent has used up its tool calls (made: 3, limit: 3)" in denied.text
        assert "no further tool calls will run for this agent" in denied.text
    (incident,) = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    assert (incident["kind"], incident["count"], incident["limit"]) == ("cap", 3, 3)
