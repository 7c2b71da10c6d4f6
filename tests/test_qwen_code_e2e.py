"""The real Qwen Code CLI (`qwen -p`, pinned in tests/e2e/package.json) with the installed
wheel's `dsh-circuit-breaker install qwen-code` hook (tests/support/installed.py) in the
scratch HOME's ~/.qwen/settings.json,
against a scripted fake model speaking OpenAI Chat Completions on 127.0.0.1
(tests/support/fake_openai.py).

Qwen is kept offline: the model is the fake (`--auth-type openai`, OPENAI_BASE_URL), and
the settings turn off auto-update, usage statistics and telemetry; the fake must see
every request.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from support.fake_openai import FakeOpenAI, function_call
from support.installed import Installed

QWEN = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "qwen"
pytestmark = pytest.mark.timeout(360)  # one `qwen -p` may take up to 300 s
DENIAL = (
    "Circuit breaker: this run_shell_command call was NOT run. The identical call has "
    "already run as often as allowed (runs: 6, limit: 6)."
)
# The whole tool result of a denied call: the breaker's text, nothing around it.
DUPLICATE = (
    f"{DENIAL} Repeating it will not give a different result. Change your approach, use the "
    "results you already have, or stop and tell the user what is blocking you."
)
# What a user might already have in ~/.qwen/settings.json; the install keeps it. It also
# keeps Qwen from reaching anything but the fake model.
OFFLINE = {
    "general": {"enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


@pytest.fixture
def qwen() -> Path:
    require(QWEN.exists(), "the Qwen Code CLI (tests/e2e: npm ci)")
    return QWEN


class Run:
    """Headless `qwen` runs in a private HOME, our hook installed by our own CLI."""

    def __init__(self, installed: Installed, config: dict[str, Any] | None = None) -> None:
        self.home = home = installed.home
        self.work = home / "work"
        self.work.mkdir()
        self.settings = home / ".qwen" / "settings.json"
        self.settings.parent.mkdir()
        self.settings.write_text(json.dumps(OFFLINE))
        self.env = {
            k: v for k, v in installed.env.items() if not k.startswith(("OPENAI_", "QWEN_"))
        }
        if config is not None:
            (home / "breaker.json").write_text(json.dumps(config))
            self.env["DSH_CIRCUIT_BREAKER_CONFIG"] = str(home / "breaker.json")
        done = installed.run("install", "qwen-code", env=self.env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"installed in {self.settings}" in done.stdout
        # The hook Qwen Code will run is the installed interpreter, not this checkout's.
        assert str(installed.python) in self.settings.read_text()
        self.incidents = home / "state" / "dsh-circuit-breaker" / "incidents.jsonl"

    def __call__(self, model: FakeOpenAI, prompt: str, *more: str) -> dict[str, Any]:
        env = dict(
            self.env,
            OPENAI_BASE_URL=model.url,
            OPENAI_API_KEY="sk-fake-key-for-tests",
            OPENAI_MODEL="fake-model",
            QWEN_CODE_DISABLE_PRECONNECT="1",
            QWEN_CODE_SUPPRESS_YOLO_WARNING="1",
        )
        done = subprocess.run(
            [str(QWEN), "--auth-type", "openai", "-p", prompt, "--yolo", "-o", "json", *more],
            env=env,
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
        assert model.errors == []
        assert model.paths and set(model.paths) == {"/v1/chat/completions"}
        result: dict[str, Any] = json.loads(done.stdout)[-1]
        assert result["type"] == "result" and result["is_error"] is False, result
        return result


def shell(command: str, description: str) -> dict[str, Any]:
    return function_call("run_shell_command", {"command": command, "description": description})


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_probe_six_run_then_denied_past_the_stop(qwen: Path, installed: Installed) -> None:
    # Qwen's PreToolUse cannot end the run, so a stop is the plain deny: the 9th and 10th
    # calls (the stop point on) are refused like the 7th, and the run goes on to its end.
    run = Run(installed)
    side = run.work / "side.txt"
    calls = [shell(f"echo cbprobe4 >> {side}", f"Probe step {i}") for i in range(1, 11)]
    with FakeOpenAI([*calls, "All ten probe steps attempted."]) as model:
        result = run(model, "Run the cbprobe4 probe ten times.")
    assert lines(side) == ["cbprobe4"] * 6  # six really ran
    sent = model.tool_uses()
    for call in sent[6:]:
        # The breaker's text is the whole tool result of that call, in the next request.
        denied = model.result_in_next_request(call["id"])
        assert denied.text == DUPLICATE, denied.text
    for call in sent[:6]:
        assert model.result_in_next_request(call["id"]).text.startswith("Command: echo cbprobe4")
    # Qwen counts our denials as permission denials.
    assert [d["tool_use_id"] for d in result["permission_denials"]] == [c["id"] for c in sent[6:]]
    # The first duplicate, then the first stop (the third refusal in a row).
    incident, stop = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    assert (stop["kind"], stop["count"], stop["limit"]) == ("stop", 3, 3)
    assert (incident["kind"], incident["tool"], incident["count"]) == (
        "duplicate",
        "run_shell_command",
        6,
    )
    assert incident["agent"] == result["session_id"]


def test_a_new_prompt_starts_afresh_but_tool_results_do_not(
    qwen: Path, installed: Installed
) -> None:
    # Qwen sends UserPromptSubmit before every model request, after each tool result too;
    # only the person's prompt (with `submitted_prompt`) resets the session.
    run = Run(installed)
    side = run.work / "side.txt"
    first = [shell(f"echo again >> {side}", f"Round one, step {i}") for i in range(1, 7)]
    with FakeOpenAI([*first, "Six done."]) as model:
        result = run(model, "Run it six times.")
    second = [shell(f"echo again >> {side}", f"Round two, step {i}") for i in range(1, 8)]
    with FakeOpenAI([*second, "Seven tried."]) as model:
        resumed = run(model, "Run it seven more times.", "--resume", result["session_id"])
        texts = [model.result_in_next_request(c["id"]).text for c in model.tool_uses()]
    assert resumed["session_id"] == result["session_id"]
    assert [t.startswith(DENIAL) for t in texts] == [False] * 6 + [True]
    assert lines(side) == ["again"] * 12


def test_the_cap_text_reaches_the_model(qwen: Path, installed: Installed) -> None:
    run = Run(installed, {"maxCallsPerAgent": 2})
    calls = [shell(f"echo step {i}", f"Step {i}") for i in range(1, 4)]
    with FakeOpenAI([*calls, "Stopped at the cap."]) as model:
        run(model, "Run three different steps.")
        texts = [model.result_in_next_request(c["id"]).text for c in model.tool_uses()]
    assert texts[2] == (
        "Circuit breaker: this run_shell_command call was NOT run. This agent has used up its "
        "tool calls (made: 2, limit: 2), and no further tool calls will run for this agent. "
        "Finish with what you already have, or stop and tell the user what blocked you."
    )
    assert [t.startswith("Command: echo step") for t in texts[:2]] == [True, True]


SUBAGENT_MARK = "SUBAGENT-TASK: run the loop"


def first_user_text(body: dict[str, Any]) -> str:
    for message in body.get("messages") or []:
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content)
    return ""


def results_in(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages") or [] if m.get("role") == "tool")


def test_only_the_looping_subagent_is_denied(qwen: Path, installed: Installed) -> None:
    run = Run(installed)
    side = run.work / "side.txt"
    loop = f"echo loop >> {side}"

    def respond(body: dict[str, Any]) -> Any:
        done = results_in(body)
        if SUBAGENT_MARK in first_user_text(body):
            if done < 8:  # eight identical calls, then a report
                return shell(loop, f"attempt {done + 1}")
            return "Subagent: the loop was stopped by the circuit breaker."
        if done == 0:  # the parent delegates once, then runs the same command twice
            task = {
                "description": "loop task",
                "prompt": SUBAGENT_MARK,
                "subagent_type": "general-purpose",
                "run_in_background": False,
            }
            return function_call("agent", task)
        if done < 3:
            return shell(loop, f"parent check {done}")
        return "Parent: done."

    with FakeOpenAI([], after=respond) as model:
        result = run(model, "PARENT-TASK: delegate the loop, then check it twice.")
    uses = model.tool_uses()
    shells = [u for u in uses if u["name"] == "run_shell_command"]
    # The parent's and the child's requests interleave: each result, wherever it came back.
    texts = {r.call_id: r.text for r in model.tool_results()}
    sub = [texts[u["id"]] for u in shells if u["input"]["description"].startswith("attempt")]
    parent = [texts[u["id"]] for u in shells if u["input"]["description"].startswith("parent")]
    assert [t.startswith(DENIAL) for t in sub] == [False] * 6 + [True] * 2
    assert [t.startswith(DENIAL) for t in parent] == [False, False]  # its own agent
    assert lines(side) == ["loop"] * 8
    (agent_call,) = [u for u in uses if u["name"] == "agent"]
    assert "Circuit breaker" not in texts[agent_call["id"]]
    (incident,) = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    session = result["session_id"]
    assert incident["agent"].startswith(session + "/")  # session plus Qwen's agent_id
    assert len(incident["agent"]) > len(session) + 1


CHECK_SCRIPT = """import pathlib
value = pathlib.Path("app.py").read_text().strip()
with open("test-runs.log", "a") as log:
    log.write(value + "\\n")
print("tests passed with", value)
"""


def test_healthy_edit_test_cycle_is_never_denied(qwen: Path, installed: Installed) -> None:
    run = Run(installed)
    app = run.work / "app.py"
    app.write_text("value = 0\n")
    (run.work / "check.py").write_text(CHECK_SCRIPT)
    rounds = 20
    script: list[Any] = [function_call("read_file", {"file_path": str(app)})]
    for i in range(1, rounds + 1):
        edit = {
            "file_path": str(app),
            "old_string": f"value = {i - 1}",
            "new_string": f"value = {i}",
        }
        script.append(function_call("edit", edit))
        script.append(shell("python3 check.py", "Run tests"))
    script.append("All green after twenty rounds.")
    with FakeOpenAI(script) as model:
        result = run(model, "Fix the value, test after each edit.")
    texts = [model.result_in_next_request(c["id"]).text for c in model.tool_uses()]
    assert len(texts) == 1 + 2 * rounds
    assert not [t for t in texts if "Circuit breaker" in t]
    assert result["permission_denials"] == []
    assert lines(run.work / "test-runs.log") == [f"value = {i}" for i in range(1, rounds + 1)]
    assert not run.incidents.exists()
