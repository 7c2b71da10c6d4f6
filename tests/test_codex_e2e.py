"""The real Codex CLI (`codex exec`, pinned in tests/e2e/package.json) with the hook
that the installed wheel's `dsh-circuit-breaker install codex` wrote
(tests/support/installed.py), against a scripted fake model speaking the OpenAI
Responses API on 127.0.0.1 (tests/support/fake_openai.py).

Codex is configured to stay offline: a custom model provider on 127.0.0.1, and the
features that would reach the network (plugin sync, apps, analytics, updates, model
discovery) turned off.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import require
from support.fake_openai import FakeOpenAI, function_call
from support.installed import Installed

CODEX = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "codex"
BLOCKED = "Command blocked by PreToolUse hook: Circuit breaker: this Bash call was NOT run."

pytestmark = pytest.mark.timeout(300)  # up to two `codex exec` runs (240 s apiece)

CONFIG = """model = "fake-model"
model_provider = "fake"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "{url}"
wire_api = "responses"
env_key = "FAKE_MODEL_KEY"

[features]
plugins = false
remote_plugin = false
apps = false
in_app_updates = false
api_key_model_discovery = false

[analytics]
enabled = false
"""


@pytest.fixture
def codex() -> Path:
    require(CODEX.exists(), "the Codex CLI (tests/e2e: npm ci)")
    return CODEX


class Run:
    """One `codex exec` in a private HOME and CODEX_HOME, the installed wheel's hook in
    hooks.json."""

    def __init__(self, installed: Installed) -> None:
        self.home = home = installed.home
        self.work = home / "work"
        self.work.mkdir()
        self.codex_home = home / ".codex"
        self.codex_home.mkdir()
        self.env = {
            k: v for k, v in installed.env.items() if not k.startswith(("OPENAI_", "CODEX_"))
        }
        self.env.update(CODEX_HOME=str(self.codex_home), FAKE_MODEL_KEY="sk-fake-key-for-tests")
        done = installed.run("install", "codex", env=self.env)
        assert done.returncode == 0, done.stderr
        assert str(self.codex_home / "hooks.json") in done.stdout
        # The hook Codex will run is the installed interpreter, not this checkout's.
        (entry,) = json.loads((self.codex_home / "hooks.json").read_text())["hooks"]["PreToolUse"]
        (handler,) = entry["hooks"]
        assert shlex.split(handler["command"])[0] == str(installed.python), handler
        self.incidents = home / "state" / "dsh-circuit-breaker" / "incidents.jsonl"
        self.state = home / "state" / "dsh-circuit-breaker" / "state.db"

    def __call__(self, model: FakeOpenAI, prompt: str, *, trust: bool = True) -> str:
        (self.codex_home / "config.toml").write_text(CONFIG.format(url=model.url))
        flags = ["--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        if trust:
            # What approving the hooks in Codex's /hooks would record; a test has no TUI.
            flags.append("--dangerously-bypass-hook-trust")
        done = subprocess.run(
            [str(CODEX), "exec", *flags, prompt],
            env=self.env,
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert model.errors == []
        return done.stderr


def probe(side: Path, count: int = 10) -> list[dict[str, object]]:
    return [
        function_call("exec_command", {"cmd": f"echo cbprobe4 >> {side}"}) for _ in range(count)
    ]


def test_probe_six_run_then_blocked_past_the_stop(codex: Path, installed: Installed) -> None:
    # Codex cannot be stopped from PreToolUse (it rejects `continue` there, and with it the
    # whole answer, deny included), so the stop is answered as a plain deny: every call
    # past the stop point (the 9th on) is still refused, and the run goes on.
    run = Run(installed)
    side = run.work / "side.txt"
    with FakeOpenAI([*probe(side, 14), "All fourteen probe steps attempted."]) as model:
        log = run(model, "Run the cbprobe4 probe fourteen times.")
    assert side.read_text().splitlines() == ["cbprobe4"] * 6  # six really ran
    outputs = model.tool_results()
    assert [o.call_id for o in outputs] == [c["id"] for c in model.tool_uses()]
    assert [o.text.startswith(BLOCKED) for o in outputs] == [False] * 6 + [True] * 8
    for blocked in outputs[6:]:
        assert "as often as allowed (runs: 6, limit: 6)" in blocked.text
    assert len(model.model_requests) == 15  # every refusal answered, then the final text
    assert "hook: PreToolUse Failed" not in log  # Codex took every answer as valid
    session = re.search(r"session id: (\S+)", log)
    assert session is not None
    # The first duplicate, then the first stop (the third refusal in a row).
    incident, stop = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    assert (incident["kind"], incident["tool"], incident["count"]) == ("duplicate", "Bash", 6)
    assert (stop["kind"], stop["count"], stop["limit"]) == ("stop", 3, 3)
    assert incident["agent"] == stop["agent"] == session.group(1)  # Codex's session id


# Claude Code's stop answer (the deny plus `continue: false`), printed for every call.
CLAUDE_STOP_HOOK = """import json, sys
from dsh_circuit_breaker.breaker import Decision
from dsh_circuit_breaker.harnesses import claude_code
if json.load(sys.stdin).get("hook_event_name") == "PreToolUse":
    stop = Decision(False, "duplicate", "DENIED", 6, 6, stop=True, stop_reason="STOPPED")
    print(claude_code.answer(stop))
"""


def test_a_stop_beside_the_deny_would_lose_the_deny(codex: Path, installed: Installed) -> None:
    # Why codex answers a stop with the plain deny: Claude Code's stop answer makes Codex
    # fail the hook, so the call runs and the run goes on. This pins down that limit.
    run = Run(installed)
    script = run.home / "claude-stop-hook.py"
    script.write_text(CLAUDE_STOP_HOOK)
    hooks = json.loads((run.codex_home / "hooks.json").read_text())
    hooks["hooks"]["PreToolUse"][0]["hooks"][0]["command"] = f"{installed.python} {script}"
    (run.codex_home / "hooks.json").write_text(json.dumps(hooks))
    side = run.work / "side.txt"
    with FakeOpenAI([*probe(side, 2), "Done."]) as model:
        log = run(model, "Run the cbprobe4 probe twice.")
    assert side.read_text().splitlines() == ["cbprobe4"] * 2  # both ran: the deny was lost
    assert not any("DENIED" in o.text for o in model.tool_results())
    assert log.count("hook: PreToolUse Failed") == 2
    assert len(model.model_requests) == 3  # and the run went on


def test_untrusted_hooks_do_not_run(codex: Path, installed: Installed) -> None:
    # Codex runs a user hook only once it is trusted (approved in /hooks); until then the
    # agent is unguarded. This pins down the limit the docs state.
    run = Run(installed)
    side = run.work / "side.txt"
    with FakeOpenAI([*probe(side), "Done."]) as model:
        run(model, "Run the cbprobe4 probe ten times.", trust=False)
    assert side.read_text().splitlines() == ["cbprobe4"] * 10
    assert not any(o.text.startswith(BLOCKED) for o in model.tool_results())
    assert not run.state.exists()  # the hook never ran: it would have made its state
    # The very same hooks.json, untouched, once trusted: the hook runs and blocks. So the
    # untrusted run above was unguarded because of the trust, not a broken install.
    trusted_side = run.work / "trusted-side.txt"
    with FakeOpenAI([*probe(trusted_side), "Done."]) as model:
        run(model, "Run the cbprobe4 probe ten times.", trust=True)
    assert trusted_side.read_text().splitlines() == ["cbprobe4"] * 6
    assert [o.text.startswith(BLOCKED) for o in model.tool_results()] == [False] * 6 + [True] * 4
    assert run.state.exists()
