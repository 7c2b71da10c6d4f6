"""The real Factory droid CLI (`droid exec`, pinned in tests/e2e/package.json) with the
installed wheel's `dsh-circuit-breaker install droid` hook (tests/support/installed.py) in
the scratch HOME's ~/.factory/settings.json,
against a scripted fake model speaking OpenAI Chat Completions on 127.0.0.1
(tests/support/fake_openai.py), configured as a droid custom model
(`provider: "generic-chat-completion-api"`).

droid runs without a Factory login for a custom model. Left alone it still resolves
api.factory.ai, telemetry.factory.ai and an OpenTelemetry collector; FACTORY_AIRGAP_ENABLED
turns all of that off (checked with strace: no connection but the fake's), and the
auto-update and OpenTelemetry switches are set off as well.
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

DROID = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "droid"
pytestmark = pytest.mark.timeout(360)  # one `droid exec` may take up to 300 s
DUPLICATE = (
    "Error: Circuit breaker: this Execute call was NOT run. The identical call has already run "
    "as often as allowed (runs: 6, limit: 6). Repeating it will not give a different result. "
    "Change your approach, use the results you already have, or stop and tell the user what "
    "is blocking you."
)
DENIAL = "Error: Circuit breaker: this Execute call was NOT run."
# The breaker's stop text (defaults: the third refusal in a row, of a duplicate).
STOP = (
    "Circuit breaker: this agent is being stopped because it no longer reads the breaker's "
    "answers: it kept calling after its calls were refused (refusals in a row: 3, stop limit: "
    "3; the last one a Execute call, duplicate). None of the refused calls ran. Look at the "
    "transcript for what it kept repeating, then restart it with a changed task or "
    "configuration."
)
OFFLINE = {
    "FACTORY_AIRGAP_ENABLED": "1",
    "FACTORY_DROID_AUTO_UPDATE_ENABLED": "false",
    "FACTORY_OTEL_ENABLED": "false",
}
RISK = ["low", "medium", "low", "high", "low", "medium", "low", "low", "medium", "high"]


@pytest.fixture
def droid() -> Path:
    require(DROID.exists(), "the Factory droid CLI (tests/e2e: npm ci)")
    return DROID


class Run:
    """Headless `droid exec` runs in a private HOME, our hook installed by our own CLI
    beside the custom model the user configured."""

    def __init__(
        self, installed: Installed, model: FakeOpenAI, config: dict[str, Any] | None = None
    ):
        self.home = home = installed.home
        self.work = home / "work"
        self.work.mkdir()
        self.settings = home / ".factory" / "settings.json"
        self.settings.parent.mkdir()
        custom = {
            "model": "fake-model",
            "displayName": "Fake",
            "baseUrl": model.url,
            "apiKey": "sk-fake-key-for-tests",
            "provider": "generic-chat-completion-api",
            "maxOutputTokens": 4096,
        }
        self.settings.write_text(json.dumps({"customModels": [custom]}))
        self.env = {
            k: v for k, v in installed.env.items() if not k.startswith(("OPENAI_", "FACTORY_"))
        }
        self.env.update(OFFLINE)
        if config is not None:
            (home / "breaker.json").write_text(json.dumps(config))
            self.env["DSH_CIRCUIT_BREAKER_CONFIG"] = str(home / "breaker.json")
        done = installed.run("install", "droid", env=self.env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"installed in {self.settings}" in done.stdout
        # The hook droid will run is the installed interpreter, not this checkout's.
        assert str(installed.python) in self.settings.read_text()
        assert json.loads(self.settings.read_text())["customModels"] == [custom]  # kept
        self.model = model
        self.incidents = home / "state" / "dsh-circuit-breaker" / "incidents.jsonl"

    def __call__(self, prompt: str) -> dict[str, Any]:
        command = [str(DROID), "exec", "--auto", "high", "-m", "custom:Fake-0", "-o", "json"]
        done = subprocess.run(
            [*command, prompt],
            env=self.env,
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
        assert self.model.errors == []
        assert set(self.model.paths) == {"/v1/chat/completions"}
        assert done.stderr == ""
        result: dict[str, Any] = json.loads(done.stdout)
        assert result["type"] == "result" and result["is_error"] is False, result
        return result

    def hook_outputs(self, session: str) -> dict[str, Any]:
        """What our PreToolUse hook printed for each call of a session (by call id, an
        allowed call's empty output left out), from droid's own session transcript."""
        (path,) = (self.home / ".factory" / "sessions").glob(f"*/{session}.jsonl")
        found = {}
        for line in path.read_text().splitlines():
            message = json.loads(line).get("message") or {}
            if message.get("hookEventName") == "PreToolUse":
                (out,) = [r["stdout"] for r in message["hookResults"]]
                if out:
                    found[message["hookToolCallId"]] = json.loads(out)
        return found


def execute(command: str, i: int, **more: Any) -> dict[str, Any]:
    """An Execute call as droid's model writes it: the summary and the risk annotations
    are new prose on every call."""
    arguments = {
        "command": command,
        "summary": f"Run the probe command, take {i + 1}",
        "riskLevel": RISK[i % len(RISK)],
        "riskLevelReason": f"Only appends a fixed marker to a scratch file (attempt {i + 1}).",
        **more,
    }
    return function_call("Execute", arguments)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_probe_six_run_then_denied(droid: Path, installed: Installed) -> None:
    # With stopping off, every refusal reaches the model and the run goes on to its end.
    side = installed.home / "work" / "side.txt"
    calls = [execute(f"echo cbprobe4 >> {side}", i) for i in range(10)]
    with FakeOpenAI([*calls, "All ten probe steps attempted."]) as model:
        run = Run(installed, model, {"stopAfterDenials": 0})
        result = run("Run the cbprobe4 probe ten times.")
        texts = [model.result_in_next_request(c["id"]).text for c in model.tool_uses()]
    assert lines(side) == ["cbprobe4"] * 6  # six really ran
    assert [t.endswith("\n[Process exited with code 0]") for t in texts[:6]] == [True] * 6
    assert texts[6:] == [DUPLICATE] * 4  # droid's "Error: " and the breaker's text, nothing else
    assert result["result"] == "All ten probe steps attempted."
    (incident,) = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    assert (incident["kind"], incident["tool"], incident["count"]) == ("duplicate", "Execute", 6)
    assert incident["agent"] == result["session_id"]


def test_a_looping_agent_is_stopped(droid: Path, installed: Installed) -> None:
    side = installed.home / "work" / "side.txt"
    calls = [execute(f"echo loop >> {side}", i % 10) for i in range(20)]
    with FakeOpenAI([*calls, "Never reached."]) as model:
        run = Run(installed, model)
        result = run("Run the loop.")
        uses = model.tool_uses()
        refused = [model.result_in_next_request(c["id"]).text for c in uses[6:8]]
    assert lines(side) == ["loop"] * 6  # six ran; the 7th to 9th did not
    assert len(uses) == 9 and len(model.requests) == 9  # nothing asked after the 9th call
    assert refused == [DUPLICATE] * 2
    # `droid exec` ends as if the model had finished: exit 0, no text, nothing on stderr.
    assert (result["subtype"], result["result"], result["num_turns"]) == ("success", "", 9)
    # droid keeps the hook's answer in its session transcript: the deny and the stop.
    stopping = run.hook_outputs(result["session_id"])[uses[8]["id"]]
    assert stopping["continue"] is False and stopping["stopReason"] == STOP
    assert stopping["hookSpecificOutput"]["permissionDecision"] == "deny"
    incident, stop = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    assert (incident["kind"], stop["kind"], stop["count"]) == ("duplicate", "stop", 3)
    assert incident["agent"] == stop["agent"] == result["session_id"]


def test_the_cap_text_reaches_the_model(droid: Path, installed: Installed) -> None:
    calls = [execute(f"echo step {i}", i) for i in range(3)]
    with FakeOpenAI([*calls, "Stopped at the cap."]) as model:
        Run(installed, model, {"maxCallsPerAgent": 2})("Run three different steps.")
        texts = [model.result_in_next_request(c["id"]).text for c in model.tool_uses()]
    assert texts[2] == (
        "Error: Circuit breaker: this Execute call was NOT run. This agent has used up its "
        "tool calls (made: 2, limit: 2), and no further tool calls will run for this agent. "
        "Finish with what you already have, or stop and tell the user what blocked you."
    )
    assert [t.startswith("step ") for t in texts[:2]] == [True, True]


SUBAGENT_MARK = "SUBAGENT-TASK: run the loop"


def user_texts(body: dict[str, Any]) -> str:
    parts = []
    for message in body.get("messages") or []:
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                parts += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
            else:
                parts.append(str(content))
    return "\n".join(parts)


def results_in(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages") or [] if m.get("role") == "tool")


def test_subagent_is_its_own_session(droid: Path, installed: Installed) -> None:
    # The child loops for ever: 6 run, 2 refused, the 9th stops it; the parent, its own
    # session, then makes the very same call twice and is not refused.
    side = installed.home / "work" / "side.txt"
    loop = f"echo loop >> {side}"
    child_requests = []

    def respond(body: dict[str, Any]) -> Any:
        done = results_in(body)
        if "PARENT-TASK" not in user_texts(body):  # the subagent's own conversation
            child_requests.append(done)
            return execute(loop, done, summary=f"Child attempt number {done + 1}")
        if done == 0:
            task = {
                "subagent_type": "worker",
                "description": "loop task",
                "prompt": SUBAGENT_MARK,
                "await": True,
            }
            return function_call("Task", task)
        if done < 3:
            return execute(loop, done, summary=f"Parent check number {done}")
        return "Parent: done."

    with FakeOpenAI([], after=respond) as model:
        run = Run(installed, model)
        result = run("PARENT-TASK: delegate the loop, then check it twice.")
        texts = {r.call_id: r.text for r in model.tool_results()}
        uses = model.tool_uses()
    runs = [u for u in uses if u["name"] == "Execute"]
    child = [texts.get(u["id"]) for u in runs if u["input"]["summary"].startswith("Child")]
    parent = [texts[u["id"]] for u in runs if u["input"]["summary"].startswith("Parent")]
    assert child_requests == list(range(9))  # no child request after its 9th call
    assert len(child) == 9 and child[8] is None  # no result: the child ended on that call
    assert [t.startswith(DENIAL) for t in child[:8] if t] == [False] * 6 + [True] * 2
    assert [t.startswith(DENIAL) for t in parent] == [False, False]
    assert lines(side) == ["loop"] * 8
    incident, stop = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    assert (incident["kind"], stop["kind"]) == ("duplicate", "stop")
    assert incident["agent"] == stop["agent"] != result["session_id"]  # the child's session
    # The parent's next request came, with the Task's result: a child with no output.
    task = texts[next(u["id"] for u in uses if u["name"] == "Task")]
    assert "The subagent session completed but did not return any output." in task
    assert f"{stop['agent']}.jsonl" in task
    assert result["result"] == "Parent: done."


CHECK_SCRIPT = """import pathlib
value = pathlib.Path("app.py").read_text().strip()
with open("test-runs.log", "a") as log:
    log.write(value + "\\n")
print("tests passed with", value)
"""


def test_healthy_edit_test_cycle_is_never_denied(droid: Path, installed: Installed) -> None:
    app = installed.home / "work" / "app.py"
    rounds = 20
    script: list[Any] = [function_call("Read", {"file_path": str(app)})]
    for i in range(1, rounds + 1):
        edit = {"file_path": str(app), "old_str": f"value = {i - 1}", "new_str": f"value = {i}"}
        script.append(function_call("Edit", edit))
        script.append(execute("python3 check.py", i, summary="Run the test suite now"))
    script.append("All green after twenty rounds.")
    with FakeOpenAI(script) as model:
        run = Run(installed, model)
        app.write_text("value = 0\n")
        (run.work / "check.py").write_text(CHECK_SCRIPT)
        run("Fix the value, test after each edit.")
        texts = [model.result_in_next_request(c["id"]).text for c in model.tool_uses()]
    assert len(texts) == 1 + 2 * rounds
    assert not [t for t in texts if "Circuit breaker" in t]
    assert lines(run.work / "test-runs.log") == [f"value = {i}" for i in range(1, rounds + 1)]
    assert not run.incidents.exists()


def test_a_hooks_json_event_replaces_ours(droid: Path, installed: Installed) -> None:
    # Why install refuses and doctor complains when ~/.factory/hooks.json defines one of
    # our events: droid then runs only that file's hooks for it, and ours never runs.
    side = installed.home / "work" / "side.txt"
    calls = [execute(f"echo shadowed >> {side}", i) for i in range(8)]
    with FakeOpenAI([*calls, "Done."]) as model:
        run = Run(installed, model)
        other = {"hooks": [{"type": "command", "command": "true"}]}
        (installed.home / ".factory" / "hooks.json").write_text(json.dumps({"PreToolUse": [other]}))
        run("Run it eight times.")
    assert lines(side) == ["shadowed"] * 8
    assert not any(r.text.startswith(DENIAL) for r in model.tool_results())
    doctor = installed.run("doctor", "droid", env=run.env)
    assert doctor.returncode == 1 and "hooks.json defines PreToolUse" in doctor.stdout
