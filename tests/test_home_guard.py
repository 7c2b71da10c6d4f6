"""The suite cannot touch the person's files (tests/support/home_guard.py): inside a session
HOME and the XDG directories are a scratch tree, the breaker's default paths land there,
and a session that writes under the real HOME anyway fails, naming what it wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_circuit_breaker.core import files

TESTS = Path(__file__).resolve().parent

INNER = """
import os
from pathlib import Path

def test_sees_a_scratch_home():
    assert os.environ["HOME"] != os.environ["REAL_HOME"]
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        assert os.environ[name].startswith(os.environ["HOME"])

def test_writes_where_it_was_told():
    target = os.environ.get("WRITE_TO")
    if target:
        Path(target).write_text("left behind")
"""


def session(
    tmp_path: Path, write_to: str | None, ignore: str = ""
) -> subprocess.CompletedProcess[str]:
    """A pytest session with the plugin, in a HOME of its own that stands for the real one."""
    home = tmp_path / "real-home"
    (home / ".config").mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_inner.py").write_text(INNER, encoding="utf-8")
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "PYTEST_"))}
    env = {**keep, "HOME": str(home), "REAL_HOME": str(home), "PYTHONPATH": str(TESTS)}
    env["DSH_CIRCUIT_BREAKER_TEST_HOME_IGNORE"] = ignore
    if write_to:
        env["WRITE_TO"] = str(home / write_to)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "support.home_guard",
        "-p",
        "no:cacheprovider",
    ]
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=60)


def test_a_session_that_leaves_home_alone_passes(tmp_path: Path) -> None:
    run = session(tmp_path, None)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "HOME changed" not in run.stdout


def test_a_session_that_writes_under_the_real_home_fails_naming_it(tmp_path: Path) -> None:
    run = session(tmp_path, ".config/written-by-a-test")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "2 passed" in run.stdout  # the tests passed; the check failed the run
    assert "HOME changed" in run.stdout
    assert str(tmp_path / "real-home" / ".config" / "written-by-a-test") in run.stdout


def test_what_another_program_writes_can_be_named_and_is_still_counted(tmp_path: Path) -> None:
    run = session(tmp_path, ".config/written-by-a-test", ignore=".config:.config/written-*")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 changed path(s) left out by DSH_CIRCUIT_BREAKER_TEST_HOME_IGNORE" in run.stdout
    other = session(tmp_path / "again", ".config/written-by-a-test", ignore=".npm/_logs/*")
    assert other.returncode == 1, other.stdout + other.stderr


def test_this_session_defaults_are_in_the_scratch_tree() -> None:
    home = os.environ["HOME"]
    assert files.default_incident_log().startswith(home)
    assert files.user_config_dir().startswith(home)
    assert os.path.expanduser("~") == home
    if "REAL_HOME" not in os.environ:  # not inside test_a_session_... above
        assert "dsh-cb-test-home-" in home


@pytest.mark.parametrize("name", ["XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"])
def test_each_xdg_directory_is_owner_only_and_under_the_scratch_home(name: str) -> None:
    path = Path(os.environ[name])
    assert str(path).startswith(os.environ["HOME"])
    assert path.stat().st_mode & 0o077 == 0
