"""Mistral Vibe's hook file and events (harnesses/mistral_vibe.py): `install` and `uninstall`
on a user's `$VIBE_HOME/hooks.toml`, every line of theirs kept; a hook of theirs holding our
name refused; a subagent's call (`parent_session_id`, as Vibe documents it) keyed apart from
its parent's. The real CLI runs in tests/test_command_hook_e2e.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from dsh_circuit_breaker.harnesses import load
from dsh_circuit_breaker.judge import Call, Malformed
from hook_support import hook_env

pytestmark = pytest.mark.timeout(120)
CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]
USER_FILE = """# my hooks
[[hooks]]
name = "lint"   # a comment that stays
type = "post_agent"
command = "make lint"
"""


def vibe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = hook_env(tmp_path, VIBE_HOME=str(tmp_path / ".vibe"))
    return subprocess.run(
        [*CLI, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


def hooks_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / ".vibe" / "hooks.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_install_appends_named_tables_and_uninstall_restores_every_byte(tmp_path: Path) -> None:
    path = hooks_file(tmp_path, USER_FILE)
    done = vibe(tmp_path, "install", "mistral-vibe", "--no-backup")
    assert done.returncode == 0, done.stderr
    text = path.read_text()
    assert text.startswith(USER_FILE)
    tables = tomllib.loads(text)["hooks"]
    ours = [t for t in tables if t["name"].startswith("dsh-circuit-breaker-")]
    assert {t["type"] for t in ours} >= {"pre_tool"}
    assert all(t["name"] == f"dsh-circuit-breaker-{t['type']}" for t in ours)
    assert "match" not in ours[0] and "strict" not in ours[0]  # every tool; fail open
    assert len({t["name"] for t in tables}) == len(tables)  # Vibe wants names unique
    done = vibe(tmp_path, "uninstall", "mistral-vibe", "--no-backup")
    assert done.returncode == 0, done.stderr
    assert path.read_text() == USER_FILE


def test_a_hook_of_the_users_holding_our_name_is_refused(tmp_path: Path) -> None:
    taken = USER_FILE.replace('name = "lint"', 'name = "dsh-circuit-breaker-pre_tool"')
    path = hooks_file(tmp_path, taken)
    done = vibe(tmp_path, "install", "mistral-vibe")
    assert done.returncode == 1
    assert done.stderr.startswith("dsh-circuit-breaker: ") and "the name ours takes" in done.stderr
    assert path.read_text() == taken


def event(name: str, session: str, parent: str | None = None) -> dict[str, object]:
    return {
        "hook_event_name": name,
        "session_id": session,
        "parent_session_id": parent,
        "tool_name": "file_system.bash",
        "tool_call_id": "call_1",
        "tool_input": {"command": "ls"},
    }


def test_a_subagent_is_keyed_apart_from_its_parent() -> None:
    harness = load("mistral-vibe")
    parent = harness.parse(event("pre_tool", "p1"))
    child = harness.parse(event("pre_tool", "c1", parent="p1"))
    assert isinstance(parent, Call) and isinstance(child, Call)
    assert (parent.agent, child.agent) == ("p1", "p1/c1")
    assert harness.parse(event("post_tool", "c1", parent="p1")).agent == "p1/c1"  # type: ignore[union-attr]


def test_post_agent_is_no_prompt_and_an_unknown_event_is_malformed() -> None:
    harness = load("mistral-vibe")
    assert harness.parse(event("post_agent", "p1")) is None
    with pytest.raises(Malformed):
        harness.parse(event("pre_prompt", "p1"))
    with pytest.raises(Malformed):
        harness.parse({**event("pre_tool", "p1"), "session_id": ""})
