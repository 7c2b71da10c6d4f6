"""`install dsh` / `uninstall dsh` / `doctor dsh`. The file edits are checked as text and,
where the runtime is installed, by DSH itself (`dsh --dump-config`) and by booting it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import require
from dsh_circuit_breaker.cli import main
from dsh_circuit_breaker.dsh import plugin_path
from dsh_circuit_breaker.dsh.install import BEGIN, SIDECAR, SKILL_NAME, find_entries
from support.dsh_runtime import dsh_command, dsh_runtime_available

OTHER_ROWS = """# my own settings
- id: repeat-tool-reminder
  disabled: true
- insert:
    - id: mine
      name: ./my-plugin.mjs
"""


def cli(*args: str) -> int:
    return main(list(args))


def patch_file(home: Path, profile: str = "sdk") -> Path:
    return home / "profiles" / profile / "cordis.patch.yml"


def test_install_into_fresh_profile_is_idempotent_and_uninstall_restores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    assert cli("install", "dsh", "--dsh-home", str(home), "--profile", "work") == 0
    text = patch_file(home, "work").read_text()
    assert text.count(BEGIN) == 1
    assert json.dumps(str(plugin_path())) in text
    sidecar = json.loads((home / "profiles" / "work" / SIDECAR).read_text())
    assert Path(sidecar["python"]).name.startswith("python")

    assert cli("install", "dsh", "--dsh-home", str(home), "--profile", "work") == 0
    assert patch_file(home, "work").read_text() == text  # idempotent
    assert "already installed" in capsys.readouterr().out
    assert list(patch_file(home, "work").parent.glob("*.bak-*")) == []  # nothing to back up

    assert cli("uninstall", "dsh", "--dsh-home", str(home), "--profile", "work") == 0
    assert patch_file(home, "work").read_text().strip() == "[]"
    assert not (home / "profiles" / "work" / SIDECAR).exists()


def test_install_keeps_every_other_row_and_backs_up(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = patch_file(home)
    path.parent.mkdir(parents=True)
    path.write_text(OTHER_ROWS)
    assert cli("install", "dsh", "--dsh-home", str(home)) == 0
    text = path.read_text()
    assert text.startswith("# my own settings\n" + BEGIN)  # our insert comes before any row
    assert text.endswith(OTHER_ROWS.split("\n", 1)[1])
    backups = list(path.parent.glob("cordis.patch.yml.bak-*"))
    assert [b.read_text() for b in backups] == [OTHER_ROWS]

    assert cli("uninstall", "dsh", "--dsh-home", str(home)) == 0
    assert path.read_text() == OTHER_ROWS
    assert cli("uninstall", "dsh", "--dsh-home", str(home)) == 0  # nothing left to remove


def test_dsh_initial_empty_list_is_replaced(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = patch_file(home)
    path.parent.mkdir(parents=True)
    path.write_text("# Your patch layer for this dsh profile\n[]\n")
    assert cli("install", "dsh", "--dsh-home", str(home)) == 0
    text = path.read_text()
    assert "[]" not in text and text.startswith("# Your patch layer")


def test_flow_list_with_rows_is_refused_not_mangled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    path = patch_file(home)
    path.parent.mkdir(parents=True)
    path.write_text("[{id: timer, disabled: true}]\n")
    assert cli("install", "dsh", "--dsh-home", str(home)) == 1
    assert path.read_text() == "[{id: timer, disabled: true}]\n"
    assert "add this row at its top by hand" in capsys.readouterr().err.lower()


def test_skill_install_and_uninstall(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli("install", "dsh", "--dsh-home", str(home), "--skill") == 0
    skill = home / "skills" / SKILL_NAME / "SKILL.md"
    text = skill.read_text()
    assert text.startswith(f"---\nname: {SKILL_NAME}\ndescription: ")
    assert "interrupt_agent" in text and "incident log" in text
    assert cli("uninstall", "dsh", "--dsh-home", str(home), "--skill") == 0
    assert not skill.exists()


# -- with the real runtime -----------------------------------------------------------------


@pytest.fixture
def dsh() -> list[str]:
    require(dsh_runtime_available(), "the DeepSeek Harness runtime (deepseek-harness-sdk)")
    return dsh_command()


def dump_config(dsh: list[str], home: Path, profile: str = "sdk") -> str:
    env = {"DSH_HOME": str(home), "DSH_TELEMETRY_DISABLED": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [*dsh, "--profile", profile, "--dump-config"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_dsh_sees_exactly_our_entry_and_keeps_the_others(dsh: list[str], tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "profiles" / "sdk").mkdir(parents=True)
    # An override row for an existing entry and a disable row, as a user would have.
    patch_file(home).write_text("- id: timer\n  disabled: true\n")
    assert cli("install", "dsh", "--dsh-home", str(home)) == 0
    dump = dump_config(dsh, home)
    entries = find_entries(dump)
    assert [(e["id"], e["name"]) for e in entries] == [("circuit-breaker", plugin_path().as_uri())]
    assert "- id: timer\n  name: '@deepseek-ai/cordis-plugin-timer'\n  disabled: true" in dump

    assert cli("uninstall", "dsh", "--dsh-home", str(home)) == 0
    dump = dump_config(dsh, home)
    assert find_entries(dump) == []
    assert "disabled: true" in dump.split("- id: timer", 1)[1].split("- id:", 1)[0]


def test_doctor_passes_when_installed_and_fails_on_bad_config_or_no_row(
    dsh: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    doctor = ["doctor", "dsh", "--dsh-home", str(home), "--dsh", dsh[0]]
    assert cli("install", "dsh", "--dsh-home", str(home)) == 0
    capsys.readouterr()
    assert cli(*doctor) == 0
    out = capsys.readouterr().out
    assert "ok    plugin activated" in out and "FAIL" not in out

    # The documented override row with a typo: DSH boots without the plugin (fail open,
    # silently in the file), and doctor is what notices, naming the key.
    (home / "cordis.patch.yml").write_text("- id: circuit-breaker\n  config: {duplicateLimt: 3}\n")
    assert cli(*doctor) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "duplicateLimt" in out

    (home / "cordis.patch.yml").write_text("- id: circuit-breaker\n  disabled: true\n")
    assert cli(*doctor) == 1
    assert "FAIL  entry enabled (disabled: true)" in capsys.readouterr().out

    (home / "cordis.patch.yml").unlink()
    assert cli("uninstall", "dsh", "--dsh-home", str(home)) == 0
    capsys.readouterr()
    assert cli(*doctor) == 1
    assert "0 circuit-breaker entries" in capsys.readouterr().out


def test_doctor_reports_a_guard_that_cannot_start(
    dsh: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    args = ["--dsh-home", str(home), "--python", "/nonexistent/python3"]
    assert cli("install", "dsh", *args) == 0
    capsys.readouterr()
    assert cli("doctor", "dsh", "--dsh-home", str(home), "--dsh", dsh[0]) == 1
    out = capsys.readouterr().out
    assert "guard did not start" in out and "/nonexistent/python3" in out
