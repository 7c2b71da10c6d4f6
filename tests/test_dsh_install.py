"""`install dsh` / `uninstall dsh` / `doctor dsh`. The file edits are checked as text and,
where the runtime is installed, by DSH itself (`dsh --dump-config`) and by booting it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dsh_circuit_breaker
from conftest import require
from dsh_circuit_breaker.cli import main
from dsh_circuit_breaker.dsh import plugin_path
from dsh_circuit_breaker.dsh.dump import Expression, file_of, find_entries, load
from dsh_circuit_breaker.harnesses.dsh import BEGIN, SIDECAR, SKILL_NAME
from support.dsh_runtime import create_profile, dsh_command, dsh_runtime_available
from support.installed import Installed

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


def new_profile(home: Path, name: str = "sdk") -> Path:
    """A profile as DSH's initProfile leaves it: a package.json is what makes it one."""
    directory = home / "profiles" / name
    directory.mkdir(parents=True)
    manifest = {"name": f"dsh-profile-{name}", "private": True, "dependencies": {}}
    (directory / "package.json").write_text(json.dumps(manifest))
    return directory


def test_install_into_fresh_profile_is_idempotent_and_uninstall_restores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    new_profile(home, "work")
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


def test_install_keeps_every_other_row_and_backs_up_with_a_utc_name(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = new_profile(home) / "cordis.patch.yml"
    path.write_text(OTHER_ROWS)
    assert cli("install", "dsh", "--dsh-home", str(home)) == 0
    text = path.read_text()
    assert text.startswith("# my own settings\n" + BEGIN)  # our insert comes before any row
    assert text.endswith(OTHER_ROWS.split("\n", 1)[1])
    backups = list(path.parent.glob("cordis.patch.yml.bak-*"))
    assert [b.read_text() for b in backups] == [OTHER_ROWS]
    # The one naming every installer uses (harnesses/_settings.write_text): UTC, with Z.
    assert re.fullmatch(r"cordis\.patch\.yml\.bak-\d{8}T\d{6}Z", backups[0].name)

    assert cli("uninstall", "dsh", "--dsh-home", str(home)) == 0
    assert path.read_text() == OTHER_ROWS
    assert cli("uninstall", "dsh", "--dsh-home", str(home)) == 0  # nothing left to remove


def test_dsh_initial_empty_list_is_replaced(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = new_profile(home) / "cordis.patch.yml"
    path.write_text("# Your patch layer for this dsh profile\n[]\n")
    assert cli("install", "dsh", "--dsh-home", str(home)) == 0
    text = path.read_text()
    assert "[]" not in text and text.startswith("# Your patch layer")


def test_flow_list_with_rows_is_refused_not_mangled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    path = new_profile(home) / "cordis.patch.yml"
    path.write_text("[{id: timer, disabled: true}]\n")
    assert cli("install", "dsh", "--dsh-home", str(home)) == 1
    assert path.read_text() == "[{id: timer, disabled: true}]\n"
    assert "add this row at its top by hand" in capsys.readouterr().err.lower()


def test_a_profile_that_does_not_exist_is_refused_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    new_profile(home, "sdk")
    new_profile(home, "mine")
    for action in ("install", "doctor"):
        assert cli(action, "dsh", "--dsh-home", str(home), "--profile", "web") == 1
        out = capsys.readouterr()
        message = out.err + out.out
        assert f"DSH profile 'web' does not exist in {home / 'profiles'}" in message
        assert "(existing: mine, sdk)" in message
        assert f"DSH_HOME={home} dsh --profile web --dump-config" in message
        assert "dsh --profile web --from-default-profile sdk --dump-config" in message
        assert sorted(p.name for p in (home / "profiles").iterdir()) == ["mine", "sdk"]


def test_skill_install_and_uninstall_touch_only_the_skill(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli("install", "dsh", "--dsh-home", str(home), "--skill") == 0
    skill = home / "skills" / SKILL_NAME / "SKILL.md"
    text = skill.read_text()
    assert text.startswith(f"---\nname: {SKILL_NAME}\ndescription: ")
    assert "interrupt_agent" in text and "incident log" in text
    assert not (home / "profiles").exists()  # no profile needed, none touched

    new_profile(home)
    assert cli("install", "dsh", "--dsh-home", str(home)) == 0
    row = patch_file(home).read_text()
    assert cli("uninstall", "dsh", "--dsh-home", str(home), "--skill") == 0
    assert not skill.exists()
    assert patch_file(home).read_text() == row  # the plugin stays


def help_of(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as exited:
        cli(*args, "--help")
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_each_action_shows_only_its_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    doctor = help_of(capsys, "doctor", "dsh")
    assert "--profile" in doctor and "--dsh-home" in doctor and "--dsh PATH" in doctor
    assert "--python" not in doctor and "--skill" not in doctor
    install = help_of(capsys, "install", "dsh")
    assert "--python" in install and "--skill" in install and "--dsh PATH" not in install
    uninstall = help_of(capsys, "uninstall", "dsh")
    assert "--skill" in uninstall and "--python" not in uninstall


def test_doctor_without_the_runtime_says_how_to_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    new_profile(home)
    assert cli("install", "dsh", "--dsh-home", str(home)) == 0
    capsys.readouterr()
    # This environment without the runtime: its package cannot be imported, no dsh on PATH.
    monkeypatch.setitem(sys.modules, "deepseek_harness_runtime", None)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert cli("doctor", "dsh", "--dsh-home", str(home)) == 1
    out = capsys.readouterr().out
    assert "PROBLEM  no DSH runtime (deepseek-harness-sdk) in this environment" in out
    assert "pip install 'dsh-circuit-breaker[dsh]'" in out and "pip install '.[dsh]'" in out


def test_dump_reader_keeps_unknown_tags_and_reads_groups() -> None:
    # The shapes DSH prints (the real dump is read in the tests below).
    dump = (
        "# == bundle\n- id: a\n  name: '@x/a'\n  disabled: !!js '!ctx.get(''p'')'\n"
        "- id: g\n  group: true\n  config:\n    - id: circuit-breaker\n      name: >-\n"
        "        file:///a%20b/plugin.mjs\n"
    )
    rows = load(dump)
    assert [r["id"] for r in rows] == ["a", "g", "circuit-breaker"]
    assert isinstance(rows[0]["disabled"], Expression) and rows[0]["disabled"] == "!ctx.get('p')"
    assert file_of(rows[2]["name"]) == Path("/a b/plugin.mjs")
    assert [e["id"] for e in find_entries(dump)] == ["circuit-breaker"]
    with pytest.raises(ValueError, match="not YAML"):
        load("- id: [unclosed\n")
    with pytest.raises(ValueError, match="list of entries"):
        load("id: a\n")


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


# A directory name as a user's could be: spaces, non-ASCII, and long enough (over 200
# characters in all) that DSH folds the paths under it into `>-` block scalars.
AWKWARD = "Mes Documents/ünïcødé пути 工作/" + "long-directory-name-" * 8


def test_dsh_sees_exactly_our_entry_and_keeps_the_others(dsh: list[str], tmp_path: Path) -> None:
    home = tmp_path / "home"
    create_profile(home)
    # An override row for an existing entry and a disable row, as a user would have.
    patch_file(home).write_text("- id: timer\n  disabled: true\n")
    assert cli("install", "dsh", "--dsh-home", str(home)) == 0
    dump = dump_config(dsh, home)
    entries = find_entries(dump)
    assert [(e["id"], file_of(e["name"])) for e in entries] == [("circuit-breaker", plugin_path())]
    assert "- id: timer\n  name: '@deepseek-ai/cordis-plugin-timer'\n  disabled: true" in dump

    assert cli("uninstall", "dsh", "--dsh-home", str(home)) == 0
    dump = dump_config(dsh, home)
    assert find_entries(dump) == []
    assert "disabled: true" in dump.split("- id: timer", 1)[1].split("- id:", 1)[0]


def test_dump_with_long_spaced_non_ascii_paths_is_read_exactly(
    dsh: list[str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    create_profile(home)
    where = tmp_path / AWKWARD
    where.mkdir(parents=True)
    plugin = where / "plugin.mjs"
    shutil.copyfile(plugin_path(), plugin)
    python = str(where / "bin" / "python 3")
    assert len(str(plugin)) > 200
    row = {"id": "circuit-breaker", "name": str(plugin), "config": {"python": python}}
    patch_file(home).write_text(
        f"- insert: [{json.dumps(row)}]\n- id: timer\n  disabled: !!js 'process.env.X === \"1\"'\n"
    )
    dump = dump_config(dsh, home)
    assert "  name: >-\n" in dump  # DSH folded it: the case a line reader got wrong

    [entry] = find_entries(dump)
    assert file_of(entry["name"]) == plugin
    assert entry["config"] == {"python": python}
    [timer] = [e for e in load(dump) if e["id"] == "timer"]
    assert timer["disabled"] == 'process.env.X === "1"'


def test_doctor_passes_for_a_package_at_a_long_awkward_path(dsh: list[str], tmp_path: Path) -> None:
    # This package copied where a user's venv could be, so that its plugin file's path is
    # over 200 characters with spaces and non-ASCII; run as that user would run it.
    site = tmp_path / AWKWARD / "site-packages"
    shutil.copytree(
        Path(dsh_circuit_breaker.__file__).parent,
        site / "dsh_circuit_breaker",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    home = tmp_path / "home"
    create_profile(home)
    env = {**os.environ, "PYTHONPATH": str(site), "DSH_HOME": str(home)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "dsh_circuit_breaker.cli", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)

    assert run("install", "dsh").returncode == 0
    done = run("doctor", "dsh", "--dsh", dsh[0])
    assert done.returncode == 0, done.stdout + done.stderr
    plugin = site / "dsh_circuit_breaker" / "js" / "dsh.mjs"
    assert f"ok       plugin file exists: {plugin}\n" in done.stdout
    assert "ok       plugin loaded in DSH; guard answered" in done.stdout
    assert "PROBLEM" not in done.stdout


# `doctor dsh` is what a DSH user runs to trust an install, so it runs as theirs: the
# installed wheel's console script (on PATH, with its venv's own DSH runtime) and its
# plugin, at a path over 100 characters.
def test_doctor_passes_when_installed_and_fails_on_bad_config_or_no_row(
    dsh: list[str], installed: Installed
) -> None:
    home = installed.home / "dsh"
    create_profile(home)
    doctor = ["doctor", "dsh", "--dsh-home", str(home)]
    assert installed.run("install", "dsh", "--dsh-home", str(home)).returncode == 0
    done = installed.run(*doctor)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ok       plugin file exists: {installed.plugin}\n" in done.stdout
    assert "ok       plugin loaded in DSH; guard answered" in done.stdout
    assert "PROBLEM" not in done.stdout
    assert "ok       dsh 0.2.1-rc.2 (" in done.stdout  # the runtime itself, with its version

    # The documented override row with a typo: DSH boots without the plugin (fail open,
    # silently in the file), and doctor is what notices, naming the key.
    (home / "cordis.patch.yml").write_text("- id: circuit-breaker\n  config: {duplicateLimt: 3}\n")
    done = installed.run(*doctor)
    assert done.returncode == 1
    assert "PROBLEM" in done.stdout and "duplicateLimt" in done.stdout

    (home / "cordis.patch.yml").write_text("- id: circuit-breaker\n  disabled: true\n")
    done = installed.run(*doctor)
    assert done.returncode == 1
    assert "PROBLEM  entry disabled (disabled: true)" in done.stdout

    (home / "cordis.patch.yml").unlink()
    assert installed.run("uninstall", "dsh", "--dsh-home", str(home)).returncode == 0
    done = installed.run(*doctor)
    assert done.returncode == 1
    assert "PROBLEM  not installed: no row in" in done.stdout
    assert "0 circuit-breaker entries" in done.stdout


def test_doctor_reports_a_guard_that_cannot_start(dsh: list[str], installed: Installed) -> None:
    home = installed.home / "dsh"
    create_profile(home)
    args = ["--dsh-home", str(home), "--python", "/nonexistent/python3"]
    assert installed.run("install", "dsh", *args).returncode == 0
    done = installed.run("doctor", "dsh", "--dsh-home", str(home))
    assert done.returncode == 1
    assert "guard did not start" in done.stdout and "/nonexistent/python3" in done.stdout
