"""Our hook in the OpenHands CLI's hooks.json, through `install`, `uninstall` and `doctor
openhands-cli`: the user's other hooks and keys kept, the file's own shape and spelling kept
(with or without the `hooks` wrapper, `PreToolUse` or `pre_tool_use`), uninstall giving back
the very bytes, and a file OpenHands would refuse, or would not read, named. What install
writes is loaded by the OpenHands SDK's own `HookConfig` (the CLI's venv that scripts/setup
makes), so it is what OpenHands reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.core.config import Config
from dsh_circuit_breaker.core.invocation import is_ours
from hook_support import hook_env
from support.command_hook_harnesses import OpenHandsCli

pytestmark = pytest.mark.timeout(120)
CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]
OURS = ["PreToolUse", "UserPromptSubmit", *(["PostToolUse"] if Config().observes_results else [])]
AGENT_PYTHON = OpenHandsCli.cli_dir() / "python"
USER_TEXT = """{
  "hooks": {
    "Stop": [{"matcher": "*", "hooks": [{"type": "command", "command": "notify-send done"}]}],
    "PreToolUse": [{"matcher": "terminal", "hooks": [{"command": "./check.sh", "timeout": 5}]}]
  }
}"""  # no newline at the end, two-space indent, its own key order


def openhands(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=hook_env(home),
        cwd=cwd or home,
        capture_output=True,
        text=True,
        timeout=60,
    )


def user_file(home: Path, text: str | None = None) -> Path:
    path = home / ".openhands" / "hooks.json"
    if text is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def ours_in(events: dict[str, Any]) -> dict[str, list[str]]:
    return {
        event: [h["command"] for g in groups for h in g["hooks"] if is_ours(h.get("command"))]
        for event, groups in events.items()
    }


def loaded_by_openhands(path: Path) -> dict[str, list[str]]:
    """field -> the commands OpenHands' own HookConfig reads from `path`."""
    require(AGENT_PYTHON.exists(), f"the OpenHands CLI's venv at {AGENT_PYTHON} (scripts/setup)")
    script = (
        "import json, sys\n"
        "from openhands.sdk.hooks import HookConfig\n"
        "c = HookConfig.load(sys.argv[1]).model_dump()\n"
        "got = {k: [h['command'] for m in v for h in m['hooks']] for k, v in c.items()}\n"
        "print(json.dumps(got))"
    )
    done = subprocess.run(
        [str(AGENT_PYTHON), "-c", script, str(path)], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded: dict[str, list[str]] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_install_keeps_the_users_hooks_and_uninstall_restores_every_byte(tmp_path: Path) -> None:
    path = user_file(tmp_path, USER_TEXT)
    done = openhands(tmp_path, "install", "openhands-cli", "--no-backup")
    assert done.returncode == 0 and f"installed in {path}" in done.stdout, done.stderr
    events = json.loads(path.read_text())["hooks"]
    assert events["Stop"] == json.loads(USER_TEXT)["hooks"]["Stop"]
    assert events["PreToolUse"][0] == json.loads(USER_TEXT)["hooks"]["PreToolUse"][0]
    assert {e: len(c) for e, c in ours_in(events).items() if c} == dict.fromkeys(OURS, 1)
    loaded = loaded_by_openhands(path)
    assert loaded["pre_tool_use"][0] == "./check.sh" and is_ours(loaded["pre_tool_use"][1])
    assert loaded["stop"] == ["notify-send done"]
    again = openhands(tmp_path, "install", "openhands-cli", "--no-backup")
    assert "already installed" in again.stdout
    removed = openhands(tmp_path, "uninstall", "openhands-cli", "--no-backup")
    assert removed.returncode == 0 and "removed from" in removed.stdout
    assert path.read_text() == json.dumps(json.loads(USER_TEXT), indent=2) + "\n"


def test_uninstall_with_a_backup_gives_back_the_users_own_text(tmp_path: Path) -> None:
    path = user_file(tmp_path, USER_TEXT)
    assert openhands(tmp_path, "install", "openhands-cli").returncode == 0
    assert openhands(tmp_path, "uninstall", "openhands-cli").returncode == 0
    assert path.read_text() == USER_TEXT


def test_a_file_install_made_goes_at_uninstall(tmp_path: Path) -> None:
    path = user_file(tmp_path)
    assert openhands(tmp_path, "install", "openhands-cli").returncode == 0
    assert set(loaded_by_openhands(path)["pre_tool_use"]) != set()
    assert openhands(tmp_path, "uninstall", "openhands-cli").returncode == 0
    assert not path.exists()


def test_the_files_own_shape_and_spelling_are_kept(tmp_path: Path) -> None:
    # No `hooks` wrapper, snake_case: adding `hooks` would hide these (OpenHands unwraps it
    # and drops the rest), and `PreToolUse` beside `pre_tool_use` makes it refuse the file.
    own = {"pre_tool_use": [{"matcher": "*", "hooks": [{"command": "./mine.sh"}]}]}
    path = user_file(tmp_path, json.dumps(own))
    assert openhands(tmp_path, "install", "openhands-cli", "--no-backup").returncode == 0
    written = json.loads(path.read_text())
    assert "hooks" not in written and "PreToolUse" not in written
    assert written["pre_tool_use"][0] == own["pre_tool_use"][0]
    loaded = loaded_by_openhands(path)
    assert loaded["pre_tool_use"][0] == "./mine.sh" and is_ours(loaded["pre_tool_use"][1])
    assert is_ours(loaded["user_prompt_submit"][0])
    doctor = openhands(tmp_path, "doctor", "openhands-cli")
    assert "OpenHands CLI (user, " in doctor.stdout and "hook installed" in doctor.stdout
    assert openhands(tmp_path, "uninstall", "openhands-cli", "--no-backup").returncode == 0
    assert json.loads(path.read_text()) == own


def test_project_scope_writes_the_projects_file(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    done = openhands(tmp_path, "install", "openhands-cli", "--scope", "project", cwd=project)
    assert done.returncode == 0, done.stderr
    assert (project / ".openhands" / "hooks.json").exists()
    assert not user_file(tmp_path).exists()


def test_a_project_file_hides_the_users_and_install_says_so(tmp_path: Path) -> None:
    # OpenHands reads the first hooks.json it finds, the project's before the user's.
    project = tmp_path / "repo"
    (project / ".openhands").mkdir(parents=True)
    (project / ".openhands" / "hooks.json").write_text('{"hooks": {}}')
    done = openhands(tmp_path, "install", "openhands-cli", cwd=project)
    assert done.returncode == 1 and "--scope project" in done.stderr, done.stderr
    assert not user_file(tmp_path).exists()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"hooks": {"BeforeTool": []}}', "'BeforeTool', which OpenHands does not know"),
        (
            '{"hooks": {"PreToolUse": [], "pre_tool_use": []}}',
            "both 'PreToolUse' and 'pre_tool_use'",
        ),
        ('{"hooks": {"Stop": [{"hooks": [{"timeout": 3}]}]}}', "a group under 'Stop'"),
    ],
)
def test_a_file_openhands_refuses_is_left_alone(tmp_path: Path, text: str, why: str) -> None:
    path = user_file(tmp_path, text)
    done = openhands(tmp_path, "install", "openhands-cli")
    assert done.returncode == 1 and why in done.stderr, done.stderr
    assert done.stderr.startswith("dsh-circuit-breaker: ")
    assert path.read_text() == text


@pytest.mark.parametrize(
    "text", ["[1, 2]", '{"hooks": []}', '{"hooks": {"PreToolUse": {}}}', "{not json"]
)
def test_a_file_of_another_shape_is_not_changed(tmp_path: Path, text: str) -> None:
    path = user_file(tmp_path, text)
    done = openhands(tmp_path, "install", "openhands-cli")
    assert done.returncode == 1 and done.stderr.startswith("dsh-circuit-breaker: "), done.stderr
    assert "Traceback" not in done.stderr
    assert path.read_text() == text
