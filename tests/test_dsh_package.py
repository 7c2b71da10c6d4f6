"""`dsh-circuit-breaker dsh-package` and DSH's own plugin manager: the npm package it writes,
installed by the real runtime's `dsh plugin --profile NAME add FILE.tgz` through pnpm (pinned
in tests/e2e/package.json) with every registry unreachable, then doctor, a real session that
trips the breaker, and `dsh plugin remove`."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from conftest import require
from dsh_circuit_breaker.cli import main
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from dsh_circuit_breaker.dsh import NPM_NAME, PLUGIN_ID, plugin_path
from support.dsh_runtime import DshSession, dsh_command, dsh_runtime_available, python
from support.fake_anthropic import tool_use
from support.installed import Installed

PNPM_BIN = Path(__file__).parent / "e2e" / "node_modules" / ".bin"


def write_package(out: Path, *extra: str) -> Path:
    assert main(["dsh-package", "--out", str(out), *extra]) == 0
    [tarball] = out.glob("*.tgz")
    return tarball


def test_package_is_a_dsh_bundle_inserting_this_plugin_and_is_reproducible(
    tmp_path: Path,
) -> None:
    first = write_package(tmp_path / "a", "--python", "/opt/my venv/bin/python")
    second = write_package(tmp_path / "b", "--python", "/opt/my venv/bin/python")
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        assert tar.getnames() == ["package/package.json", "package/cordis.patch.yml"]
        manifest = json.load(tar.extractfile("package/package.json"))
        patch = yaml.safe_load(tar.extractfile("package/cordis.patch.yml"))
    assert manifest["name"] == NPM_NAME and first.name == f"{NPM_NAME}-{manifest['version']}.tgz"
    assert manifest["dsh"] == {"bundle": {"patch": "./cordis.patch.yml"}}
    assert patch == [
        {
            "insert": [
                {
                    "id": PLUGIN_ID,
                    "name": str(plugin_path()),
                    "config": {"python": "/opt/my venv/bin/python"},
                }
            ]
        }
    ]


@pytest.fixture
def session(tmp_path: Path, installed: Installed) -> DshSession:
    require(dsh_runtime_available(), "the DeepSeek Harness runtime (deepseek-harness-sdk)")
    require((PNPM_BIN / "pnpm").exists(), "pnpm (tests/e2e: npm ci)")
    return DshSession(tmp_path)


def plugin_manager(session: DshSession, *args: str) -> subprocess.CompletedProcess[str]:
    """`dsh plugin --profile sdk ARGS...` as a user runs it, offline, in a private HOME."""
    user = session.root / "user"
    env = {
        **os.environ,
        "DSH_HOME": str(session.home),
        "DSH_TELEMETRY_DISABLED": "1",
        "PATH": f"{PNPM_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(user),  # pnpm's store and caches go under it, not the real home
        "XDG_DATA_HOME": str(user / "data"),
        "XDG_CACHE_HOME": str(user / "cache"),
        "XDG_CONFIG_HOME": str(user / "config"),
        "XDG_STATE_HOME": str(user / "state"),
        # Offline: any registry request would go to a closed port on loopback and fail.
        "npm_config_registry": "http://127.0.0.1:9/",
    }
    return subprocess.run(
        [*dsh_command(), "plugin", "--profile", "sdk", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def bundles(session: DshSession) -> list[str]:
    manifest = json.loads((session.home / "profiles" / "sdk" / "package.json").read_text())
    return list(manifest["dsh"]["profile"]["bundles"])


def test_dsh_plugin_add_installs_the_package_offline_and_the_breaker_guards(
    session: DshSession, installed: Installed
) -> None:
    # The package, doctor and guard are the installed wheel's, as a DSH user has them.
    packages = session.root / "packages"
    written = installed.run("dsh-package", "--out", str(packages), "--python", python())
    assert written.returncode == 0, written.stderr
    [tarball] = packages.glob("*.tgz")
    added = plugin_manager(session, "add", str(tarball))
    assert added.returncode == 0, added.stdout + added.stderr
    assert bundles(session)[-1] == NPM_NAME  # DSH made it a layer of the profile

    doctor = installed.run("doctor", "dsh", "--dsh-home", str(session.home))
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    out = doctor.stdout
    assert f"ok       npm package {NPM_NAME} in the profile's bundles" in out
    assert "ok       plugin loaded in DSH; guard answered" in out and "PROBLEM" not in out

    # The bundle layer comes before the profile's own patch file, so a row there
    # configures the entry (and, replacing its whole config, names the interpreter).
    patch = session.home / "profiles" / "sdk" / "cordis.patch.yml"
    override = {"duplicateLimit": 4, "python": python()}
    patch.write_text(f"- id: {PLUGIN_ID}\n  config: {json.dumps(override)}\n")
    side = session.work / "side.txt"
    call = tool_use("bash", {"command": f"echo probe >> {side}", "description": "Probe"})
    run = session.run([call] * 5)
    assert len(side.read_text().splitlines()) == 3
    results = run.model.tool_results()
    assert [r.is_error for r in results] == [False] * 3 + [True] * 2
    expected = render(DEFAULT_MESSAGES["duplicate"], "bash", "duplicate", 4, 4)
    assert results[3].text == "Error: " + expected  # the 4th copy, the limit's, is refused
    [start] = run.starts()
    assert start["pluginFile"] == str(installed.plugin)
    assert start["config"]["duplicateLimit"] == 4

    removed = plugin_manager(session, "remove", NPM_NAME)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert NPM_NAME not in bundles(session)
    doctor = installed.run("doctor", "dsh", "--dsh-home", str(session.home))
    assert doctor.returncode == 1
    assert "PROBLEM  effective config has 0 circuit-breaker entries" in doctor.stdout
