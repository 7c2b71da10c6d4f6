"""What scripts/setup built and installed is what a user gets: a pure wheel and an sdist
from this checkout, both carrying the package data, and the wheel installed (not
editable) in a venv at a long path, where the console script runs."""

from __future__ import annotations

import hashlib
import json
import tarfile
import zipfile
from pathlib import Path

from dsh_circuit_breaker import __version__
from support.installed import INSTALLED, REPO, Installed

PACKAGE = REPO / "src" / "dsh_circuit_breaker"
DATA = ["js/dsh.mjs", "dsh/SKILL.md", "py.typed", "guard/page.html", "guard/page.js"]


def built(pattern: str) -> Path:
    (path,) = (INSTALLED / "dist").glob(pattern)
    return path


def test_installed_at_a_long_path_from_the_wheel_not_the_checkout(installed: Installed) -> None:
    assert len(str(installed.venv)) > 100
    site = installed.venv / "lib"
    assert installed.package.is_relative_to(site)  # imported from site-packages, not src/
    (record,) = site.glob("python3.*/site-packages/dsh_circuit_breaker-*.dist-info")
    # pip's record of what it installed: this very wheel file (an editable install would
    # say dir_info instead of archive_info).
    origin = json.loads((record / "direct_url.json").read_text())
    wheel = built("*.whl")
    assert origin["url"] == wheel.as_uri()
    assert (
        origin["archive_info"]["hashes"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    )
    assert installed.version == __version__


def test_installed_package_data_is_this_checkouts(installed: Installed) -> None:
    for name in DATA:
        assert (installed.package / name).read_bytes() == (PACKAGE / name).read_bytes(), name
    assert installed.plugin == installed.package / "js" / "dsh.mjs"
    assert installed.skill == installed.package / "dsh" / "SKILL.md"


def test_console_script_runs_at_the_long_path(installed: Installed) -> None:
    # Past 127 characters a `#!` line is cut by the kernel; pip then writes a /bin/sh
    # trampoline. Either way, the script must run.
    assert len(str(installed.python)) > 100
    version = installed.run("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"dsh-circuit-breaker {__version__}"
    demo = installed.run("demo")
    assert demo.returncode == 0, demo.stderr
    incidents = [json.loads(line) for line in demo.stdout.strip().splitlines()[-2:]]
    assert [i["kind"] for i in incidents] == ["duplicate", "stop"]  # the 9th call stops it


def test_wheel_is_pure_and_carries_the_package_data(installed: Installed) -> None:
    wheel = built("*.whl")
    assert wheel.name == f"dsh_circuit_breaker-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (meta,) = [n for n in names if n.endswith(".dist-info/WHEEL")]
        assert "Root-Is-Purelib: true" in archive.read(meta).decode()
    for name in DATA:
        assert f"dsh_circuit_breaker/{name}" in names
    assert not any(n.endswith((".so", ".pyd", ".c")) for n in names)  # nothing to compile


def test_sdist_carries_the_package_data_and_no_local_state(installed: Installed) -> None:
    sdist = built("*.tar.gz")
    root = f"dsh_circuit_breaker-{__version__}"
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    for name in DATA:
        assert f"{root}/src/dsh_circuit_breaker/{name}" in names
    assert f"{root}/pyproject.toml" in names and f"{root}/README.md" in names
    local = (".venv/", ".installed/", "node_modules/", "__pycache__/")
    assert not [n for n in names if any(part in n + "/" for part in local)]
