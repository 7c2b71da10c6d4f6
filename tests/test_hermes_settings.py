"""Our hook entries in Hermes Agent's config.yaml (harnesses/hermes.py), through `install`
and `uninstall hermes`: the user's other keys and hooks kept, ours added once and taken out
again, and a file of another shape left alone with one line saying why.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dsh_circuit_breaker.core.config import Config
from dsh_circuit_breaker.core.invocation import is_ours
from hook_support import hook_env

pytestmark = pytest.mark.timeout(120)
OURS = ["pre_tool_call", "pre_llm_call"]
OURS += ["post_tool_call"] if Config().observes_results else []
CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]

USER_FILE = """model:
  provider: custom
  default: fake-model
hooks_auto_accept: true
hooks:
  pre_tool_call:
  - command: ~/bin/audit.sh
    matcher: terminal
  on_session_end:
  - command: notify-send done
"""


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = hook_env(home, HERMES_HOME=str(home / ".hermes"))
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / ".hermes" / "config.yaml"
    path.parent.mkdir()
    path.write_text(USER_FILE)
    return path


def test_install_keeps_the_users_entries_and_uninstall_restores_them(
    tmp_path: Path, config: Path
) -> None:
    for _ in range(2):  # a second install changes nothing
        done = cli(tmp_path, "install", "hermes", "--no-backup")
        assert done.returncode == 0, done.stderr
    data = yaml.safe_load(config.read_text())
    hooks = data.pop("hooks")
    assert data == {
        "model": {"provider": "custom", "default": "fake-model"},
        "hooks_auto_accept": True,
    }
    assert hooks["on_session_end"] == [{"command": "notify-send done"}]
    assert hooks["pre_tool_call"][0] == {"command": "~/bin/audit.sh", "matcher": "terminal"}
    ours = {e: [h for h in entries if is_ours(h["command"])] for e, entries in hooks.items()}
    assert sorted(e for e, found in ours.items() if found) == sorted(OURS)
    assert all(len(found) <= 1 for found in ours.values())
    done = cli(tmp_path, "uninstall", "hermes", "--no-backup")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(config.read_text()) == yaml.safe_load(USER_FILE)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("model: [unclosed\n", "is not valid YAML"),
        ("- a list\n", "does not hold a YAML mapping"),
        ("hooks: [pre_tool_call]\n", "`hooks` is not a mapping"),
        ("hooks:\n  pre_tool_call: {command: x}\n", "`hooks.pre_tool_call` is not a list"),
    ],
)
def test_a_file_of_another_shape_is_left_alone(
    tmp_path: Path, config: Path, text: str, said: str
) -> None:
    config.write_text(text)
    done = cli(tmp_path, "install", "hermes")
    assert done.returncode == 1
    assert done.stderr.startswith("dsh-circuit-breaker: ") and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert config.read_text() == text
    assert list(config.parent.iterdir()) == [config]  # no backup, nothing written
