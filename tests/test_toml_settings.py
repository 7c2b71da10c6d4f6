"""Our hook tables in a harness's TOML file (harnesses/_toml.py), through `install`,
`uninstall` and `doctor kimi-cli` on Kimi CLI's config.toml: every line of the user's
file kept as it was, ours appended and taken out again, and a file that cannot be edited
that way, or that Kimi would refuse, left alone with one line saying why.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from dsh_circuit_breaker.core.config import Config
from dsh_circuit_breaker.core.invocation import is_ours
from dsh_circuit_breaker.harnesses import _toml
from dsh_circuit_breaker.harnesses._settings import SettingsError
from hook_support import hook_env

pytestmark = pytest.mark.timeout(120)
# Our events at the defaults: the post-tool ones too where the defaults observe results.
OURS = ["PreToolUse", "UserPromptSubmit"]
OURS += ["PostToolUse", "PostToolUseFailure"] if Config().observes_results else []
CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]

USER_FILE = """# my Kimi setup\r
default_model = "fake"   # a comment that stays

[providers.fake]
type = "openai_legacy"
base_url = "http://127.0.0.1:9/v1"
api_key = "sk-fake"

[[hooks]]
event = "Stop"
command = "notify-send 'done'"

[models.fake]
provider = "fake"
model = "fake-model"
max_context_size = 128000"""  # no newline at the end


def kimi(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = hook_env(tmp_path, KIMI_SHARE_DIR=str(tmp_path / ".kimi"))
    return subprocess.run(
        [*CLI, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


def config(tmp_path: Path, text: str | None = None) -> Path:
    path = tmp_path / ".kimi" / "config.toml"
    if text is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    return path


def test_install_appends_and_uninstall_restores_every_byte(tmp_path: Path) -> None:
    path = config(tmp_path, USER_FILE)
    path.chmod(0o640)
    done = kimi(tmp_path, "install", "kimi-cli")
    assert done.returncode == 0, done.stderr
    text = path.read_bytes().decode()
    assert text.startswith(USER_FILE + "\n")
    assert (path.stat().st_mode & 0o777) == 0o640  # the file keeps its mode
    (backup,) = path.parent.glob("config.toml.bak-*")
    assert backup.read_bytes() == USER_FILE.encode()
    data = tomllib.loads(text)
    assert data["providers"] == tomllib.loads(USER_FILE)["providers"]
    stop, pre, *more = data["hooks"]
    assert stop == {"event": "Stop", "command": "notify-send 'done'"}
    assert [h["event"] for h in [pre, *more]] == OURS
    assert all(h == {**pre, "event": h["event"]} for h in more)
    assert is_ours(pre["command"]) and pre["command"].endswith("hook --harness kimi-cli")
    assert pre["timeout"] == 30 and "matcher" not in pre  # every tool
    again = kimi(tmp_path, "install", "kimi-cli")
    assert "already installed" in again.stdout and path.read_bytes().decode() == text
    removed = kimi(tmp_path, "uninstall", "kimi-cli", "--no-backup")
    assert removed.returncode == 0, removed.stderr
    assert path.read_bytes().decode() == USER_FILE + "\n"  # a newline at the end, only


def test_a_reinstall_replaces_ours_wherever_they_are(tmp_path: Path) -> None:
    path = config(tmp_path, USER_FILE)
    assert kimi(tmp_path, "install", "kimi-cli", "--no-backup").returncode == 0
    path.write_text(path.read_text() + '\n[[hooks]]\nevent = "SessionEnd"\ncommand = "true"\n')
    # A config path TOML must escape: a quote, a backslash, a tab, DEL.
    odd = tmp_path / 'my "breaker"\\\t\x7f.json'
    odd.write_text("{}")
    done = kimi(tmp_path, "install", "kimi-cli", "--config", str(odd), "--no-backup")
    assert done.returncode == 0, done.stderr
    hooks = tomllib.loads(path.read_text())["hooks"]
    assert [h["event"] for h in hooks] == ["Stop", "SessionEnd", *OURS]
    assert all(str(odd) in shlex.split(h["command"]) for h in hooks[2:])


def test_a_file_install_made_goes_at_uninstall(tmp_path: Path) -> None:
    path = config(tmp_path)
    assert kimi(tmp_path, "install", "kimi-cli").returncode == 0
    assert [h["event"] for h in tomllib.loads(path.read_text())["hooks"]] == OURS
    assert kimi(tmp_path, "uninstall", "kimi-cli").returncode == 0
    assert list(path.parent.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('hooks = []\ndefault_model = ""\n', "cannot be changed there without rewriting"),
        ("hooks = 3\n", "`hooks` is not an array of tables"),
        ("default_model = \n", "is not valid TOML"),
        ('[[hooks]]\nevent = "BeforeTool"\ncommand = "x"\n', "event 'BeforeTool'"),
        ('[[hooks]]\nevent = "Stop"\ncommand = "x"\ntimeout = 0\n', "timeout 0"),
    ],
)
def test_a_file_that_cannot_take_ours_is_left_alone(tmp_path: Path, text: str, why: str) -> None:
    path = config(tmp_path, text)
    done = kimi(tmp_path, "install", "kimi-cli")
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("dsh-circuit-breaker: ") and why in line, line
    assert path.read_text() == text
    assert [p.name for p in path.parent.iterdir()] == ["config.toml"]  # no backup either


def test_doctor_names_a_hook_table_kimi_refuses(tmp_path: Path) -> None:
    path = config(tmp_path, "")
    assert kimi(tmp_path, "install", "kimi-cli").returncode == 0
    path.write_text(path.read_text() + '\n[[hooks]]\nevent = "Nope"\ncommand = "x"\n')
    doctor = kimi(tmp_path, "doctor", "kimi-cli")
    assert doctor.returncode == 1
    assert "event 'Nope', which Kimi does not know; Kimi refuses the file" in doctor.stdout


def test_an_old_config_json_is_moved_by_kimi_first(tmp_path: Path) -> None:
    # Kimi moves ~/.kimi/config.json into config.toml only while there is no config.toml:
    # one made by install would leave the user's providers behind.
    legacy = tmp_path / ".kimi" / "config.json"
    legacy.parent.mkdir()
    legacy.write_text('{"default_model": ""}')
    done = kimi(tmp_path, "install", "kimi-cli")
    assert done.returncode == 1 and "run `kimi` once first" in done.stderr
    assert not config(tmp_path).exists()


def test_a_json_config_file_is_not_written_as_toml(tmp_path: Path) -> None:
    done = kimi(tmp_path, "install", "kimi-cli", "--config-file", str(tmp_path / "kimi.json"))
    assert done.returncode == 1 and "name a .toml file" in done.stderr
    assert not (tmp_path / "kimi.json").exists()


def test_an_edit_that_would_change_other_data_is_refused(tmp_path: Path) -> None:
    # A table of ours followed by a line that starts with `[` inside a multi-line array: cut
    # at that line, the rest would change, and the check by parsing refuses the edit.
    path = tmp_path / "odd.toml"
    ours = "python -c 'from dsh_circuit_breaker.cli import main; main()' hook"
    path.write_text(f'[[hooks]]\nevent = "PreToolUse"\ncommand = "{ours}"\nmatcher = [\n[1]]\n')
    file = _toml.read(path, "hooks")
    with pytest.raises(SettingsError, match="make the change by hand"):
        _toml.without(file, "hooks", lambda table: is_ours(table.get("command")))
