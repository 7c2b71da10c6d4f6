"""The real Codex CLI (`codex exec`, pinned in tests/e2e/package.json) with
`dsh-circuit-breaker install codex`'s hook, against a scripted fake model speaking the
OpenAI Responses API on 127.0.0.1 (tests/support/fake_openai.py).

Codex is configured to stay offline: a custom model provider on 127.0.0.1, and the
features that would reach the network (plugin sync, apps, analytics, updates, model
discovery) turned off.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require
from hook_support import hook_env
from support.fake_openai import FakeOpenAI, function_call

CODEX = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "codex"
BLOCKED = "Command blocked by PreToolUse hook: Circuit breaker: this Bash call was NOT run."

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
    """One `codex exec` in a private HOME and CODEX_HOME, our hook installed in hooks.json."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.work = home / "work"
        self.work.mkdir()
        self.codex_home = home / ".codex"
        self.codex_home.mkdir()
        self.env = {
            k: v for k, v in hook_env(home).items() if not k.startswith(("OPENAI_", "CODEX_"))
        }
        self.env.update(CODEX_HOME=str(self.codex_home), FAKE_MODEL_KEY="sk-fake-key-for-tests")
        installed = subprocess.run(
            [sys.executable, "-m", "dsh_circuit_breaker.cli", "install", "codex"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert str(self.codex_home / "hooks.json") in installed.stdout
        self.incidents = home / "state" / "dsh-circuit-breaker" / "incidents.jsonl"

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


def probe(side: Path) -> list[dict[str, object]]:
    return [function_call("exec_command", {"cmd": f"echo cbprobe4 >> {side}"}) for _ in range(10)]


def test_probe_six_run_then_blocked(codex: Path, tmp_path: Path) -> None:
    run = Run(tmp_path)
    side = run.work / "side.txt"
    with FakeOpenAI([*probe(side), "All ten probe steps attempted."]) as model:
        log = run(model, "Run the cbprobe4 probe ten times.")
    assert side.read_text().splitlines() == ["cbprobe4"] * 6  # six really ran
    outputs = model.tool_results()
    assert [o.call_id for o in outputs] == [c["id"] for c in model.tool_uses()]
    assert [o.text.startswith(BLOCKED) for o in outputs] == [False] * 6 + [True] * 4
    for blocked in outputs[6:]:
        assert "as often as allowed (runs: 6, limit: 6)" in blocked.text
    session = re.search(r"session id: (\S+)", log)
    assert session is not None
    # The first duplicate, then the first stop (the third refusal in a row).
    incident, stop = [json.loads(line) for line in run.incidents.read_text().splitlines()]
    assert (incident["kind"], incident["tool"], incident["count"]) == ("duplicate", "Bash", 6)
    assert (stop["kind"], stop["count"], stop["limit"]) == ("stop", 3, 3)
    assert incident["agent"] == stop["agent"] == session.group(1)  # Codex's session id


def test_untrusted_hooks_do_not_run(codex: Path, tmp_path: Path) -> None:
    # Codex runs a user hook only once it is trusted (approved in /hooks); until then the
    # agent is unguarded. This pins down the limit the docs state.
    run = Run(tmp_path)
    side = run.work / "side.txt"
    with FakeOpenAI([*probe(side), "Done."]) as model:
        run(model, "Run the cbprobe4 probe ten times.", trust=False)
    assert side.read_text().splitlines() == ["cbprobe4"] * 10
    assert not any(o.text.startswith(BLOCKED) for o in model.tool_results())
    assert not (tmp_path / "state" / "dsh-circuit-breaker" / "state.db").exists()
