"""The real Claude Code CLI, headless, with `dsh-circuit-breaker install claude-code`'s
hook, against a scripted fake model on 127.0.0.1 (tests/support/fake_anthropic.py).

Each scenario asserts what really ran (a side-effect file the Bash commands append to)
and what the model was sent back (the `tool_result` blocks the fake server logged).
The CLI is pinned in tests/e2e/package.json and installed by scripts/setup (`npm ci`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from hook_support import hook_env
from support.fake_anthropic import FakeAnthropic, tool_results_of, tool_use

CLAUDE = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "claude"
DENIAL_START = "Circuit breaker: this Bash call was NOT run."


@pytest.fixture
def claude() -> Path:
    require(CLAUDE.exists(), "the Claude Code CLI (tests/e2e: npm ci)")
    return CLAUDE


class Run:
    """One headless Claude Code run in a private HOME with our hook installed."""

    def __init__(self, home: Path, config: dict[str, Any] | None = None) -> None:
        self.home = home
        self.work = home / "work"
        self.work.mkdir()
        self.settings = home / "claude-settings.json"
        self.env = hook_env(home)
        self.env = {
            k: v
            for k, v in self.env.items()
            if not k.startswith(("ANTHROPIC_", "CLAUDE_", "CLAUDECODE"))
        }
        if config is not None:
            path = home / "breaker.json"
            path.write_text(json.dumps(config))
            self.env["DSH_CIRCUIT_BREAKER_CONFIG"] = str(path)
        installed = subprocess.run(
            [
                sys.executable,
                "-m",
                "dsh_circuit_breaker.cli",
                "install",
                "claude-code",
                "--settings",
                str(self.settings),
            ],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert "installed in" in installed.stdout
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


def test_probe_six_run_then_denied(claude: Path, tmp_path: Path) -> None:
    run = Run(tmp_path)
    side = run.work / "side.txt"
    calls = [
        tool_use("Bash", {"command": f"echo cbprobe4 >> {side}", "description": f"Probe step {i}"})
        for i in range(1, 11)
    ]
    with FakeAnthropic([*calls, "All ten probe steps attempted."]) as model:
        events = run(model, "Run the cbprobe4 probe ten times.")
    assert side_lines(side) == ["cbprobe4"] * 6  # six really ran
    results = model.tool_results()
    assert [r.call_id for r in results] == [c["id"] for c in model.tool_uses()]
    assert [r.is_error for r in results] == [False] * 6 + [True] * 4
    for denied in results[6:]:
        assert DENIAL_START in denied.text  # our text, as an error tool result
        assert "as often as allowed (runs: 6, limit: 6)" in denied.text
    session = events[-1]["session_id"]
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
    # The CLI counts our denials as permission denials, and the transcript holds them.
    denied_ids = {d["tool_use_id"] for d in events[-1]["permission_denials"]}
    assert denied_ids == {r.call_id for r in results[6:]}
    (transcript,) = run.transcripts()
    assert transcript.read_text().count(DENIAL_START) >= 4


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


def test_only_the_looping_subagent_is_denied(claude: Path, tmp_path: Path) -> None:
    run = Run(tmp_path)
    side = run.work / "side.txt"
    loop = {"command": f"echo loop >> {side}", "description": "try again"}

    def respond(body: dict[str, Any]) -> Any:
        done = count_results(body)
        if SUBAGENT_MARK in first_user_text(body):
            # The subagent: eight identical calls, then a report.
            if done < 8:
                return tool_use("Bash", dict(loop, description=f"attempt {done + 1}"))
            return "Subagent: the loop was stopped by the circuit breaker."
        # The parent: delegate once, then make the same call twice itself, then finish.
        if done == 0:
            task = {
                "description": "loop task",
                "prompt": SUBAGENT_MARK,
                "subagent_type": "general-purpose",
            }
            return tool_use("Agent", task)
        if done < 3:
            return tool_use("Bash", dict(loop, description=f"parent check {done}"))
        return "Parent: done."

    with FakeAnthropic([], after=respond) as model:
        events = run(model, "PARENT-TASK: delegate the loop, then check it twice.", "Bash Agent")
    uses = {u["id"]: u for u in model.tool_uses()}
    results = {r.call_id: r for r in model.tool_results()}
    sub_calls = [
        u["id"]
        for u in model.tool_uses()
        if u["name"] == "Bash" and u["input"]["description"].startswith("attempt")
    ]
    parent_calls = [
        u["id"]
        for u in model.tool_uses()
        if u["name"] == "Bash" and u["input"]["description"].startswith("parent")
    ]
    assert len(sub_calls) == 8 and len(parent_calls) == 2
    assert [results[i].is_error for i in sub_calls] == [False] * 6 + [True] * 2
    assert all(DENIAL_START in results[i].text for i in sub_calls[6:])
    # The parent, same session, ran the very same command: it is its own agent.
    assert [results[i].is_error for i in parent_calls] == [False, False]
    assert side_lines(side) == ["loop"] * 8
    agent_use = next(i for i, u in uses.items() if u["name"] == "Agent")
    assert not results[agent_use].is_error
    (incident,) = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    session = events[-1]["session_id"]
    assert incident["agent"].startswith(session + "/")  # session plus the subagent's id
    assert len(incident["agent"]) > len(session) + 1


CHECK_SCRIPT = """import pathlib
value = pathlib.Path("app.py").read_text().strip()
with open("test-runs.log", "a") as log:
    log.write(value + "\\n")
print("tests passed with", value)
"""


def test_healthy_edit_test_cycle_is_never_denied(claude: Path, tmp_path: Path) -> None:
    run = Run(tmp_path)
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
    claude: Path, tmp_path: Path, reset: bool
) -> None:
    run = Run(tmp_path, {"resetOnUserPrompt": reset})
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
    new_results = second.tool_results()[-2:]
    if reset:
        assert [r.is_error for r in new_results] == [False, False]
        assert side_lines(side) == ["again"] * 8
    else:  # the count carries over the whole session
        assert [r.is_error for r in new_results] == [True, True]
        assert side_lines(side) == ["again"] * 6


def test_cap_text_reaches_the_model(claude: Path, tmp_path: Path) -> None:
    run = Run(tmp_path, {"maxCallsPerAgent": 3, "window": 6})
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
