"""`install dsh` / `uninstall dsh` / `doctor dsh`: put the plugin into a DSH profile, take it
out again, and prove that it really loads there.

The plugin goes into the profile's patch layer (`$DSH_HOME/profiles/<name>/cordis.patch.yml`)
as one insert row, written between two marker comments so that it can be found again
without a YAML library (the core stays dependency-free) and without touching any other
row. A DSH plugin row that fails to import only logs a warning and the runtime boots
without it, so `doctor` does not trust the file: it asks DSH for the effective config and
boots the runtime with the profile's patch layers to see the plugin activate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..display import plural
from ..harnesses._settings import write_text
from ..usage import FAILED, directory, error, program
from . import NPM_NAME, PLUGIN_ID, plugin_path, skill_path
from .dump import Expression, file_of, find_entries

BEGIN = "# >>> dsh-circuit-breaker (managed by `dsh-circuit-breaker install dsh`; do not edit)"
END = "# <<< dsh-circuit-breaker"
SIDECAR = "dsh-circuit-breaker.json"  # the plugin reads the interpreter from here too
SKILL_NAME = "circuit-breaker-supervision"
DEFAULT_PROFILE = "sdk"
INSTALL_HINT = (
    "pip install 'dsh-circuit-breaker[dsh]' (from a clone of the repository: pip install '.[dsh]')"
)


class InstallError(Exception):
    """A problem the user must fix; the message says what and where."""


def _add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile",
        metavar="NAME",
        default=DEFAULT_PROFILE,
        help=f"DSH profile (default: {DEFAULT_PROFILE}, the Python SDK's profile)",
    )
    parser.add_argument(
        "--dsh-home",
        default=None,
        metavar="DIR",
        type=directory,
        help="DSH home (default: $DSH_HOME, else ~/.dsh)",
    )


def add_arguments(parser: argparse.ArgumentParser, action: str) -> None:
    """Each action's own options (`doctor dsh --help` shows only doctor's)."""
    adders = {
        "install": add_install_arguments,
        "uninstall": add_uninstall_arguments,
        "doctor": add_doctor_arguments,
    }
    adders[action](parser)


def add_install_arguments(parser: argparse.ArgumentParser) -> None:
    _add_profile_arguments(parser)
    parser.add_argument(
        "--skill",
        action="store_true",
        help="install only the supervision skill (under $DSH_HOME/skills), not the plugin",
    )
    parser.add_argument(
        "--python",
        metavar="PYTHON",
        default=sys.executable,
        help="interpreter for the guard process (default: this one)",
    )


def add_uninstall_arguments(parser: argparse.ArgumentParser) -> None:
    _add_profile_arguments(parser)
    parser.add_argument(
        "--skill",
        action="store_true",
        help="uninstall only the supervision skill, not the plugin",
    )


def add_doctor_arguments(parser: argparse.ArgumentParser) -> None:
    _add_profile_arguments(parser)
    parser.add_argument(
        "--dsh",
        default=None,
        metavar="FILE",
        type=program,
        help="dsh executable (default: `dsh` on PATH, else the Python SDK's runtime)",
    )


@dataclass(frozen=True)
class Profile:
    home: Path
    name: str

    @property
    def dir(self) -> Path:
        return self.home / "profiles" / self.name

    @property
    def patch_file(self) -> Path:
        return self.dir / "cordis.patch.yml"

    @property
    def sidecar(self) -> Path:
        return self.dir / SIDECAR

    @property
    def manifest(self) -> Path:
        return self.dir / "package.json"

    @property
    def home_patch_file(self) -> Path:
        return self.home / "cordis.patch.yml"

    @property
    def skill_file(self) -> Path:
        return self.home / "skills" / SKILL_NAME / "SKILL.md"


def profile_of(args: argparse.Namespace) -> Profile:
    home = args.dsh_home or os.environ.get("DSH_HOME", "").strip() or "~/.dsh"
    name = args.profile
    if not name or "/" in name or "\\" in name or name in (".", "..", "node_modules"):
        raise InstallError(f"not a profile name: {name!r}")
    return Profile(Path(home).expanduser().resolve(), name)


def existing_profile(args: argparse.Namespace) -> Profile:
    """The chosen profile, if DSH has created it (its package.json is what makes a
    profile); otherwise an error naming the ones there are and how to create it."""
    profile = profile_of(args)
    if profile.manifest.is_file():
        return profile
    profiles = profile.home / "profiles"
    there = sorted(p.parent.name for p in profiles.glob("*/package.json"))
    create = f"DSH_HOME={shlex.quote(str(profile.home))} dsh --profile {shlex.quote(profile.name)}"
    raise InstallError(
        f"DSH profile {profile.name!r} does not exist in {profiles} "
        f"(existing: {', '.join(there) or 'none'}). Create it with DSH first:\n"
        f"  {create} --dump-config >/dev/null   # a shipped profile (sdk, web, ...)\n"
        f"  {create} --from-default-profile sdk --dump-config >/dev/null   # your own"
    )


# -- the managed block -------------------------------------------------------------------


def insert_row(python: str) -> list[str]:
    """The patch row that inserts our entry, as lines."""
    # JSON strings are valid YAML scalars, so paths with any characters stay intact.
    return [
        "- insert:",
        f"    - id: {PLUGIN_ID}",
        f"      name: {json.dumps(str(plugin_path()))}",
        "      config:",
        f"        python: {json.dumps(python)}",
    ]


def managed_block(python: str) -> str:
    return "\n".join(
        [
            BEGIN,
            "# Configure it in a later row (this profile file below this block, or",
            "# $DSH_HOME/cordis.patch.yml):  - id: circuit-breaker",
            "#                                 config: {duplicateLimit: 6}",
            *insert_row(python),
            END,
            "",
        ]
    )


def strip_block(text: str) -> str:
    """`text` without our managed block (every copy of it, should there be several)."""
    out: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\r\n")
        if not inside and stripped == BEGIN:
            inside = True
        elif inside:
            if stripped == END:
                inside = False
        else:
            out.append(line)
    if inside:
        raise InstallError(f"found {BEGIN!r} without its closing {END!r}; fix the file by hand")
    return "".join(out)


def _is_content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#") and stripped != "---"


def with_block(text: str, block: str, where: Path) -> str:
    """Put our block before the first row, so that override rows anywhere after it in the
    same file still find the entry it inserts."""
    lines = strip_block(text).splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    content = [i for i, line in enumerate(lines) if _is_content(line)]
    if not content:
        return "".join(lines) + block
    first = lines[content[0]]
    if len(content) == 1 and first.strip() == "[]":
        # DSH's own initial file: an empty flow list. Our block list replaces it.
        return "".join(lines[: content[0]]) + block + "".join(lines[content[0] + 1 :])
    if first.startswith("- ") or first.rstrip("\r\n") == "-":
        return "".join(lines[: content[0]]) + block + "".join(lines[content[0] :])
    raise InstallError(
        f"{where} is not a YAML block list (rows starting with '- '), so it cannot be edited "
        f"safely without a YAML parser. Add this row at its top by hand:\n{block}"
    )


def without_block(text: str) -> str:
    rest = strip_block(text)
    if not any(_is_content(line) for line in rest.splitlines()):
        # Leave a valid, empty patch list behind, as DSH itself writes it.
        if rest and not rest.endswith("\n"):
            rest += "\n"
        rest += "[]\n"
    return rest


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def package_layers(profile: Profile) -> list[Path]:
    """The patch files of our npm package (`dsh-package`), if DSH's plugin manager
    installed it into the profile as a bundle; else none."""
    bundles = _json_at(profile.manifest, "dsh", "profile", "bundles")
    if not isinstance(bundles, list) or NPM_NAME not in bundles:
        return []
    package = profile.dir / "node_modules" / NPM_NAME
    patch = _json_at(package / "package.json", "dsh", "bundle", "patch")
    files = [patch] if isinstance(patch, str) else patch if isinstance(patch, list) else []
    return [package / f for f in files if isinstance(f, str)]


def _json_at(path: Path, *keys: str) -> Any:
    try:
        value: Any = json.loads(_read(path) or "null")
    except ValueError:
        raise InstallError(f"{path} is not valid JSON") from None
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


# -- install / uninstall -------------------------------------------------------------------


def install(args: argparse.Namespace) -> int:
    try:
        if args.skill:
            return _install_skill(profile_of(args))
        profile = existing_profile(args)
        python = str(Path(args.python).absolute())
        old = _read(profile.patch_file)
        new = with_block(old or "", managed_block(python), profile.patch_file)
        if new == old:
            print(f"already installed in {profile.patch_file}")
        else:
            backup = write_text(profile.patch_file, new)
            print(f"installed: {profile.patch_file}" + (f" (backup: {backup})" if backup else ""))
        sidecar = json.dumps({"python": python, "plugin": str(plugin_path())}, indent=2) + "\n"
        if _read(profile.sidecar) != sidecar:
            write_text(profile.sidecar, sidecar, backup=False)
    except (InstallError, OSError) as exc:
        return error(f"install dsh: {exc}", FAILED)
    print(f"check it loads: dsh-circuit-breaker doctor dsh --profile {profile.name}")
    return 0


def _install_skill(profile: Profile) -> int:
    profile.skill_file.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(skill_path(), profile.skill_file)
    print(f"skill: {profile.skill_file}")
    return 0


def uninstall(args: argparse.Namespace) -> int:
    try:
        profile = profile_of(args)
        if args.skill:
            if profile.skill_file.exists():
                profile.skill_file.unlink()
                with contextlib.suppress(OSError):
                    profile.skill_file.parent.rmdir()
                print(f"removed skill {profile.skill_file}")
            else:
                print(f"no skill at {profile.skill_file}")
            return 0
        old = _read(profile.patch_file)
        if old is None or strip_block(old) == old:
            print(f"not installed in {profile.patch_file}")
        else:
            backup = write_text(profile.patch_file, without_block(old))
            print(f"removed from {profile.patch_file} (backup: {backup})")
        with contextlib.suppress(FileNotFoundError):
            profile.sidecar.unlink()
    except (InstallError, OSError) as exc:
        return error(f"uninstall dsh: {exc}", FAILED)
    return 0


# -- doctor ------------------------------------------------------------------------------


def dsh_command(explicit: str | None) -> list[str]:
    if explicit:
        return [explicit]
    found = shutil.which("dsh")
    if found:
        return [found]
    try:
        from deepseek_harness_runtime import (  # type: ignore[import-not-found,import-untyped,unused-ignore]
            resolve_bundled_launch_args,
        )
    except ImportError:
        raise InstallError(
            f"no DSH runtime (deepseek-harness-sdk) in this environment: {INSTALL_HINT}; "
            "or pass --dsh PATH, or put dsh on PATH"
        ) from None
    return [str(a) for a in resolve_bundled_launch_args()]


def boot_check(
    command: list[str], profile: Profile, layers: list[Path], timeout: float = 60.0
) -> tuple[dict[str, Any] | None, str]:
    """Boot DSH's SDK app in a scratch home with, in DSH's order, our package's bundle
    layers, the profile's and the home's patch layers, and read the plugin's ready
    marker. Returns (marker, stderr)."""
    with tempfile.TemporaryDirectory(prefix="dsh-cb-doctor-") as scratch:
        home = Path(scratch) / "home"
        (home / "profiles" / "sdk").mkdir(parents=True)
        if profile.sidecar.exists():
            shutil.copyfile(profile.sidecar, home / "profiles" / "sdk" / SIDECAR)
        marker = Path(scratch) / "ready.jsonl"
        patches: list[str] = []
        for layer in (*layers, profile.patch_file, profile.home_patch_file):
            if layer.exists():
                patches += ["--patch", str(layer)]
        env = dict(os.environ)
        env.update(
            DSH_HOME=str(home),
            DSH_TELEMETRY_DISABLED="1",
            DSH_CIRCUIT_BREAKER_READY_FILE=str(marker),
        )
        proc = subprocess.Popen(
            [*command, "--profile", "sdk", *patches],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=scratch,
        )
        stderr_lines: list[bytes] = []
        answered = threading.Event()
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout, proc.stderr

        def read_stdout() -> None:
            # DSH answers `initialize` once the whole plugin tree has been applied.
            for line in iter(out.readline, b""):
                if b'"doctor"' in line:
                    answered.set()

        readers = [
            threading.Thread(target=read_stdout, daemon=True),
            threading.Thread(
                target=lambda: stderr_lines.extend(iter(err.readline, b"")), daemon=True
            ),
        ]
        for reader in readers:
            reader.start()
        record = None
        try:
            request = {
                "jsonrpc": "2.0",
                "id": "doctor",
                "method": "initialize",
                "params": {"cwd": scratch, "provider": "deepseek-official", "model": "doctor"},
            }
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
            deadline = time.monotonic() + timeout
            grace: float | None = None
            while time.monotonic() < deadline and proc.poll() is None:
                text = _read(marker)
                if text:
                    record = json.loads(text.splitlines()[0])
                    break
                if answered.is_set():
                    # Booted; a plugin that is still starting its guard gets a moment more.
                    grace = grace or time.monotonic() + 3.0
                    if time.monotonic() > grace:
                        break
                time.sleep(0.05)
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for reader in readers:
                reader.join(timeout=2)
        return record, b"".join(stderr_lines).decode(errors="replace")


class _Report:
    def __init__(self) -> None:
        self.failures = 0

    def __call__(self, ok: bool, text: str) -> None:
        self.failures += 0 if ok else 1
        print(("ok    " if ok else "FAIL  ") + text)


def doctor(args: argparse.Namespace) -> int:
    report = _Report()
    try:
        _doctor(args, report)
    except ImportError as exc:
        report(False, f"reading `dsh --dump-config` needs PyYAML ({exc}): {INSTALL_HINT}")
    except (InstallError, OSError, subprocess.SubprocessError, ValueError) as exc:
        report(False, str(exc))
    return 1 if report.failures else 0


def _doctor(args: argparse.Namespace, report: _Report) -> None:
    profile = existing_profile(args)
    layers = package_layers(profile)
    text = _read(profile.patch_file) or ""
    managed = strip_block(text) != text
    if managed:
        report(True, f"row in {profile.patch_file}")
    if layers:
        report(True, f"npm package {NPM_NAME} in the profile's bundles ({profile.manifest})")
    if not managed and not layers:
        report(
            PLUGIN_ID in text,
            f"row in {profile.patch_file} (not installed by us)"
            if PLUGIN_ID in text
            else f"not installed: no row in {profile.patch_file}, "
            f"no {NPM_NAME} package in {profile.manifest}",
        )
    command = dsh_command(args.dsh)
    env = dict(os.environ, DSH_HOME=str(profile.home), DSH_TELEMETRY_DISABLED="1")
    version = _run([*command, "--version"], env, 60)
    report(version.returncode == 0, f"dsh {version.stdout.strip()} ({shlex.join(command)})")
    dump = _run([*command, "--profile", profile.name, "--dump-config"], env, 120)
    if dump.returncode != 0:
        report(False, f"dsh --profile {profile.name} --dump-config failed:\n{dump.stderr}")
        return
    entries = find_entries(dump.stdout)
    found = plural(len(entries), "circuit-breaker entry", "circuit-breaker entries")
    report(len(entries) == 1, f"effective config has {found}")
    for entry in entries:
        disabled = entry.get("disabled")
        if isinstance(disabled, Expression):
            report(True, f"entry enabled unless `{disabled}` (DSH decides at boot, below)")
        else:
            enabled = disabled in (None, False)
            report(
                enabled,
                "entry enabled"
                if enabled
                else f"entry disabled (disabled: {json.dumps(disabled)})",
            )
        file = file_of(entry.get("name"))
        report(
            file is not None and file.is_file(), f"plugin file exists: {file or entry.get('name')}"
        )
    if report.failures:
        report(False, "DSH boot skipped: fix the problems above first")
        return
    _doctor_boot(report, command, profile, layers)


def _run(
    command: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)


def _doctor_boot(report: _Report, command: list[str], profile: Profile, layers: list[Path]) -> None:
    record, stderr = boot_check(command, profile, layers)
    if record is None:
        report(False, "the plugin did not activate when DSH booted with this profile's layers")
    elif not record.get("ok"):
        report(False, f"the plugin loaded but its guard did not start: {record.get('error')}")
    else:
        report(True, f"plugin activated; guard pid {record.get('pid')} ({record.get('python')})")
        if record.get("config"):
            print("      effective breaker config: " + json.dumps(record["config"]))
        return
    if stderr.strip():
        print(stderr.strip())
