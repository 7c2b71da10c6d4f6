"""DeepSeek Harness (DSH): the plugin (`js/dsh.mjs`) goes into a DSH profile's patch
layer (`$DSH_HOME/profiles/<name>/cordis.patch.yml`) as one insert row, written between
two marker comments so that it can be found again without a YAML library (the core stays
dependency-free) and without touching any other row. A DSH plugin row that fails to
import only logs a warning and the runtime boots without it, so `doctor` does not trust
the file: it asks DSH for the effective config and boots the runtime with the profile's
patch layers to see the plugin activate. `install dsh --skill` copies the supervision
skill instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.display import plural
from ..dsh import NPM_NAME, PLUGIN_ID, insert_row, plugin_path, skill_path
from ..dsh.dump import Expression, file_of, find_entries
from ..usage import program
from ._doctor import Report
from ._plugin import Booted, InstallError, PluginHarness, stop, wait_for_marker
from ._settings import write_text

NAME = "dsh"
LABEL = "DSH"
EXEMPT: tuple[str, ...] = ()  # the plugin's entry config is the breaker's, SPEC's defaults
ANNOTATION_ARGS: tuple[str, ...] = ()
BEGIN = "# >>> dsh-circuit-breaker (managed by `dsh-circuit-breaker install dsh`; do not edit)"
END = "# <<< dsh-circuit-breaker"
SIDECAR = "dsh-circuit-breaker.json"  # the plugin reads the interpreter from here too
SKILL_NAME = "circuit-breaker-supervision"
DEFAULT_PROFILE = "sdk"
INSTALL_HINT = (
    "pip install 'dsh-circuit-breaker[dsh]' (from a clone of the repository: pip install '.[dsh]')"
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


# -- the runtime ---------------------------------------------------------------------------


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


def _run(
    command: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)


def boot(
    harness: PluginHarness, args: argparse.Namespace, scratch: Path, env: dict[str, str]
) -> Booted:
    """Boot DSH's SDK app in a scratch home with, in DSH's order, our package's bundle
    layers, the profile's and the home's patch layers; it has booted once it answers
    `initialize` (after the whole plugin tree has been applied)."""
    profile = profile_of(args)
    home = scratch / "home"
    (home / "profiles" / "sdk").mkdir(parents=True)
    if profile.sidecar.exists():
        shutil.copyfile(profile.sidecar, home / "profiles" / "sdk" / SIDECAR)
    patches: list[str] = []
    for layer in (*package_layers(profile), profile.patch_file, profile.home_patch_file):
        if layer.exists():
            patches += ["--patch", str(layer)]
    proc = subprocess.Popen(
        [*dsh_command(args.dsh), "--profile", "sdk", *patches],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**env, "DSH_HOME": str(home), "DSH_TELEMETRY_DISABLED": "1"},
        cwd=scratch,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout, proc.stderr
    answered = threading.Event()
    stderr_lines: list[bytes] = []

    def read_stdout() -> None:
        for line in iter(out.readline, b""):
            if b'"doctor"' in line:
                answered.set()

    readers = [
        threading.Thread(target=read_stdout, daemon=True),
        threading.Thread(target=lambda: stderr_lines.extend(iter(err.readline, b"")), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        request = {
            "jsonrpc": "2.0",
            "id": "doctor",
            "method": "initialize",
            "params": {"cwd": str(scratch), "provider": "deepseek-official", "model": "doctor"},
        }
        proc.stdin.write((json.dumps(request) + "\n").encode())
        proc.stdin.flush()
        records = wait_for_marker(proc, scratch, harness.start_timeout, booted=answered.is_set)
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        stop(proc)
        for reader in readers:
            reader.join(timeout=2)
    return Booted(records, b"".join(stderr_lines).decode(errors="replace"))


# -- the harness ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Dsh(PluginHarness):
    """The plugin harness whose install is a row in a profile's patch layer."""

    def add_arguments(self, parser: argparse.ArgumentParser, action: str) -> None:
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
            help="DSH home (default: $DSH_HOME, else ~/.dsh)",
        )
        if action != "doctor":
            parser.add_argument(
                "--skill",
                action="store_true",
                help=f"{action} only the supervision skill (under $DSH_HOME/skills), "
                "not the plugin",
            )
        else:
            parser.add_argument(
                "--dsh",
                default=None,
                metavar="PATH",
                type=program,
                help="dsh executable (default: `dsh` on PATH, else the Python SDK's runtime)",
            )
        super().add_arguments(parser, action)

    def ours(self, path: Path, text: str) -> bool:
        return strip_block(text) != text

    def with_ours(self, path: Path, text: str | None, args: argparse.Namespace) -> str:
        python = str(Path(args.python).absolute())
        return with_block(text or "", managed_block(python), path)

    def without_ours(self, text: str) -> str:
        return without_block(text)

    def nothing_in(self, path: Path) -> str:
        return f"no row in {path}"

    def prepare(self, args: argparse.Namespace) -> None:
        """The profile exists (we never create one), and the sidecar names the interpreter."""
        profile = existing_profile(args)
        python = str(Path(args.python).absolute())
        sidecar = json.dumps({"python": python, "plugin": str(plugin_path())}, indent=2) + "\n"
        if _read(profile.sidecar) != sidecar:
            write_text(profile.sidecar, sidecar, backup=False)

    def doctor_command(self, args: argparse.Namespace) -> str:
        return f"dsh-circuit-breaker doctor dsh --profile {args.profile}"

    def _install(self, args: argparse.Namespace) -> None:
        if not args.skill:
            super()._install(args)
            return
        skill = profile_of(args).skill_file
        skill.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(skill_path(), skill)
        print(f"skill: {skill}")

    def _uninstall(self, args: argparse.Namespace) -> None:
        profile = profile_of(args)
        if not args.skill:
            super()._uninstall(args)
            with contextlib.suppress(FileNotFoundError):
                profile.sidecar.unlink()
        elif profile.skill_file.exists():
            profile.skill_file.unlink()
            with contextlib.suppress(OSError):
                profile.skill_file.parent.rmdir()
            print(f"removed skill {profile.skill_file}")
        else:
            print(f"no skill at {profile.skill_file}")

    def doctor_install(self, report: Report, args: argparse.Namespace) -> bool:
        """The row is in the profile (or our npm package is among its bundles), the
        runtime runs, and its effective config has our one entry, enabled, naming a
        plugin file that exists."""
        profile = existing_profile(args)
        layers = package_layers(profile)
        text = _read(profile.patch_file) or ""
        managed = self.ours(profile.patch_file, text)
        if managed:
            report.ok(f"row in {profile.patch_file}")
        if layers:
            report.ok(f"npm package {NPM_NAME} in the profile's bundles ({profile.manifest})")
        if not managed and not layers:
            report.check(
                PLUGIN_ID in text,
                f"row in {profile.patch_file} (not installed by us)"
                if PLUGIN_ID in text
                else f"not installed: {self.nothing_in(profile.patch_file)}, "
                f"no {NPM_NAME} package in {profile.manifest}",
                f"dsh-circuit-breaker install dsh --profile {profile.name}",
            )
        command = dsh_command(args.dsh)
        env = dict(os.environ, DSH_HOME=str(profile.home), DSH_TELEMETRY_DISABLED="1")
        version = _run([*command, "--version"], env, 60)
        report.check(
            version.returncode == 0, f"dsh {version.stdout.strip()} ({shlex.join(command)})"
        )
        dump = _run([*command, "--profile", profile.name, "--dump-config"], env, 120)
        if dump.returncode != 0:
            report.problem(f"dsh --profile {profile.name} --dump-config failed:\n{dump.stderr}")
            return False
        self._doctor_entries(report, dump.stdout)
        return not report.problems

    def _doctor_entries(self, report: Report, dump: str) -> None:
        try:
            entries = find_entries(dump)
        except ImportError as exc:
            raise InstallError(
                f"reading `dsh --dump-config` needs PyYAML ({exc}): {INSTALL_HINT}"
            ) from None
        found = plural(len(entries), "circuit-breaker entry", "circuit-breaker entries")
        report.check(len(entries) == 1, f"effective config has {found}")
        for entry in entries:
            disabled = entry.get("disabled")
            if isinstance(disabled, Expression):
                report.ok(f"entry enabled unless `{disabled}` (DSH decides at boot, below)")
            else:
                enabled = disabled in (None, False)
                report.check(
                    enabled,
                    "entry enabled"
                    if enabled
                    else f"entry disabled (disabled: {json.dumps(disabled)})",
                )
            file = file_of(entry.get("name"))
            report.check(
                file is not None and file.is_file(),
                f"plugin file exists: {file or entry.get('name')}",
            )


HARNESS = Dsh(
    name=NAME,
    label=LABEL,
    exempt=EXEMPT,
    annotation_args=ANNOTATION_ARGS,
    adapter=plugin_path(),
    executable="dsh",
    package="deepseek-harness-sdk",
    plugin_dir=lambda scope, args: profile_of(args).dir,
    boot=boot,
    scopes=("profile",),
    file_name="cordis.patch.yml",
    start_timeout=60.0,
    config_options=False,
)
add_arguments, install, uninstall, doctor = HARNESS.entry_points()
