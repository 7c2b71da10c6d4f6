"""`install claude-code --http` in a scratch HOME: the HTTP hooks, the SessionStart start
command and the token in the settings' env; switching back to the command hook and
uninstalling leave nothing of ours; doctor tells a guard that answers from one that does
not, and refuses the project scope (the token would go into the repository)."""

from __future__ import annotations

import json
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.core import invocation
from hook_support import hook_env
from support.guard_service import CLI, Service, metric_samples, state_dir

pytestmark = pytest.mark.timeout(120)  # doctor starts the real CLI


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, cwd=env["HOME"], capture_output=True, text=True, timeout=120
    )


def test_install_writes_http_hooks_and_the_start_command(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"env": {"KEEP": "1"}, "model": "x", "hooks": {}}))
    (tmp_path / "b.toml").write_text("")  # install loads it: a missing file is refused
    done = cli(env, "install", "claude-code", "--http", "127.0.0.1:9999", "--config", "b.toml")
    assert done.returncode == 0, done
    assert "every prompt and tool call is refused" in done.stdout
    token_file = state_dir(tmp_path) / "http-token"
    page = f"  the live page: http://127.0.0.1:9999/?token={token_file.read_text().strip()}\n"
    assert page in done.stdout  # was only in the guard's log, once it started
    data: dict[str, Any] = json.loads(settings.read_text())
    token = (state_dir(tmp_path) / "http-token").read_text().strip()
    assert data["env"] == {"KEEP": "1", "DSH_CIRCUIT_BREAKER_TOKEN": token}
    assert data["model"] == "x"
    for event in ("PreToolUse", "UserPromptSubmit"):
        (group,) = data["hooks"][event]
        assert group == {
            "hooks": [
                {
                    "type": "http",
                    "url": "http://127.0.0.1:9999/hook/claude-code",
                    "headers": {"Authorization": "Bearer ${DSH_CIRCUIT_BREAKER_TOKEN}"},
                    "allowedEnvVars": ["DSH_CIRCUIT_BREAKER_TOKEN"],
                    "timeout": 30,
                    "onFailure": "block",
                }
            ]
        }
    (start,) = data["hooks"]["SessionStart"]
    words = shlex.split(start["hooks"][0]["command"])
    assert words[3:] == [
        "serve",
        "--http",
        "127.0.0.1:9999",
        "--config",
        str(tmp_path / "b.toml"),
        "--ensure",
    ]
    assert invocation.is_ours(start["hooks"][0]["command"], "serve")
    again = cli(env, "install", "claude-code", "--http", "127.0.0.1:9999", "--config", "b.toml")
    assert "already installed" in again.stdout
    # Back to the command hook: the HTTP entries, the start command and the token go.
    back = cli(env, "install", "claude-code")
    assert back.returncode == 0, back
    data = json.loads(settings.read_text())
    assert data["env"] == {"KEEP": "1"} and "SessionStart" not in data["hooks"]
    assert [h["type"] for g in data["hooks"]["PreToolUse"] for h in g["hooks"]] == ["command"]
    cli(env, "install", "claude-code", "--http")
    gone = cli(env, "uninstall", "claude-code")
    assert gone.returncode == 0 and "removed" in gone.stdout
    assert json.loads(settings.read_text()) == {"env": {"KEEP": "1"}, "model": "x"}


def test_a_new_settings_file_is_owner_only(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    own = tmp_path / "mine.json"
    assert cli(env, "install", "claude-code", "--http", "--settings", str(own)).returncode == 0
    assert stat.S_IMODE(own.stat().st_mode) == 0o600
    url = json.loads(own.read_text())["hooks"]["PreToolUse"][0]["hooks"][0]["url"]
    assert url == "http://127.0.0.1:8741/hook/claude-code"  # the default address


def test_project_scope_is_refused(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    done = cli(
        env, "install", "claude-code", "--http", "--scope", "project", "--project", str(tmp_path)
    )
    assert done.returncode == 2 and "--scope local" in done.stderr
    assert not (tmp_path / ".claude" / "settings.json").exists()
    assert cli(env, "install", "codex", "--http").returncode == 2  # Codex has no HTTP hooks


def test_doctor_checks_that_the_guard_answers(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    with Service(env, token=None) as service:
        address = f"127.0.0.1:{service.port}"
        assert cli(env, "install", "claude-code", "--http", address).returncode == 0
        up = cli(env, "doctor", "claude-code")
        assert (
            f"ok       the guard answers at {service.origin}/hook/claude-code (PreToolUse"
            in up.stdout
        )
        assert "UserPromptSubmit in" in up.stdout
        assert "ok       SessionStart starts the guard" in up.stdout
        assert "the hook is not installed" not in up.stdout
        # The probe is no agent's work: not an allow, not a prompt, not on the page.
        samples = metric_samples(service.metrics())
        harness = (("harness", "claude-code"),)
        assert samples[("dsh_circuit_breaker_probes_total", harness)] == 2
        counted = ("dsh_circuit_breaker_decisions_total", "dsh_circuit_breaker_prompts_total")
        judged = [k for k in samples if k[0] in counted]
        assert judged == [], judged  # was decisions_total{kind="allow"} 1, prompts_total 1
        assert samples[("dsh_circuit_breaker_agents_tracked", ())] == 0
        assert service.json("/api/agents")["agents"] == []
    down = cli(env, "doctor", "claude-code")
    assert down.returncode == 1
    assert "PROBLEM  the guard does not answer at" in down.stdout
    assert "refuses every prompt and tool call until it does" in down.stdout
    # How to start it, at the address the hooks ask (was `serve --http ADDRESS`).
    assert f"start it: `dsh-circuit-breaker serve --http {address}` (a new session's" in (
        down.stdout
    )
