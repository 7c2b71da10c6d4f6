"""The real GitHub Copilot CLI (`copilot -p`, pinned in tests/e2e/package.json) with the
hooks file the installed wheel's `dsh-circuit-breaker install copilot` wrote
(tests/support/installed.py), against a scripted fake model speaking
OpenAI Chat Completions on 127.0.0.1 (tests/support/fake_openai.py).

Copilot runs on its own model provider (BYOK: `COPILOT_PROVIDER_BASE_URL`) with
`COPILOT_OFFLINE=true`: no GitHub login, telemetry, web tools or update checks. Each
scenario asserts what really ran (a side-effect file the commands append to) and what
the model was sent back (the `tool` messages of the next request, from the server's log).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from support.fake_openai import FakeOpenAI, function_call
from support.harness_run import edit_test_project, json_lines, run_json_lines, side_lines
from support.installed import Installed

COPILOT = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "copilot"
DENIED = "Denied by preToolUse hook: Circuit breaker: this bash call was NOT run."

pytestmark = pytest.mark.timeout(300)  # each test runs the CLI once or twice


@pytest.fixture(scope="module")
def package_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the copilot binary unpacks its JavaScript (about 240 MB): once per module,
    rather than in every test's HOME."""
    require(COPILOT.exists(), "the GitHub Copilot CLI (tests/e2e: npm ci)")
    return tmp_path_factory.mktemp("copilot-pkg")


class Run:
    """`copilot -p` in a private HOME, the hooks file installed by the installed wheel."""

    def __init__(
        self, installed: Installed, cache: Path, config: dict[str, Any] | None = None
    ) -> None:
        self.home = home = installed.home
        self.installed = installed
        self.work = home / "work"
        self.work.mkdir()
        self.env = {
            k: v
            for k, v in installed.env.items()
            if not k.startswith(("COPILOT_", "GITHUB_", "GH_", "OPENAI_"))
        }
        self.env.update(COPILOT_PKG_CACHE_HOME=str(cache), COPILOT_OFFLINE="true")
        if config is not None:
            path = home / "breaker.json"
            path.write_text(json.dumps(config))
            self.env["DSH_CIRCUIT_BREAKER_CONFIG"] = str(path)
        self.hooks_file = home / ".copilot" / "hooks" / "dsh-circuit-breaker.json"
        assert str(self.hooks_file) in self.cli("install").stdout
        # The hook Copilot will run is the installed interpreter, not this checkout's.
        assert str(installed.python) in self.hooks_file.read_text()
        self.incidents = home / "state" / "dsh-circuit-breaker" / "incidents.jsonl"

    def cli(self, action: str, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.installed.run(action, "copilot", *args, env=self.env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def __call__(self, model: FakeOpenAI, prompt: str, *more: str) -> list[dict[str, Any]]:
        env = dict(
            self.env,
            COPILOT_PROVIDER_BASE_URL=model.url,
            COPILOT_PROVIDER_API_KEY="sk-fake-key-for-tests",
            COPILOT_MODEL="fake-model",
        )
        flags = ["--allow-all-tools", "--output-format", "json", "--no-auto-update"]
        done, events = run_json_lines([str(COPILOT), "-p", prompt, *flags, *more], env, self.work)
        assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
        assert model.errors == []
        assert events and events[-1]["type"] == "result", done.stdout[-2000:]
        return events

    def incident_lines(self) -> list[dict[str, Any]]:
        return json_lines(self.incidents)


def bash(command: str, description: str) -> dict[str, Any]:
    return function_call("bash", {"command": command, "description": description})


def probe(side: Path, count: int = 10) -> list[dict[str, Any]]:
    # Copilot's model writes the bash tool's `description` afresh on every call.
    return [bash(f"echo cbprobe4 >> {side}", f"Probe step {i + 1}") for i in range(count)]


def texts_in_next_requests(model: FakeOpenAI, calls: list[dict[str, Any]]) -> list[str]:
    return [model.result_in_next_request(call["id"]).text for call in calls]


def test_probe_six_run_then_denied_past_the_stop(package_cache: Path, installed: Installed) -> None:
    # Copilot's preToolUse cannot end the run, so a stop is the plain deny: the 9th and
    # 10th calls (the stop point on) are refused like the 7th, and the run goes on.
    run = Run(installed, package_cache)
    side = run.work / "side.txt"
    calls = probe(side)
    with FakeOpenAI([*calls, "All ten probe steps attempted."]) as model:
        events = run(model, "Run the cbprobe4 probe ten times.")
    assert side_lines(side) == ["cbprobe4"] * 6  # six really ran
    texts = texts_in_next_requests(model, calls)
    assert [t.startswith(DENIED) for t in texts] == [False] * 6 + [True] * 4
    assert texts[6] == (
        f"{DENIED} The identical call has already run as often as allowed (runs: 6, limit: 6). "
        "Repeating it will not give a different result. Change your approach, use the results "
        "you already have, or stop and tell the user what is blocking you."
    )
    # The first duplicate, then the first stop (the third refusal in a row).
    incident, stop = run.incident_lines()
    assert (incident["kind"], incident["tool"], incident["count"]) == ("duplicate", "bash", 6)
    assert (stop["kind"], stop["count"], stop["limit"]) == ("stop", 3, 3)
    assert incident["agent"] == events[-1]["sessionId"]  # Copilot's session id reaches the hook
    assert stop["agent"] == incident["agent"]


def test_healthy_edit_test_cycle_is_never_denied(package_cache: Path, installed: Installed) -> None:
    run = Run(installed, package_cache)
    app = edit_test_project(run.work)
    rounds = 10
    script: list[Any] = [function_call("view", {"path": str(app)})]
    for i in range(1, rounds + 1):
        edit = {"path": str(app), "old_str": f"value = {i - 1}", "new_str": f"value = {i}"}
        script.append(function_call("edit", edit))
        script.append(bash("python3 check.py", "Run the tests"))
    with FakeOpenAI([*script, "All green after ten rounds."]) as model:
        run(model, "Fix the value, test after each edit.")
    texts = [r.text for r in model.tool_results()]
    assert len(texts) == 1 + 2 * rounds
    assert not [t for t in texts if "Denied by preToolUse hook" in t]
    assert side_lines(run.work / "test-runs.log") == [f"value = {i}" for i in range(1, rounds + 1)]
    assert app.read_text() == f"value = {rounds}\n"
    assert run.incident_lines() == []


SUBAGENT_MARK = "SUBAGENT-TASK: run the loop command."


def test_only_the_looping_subagent_is_denied(package_cache: Path, installed: Installed) -> None:
    run = Run(installed, package_cache)
    side = run.work / "side.txt"
    command = f"echo loop >> {side}"

    def respond(body: dict[str, Any]) -> Any:
        messages = body["messages"]
        done = sum(1 for m in messages if m.get("role") == "tool")
        if any(SUBAGENT_MARK in str(m.get("content")) for m in messages if m["role"] == "user"):
            if done < 8:  # the subagent: eight identical calls, then a report
                return bash(command, f"attempt {done + 1}")
            return "Subagent: the loop was stopped by the circuit breaker."
        if done == 0:  # the parent: delegate once, then run the same command six times
            task = {
                "name": "looper",
                "description": "run the loop",
                "prompt": SUBAGENT_MARK,
                "agent_type": "general-purpose",
                "mode": "sync",
            }
            return function_call("task", task)
        if done < 7:
            return bash(command, f"parent check {done}")
        return "Parent: done."

    with FakeOpenAI([], after=respond) as model:
        events = run(model, "PARENT-TASK: delegate the loop, then check it yourself.")
    bash_calls = [c for c in model.tool_uses() if c["name"] == "bash"]
    child = [c for c in bash_calls if c["input"]["description"].startswith("attempt")]
    parent = [c for c in bash_calls if c["input"]["description"].startswith("parent")]
    assert len(child) == 8 and len(parent) == 6
    child_texts = texts_in_next_requests(model, child)
    assert [t.startswith(DENIED) for t in child_texts] == [False] * 6 + [True] * 2
    # The parent then runs the very same command six times: it is an agent of its own.
    assert not [t for t in texts_in_next_requests(model, parent) if t.startswith(DENIED)]
    assert side_lines(side) == ["loop"] * 12
    (started,) = [e for e in events if e["type"] == "subagent.started"]
    (incident,) = run.incident_lines()
    assert incident["agent"] == f"{events[-1]['sessionId']}/{started['agentId']}"


def test_a_new_user_prompt_starts_the_session_afresh(
    package_cache: Path, installed: Installed
) -> None:
    run = Run(installed, package_cache)
    side = run.work / "side.txt"
    with FakeOpenAI([*probe(side, 5), "Five done."]) as first:
        one = run(first, "Run the probe five times.")
    session = one[-1]["sessionId"]
    # The person types a new prompt into the same session: userPromptSubmitted resets it,
    # so the count starts again (without the reset the second call here would be denied).
    calls = probe(side, 7)
    with FakeOpenAI([*calls, "Seven tried."]) as second:
        two = run(second, "Run it seven more times.", f"--resume={session}")
    assert two[-1]["sessionId"] == session
    texts = texts_in_next_requests(second, calls)
    assert [t.startswith(DENIED) for t in texts] == [False] * 6 + [True]
    assert side_lines(side) == ["cbprobe4"] * 11


def test_cap_text_reaches_the_model(package_cache: Path, installed: Installed) -> None:
    run = Run(installed, package_cache, {"maxCallsPerAgent": 3, "window": 6})
    side = run.work / "side.txt"
    calls = [bash(f"echo {i} >> {side}", f"step {i}") for i in range(5)]
    with FakeOpenAI([*calls, "Out of calls."]) as model:
        run(model, "Do five different things.")
    assert side_lines(side) == ["0", "1", "2"]
    texts = texts_in_next_requests(model, calls)
    assert (
        texts[3:]
        == [
            f"{DENIED} This agent has used up its tool calls (made: 3, limit: 3), and no further "
            "tool calls will run for this agent. Finish with what you already have, or stop and "
            "tell the user what blocked you."
        ]
        * 2
    )


def test_reinstall_and_uninstall(package_cache: Path, installed: Installed) -> None:
    run = Run(installed, package_cache)
    hooks = run.hooks_file.parent
    (hooks / "others.json").write_text('{"version": 1, "hooks": {}}')
    config = installed.home / "other-config.json"
    config.write_text('{"duplicateLimit": 3}')
    # A reinstall with other options leaves a backup of our file beside it, which Copilot
    # must not load as a second hook.
    assert "backup:" in run.cli("install", "--config", str(config)).stdout
    assert len(list(hooks.glob("dsh-circuit-breaker.json.bak-*"))) == 1
    side = run.work / "side.txt"
    with FakeOpenAI([*probe(side, 5), "Stopped."]) as model:
        run(model, "Run the probe five times.")
    assert side_lines(side) == ["cbprobe4"] * 3
    # Uninstall deletes our file only; the CLI then runs unguarded.
    assert "removed from" in run.cli("uninstall").stdout
    assert not run.hooks_file.exists() and (hooks / "others.json").exists()
    side.unlink()
    with FakeOpenAI([*probe(side, 8), "Done."]) as model:
        run(model, "Run the probe eight times.")
    assert side_lines(side) == ["cbprobe4"] * 8
