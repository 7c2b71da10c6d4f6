"""The command hook in a harness's JSON hook settings, shared by the `claude-code` and
`codex` targets of install / uninstall / doctor.

Claude Code (`settings.json`) and Codex (`hooks.json`) use one shape:

    {"hooks": {"PreToolUse": [{"matcher": "...", "hooks": [
        {"type": "command", "command": "...", "timeout": 30}]}], "UserPromptSubmit": [...]}}

Our entries are recognized by their command (this package's entry point, then `hook`),
so install replaces them in place of adding twice, uninstall removes only them, and
every other key and hook in the file is left exactly as it was. A file is backed up
before it changes and replaced atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

EVENTS = ("PreToolUse", "UserPromptSubmit")
HOOK_TIMEOUT = 30  # seconds; the hook answers in milliseconds, its lock wait is 2 s
# The hook runs this interpreter on a one-line program rather than the console script:
# pip's script wrapper imports `re` first, a few milliseconds paid on every tool call.
HOOK_PROGRAM = "from dsh_circuit_breaker.cli import main; main()"
# Words that, followed by `hook`, make a command ours (older installs used the script).
ENTRY_NAMES = (
    "dsh-circuit-breaker",
    "dsh_circuit_breaker.cli",
    "dsh_circuit_breaker.hook",
    HOOK_PROGRAM,
)


class SettingsError(Exception):
    """A settings file we must not touch (unreadable, not JSON, unexpected shape)."""


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="config file the hook reads (written into the hook command; default: "
        "$DSH_CIRCUIT_BREAKER_CONFIG, else the user config file)",
    )
    parser.add_argument(
        "--state",
        metavar="URL",
        help="state URL the hook uses (written into the hook command; default: "
        "$DSH_CIRCUIT_BREAKER_STATE, else sqlite:// in the user's state directory)",
    )
    parser.add_argument(
        "--no-backup", action="store_true", help="do not back up a settings file before changing"
    )


def entry_point() -> list[str]:
    """The absolute command that runs this interpreter's `dsh-circuit-breaker` main."""
    return [os.path.abspath(sys.executable), "-c", HOOK_PROGRAM]


def hook_command(config: str | None = None, state: str | None = None) -> str:
    """The shell command the harness runs (through bash, so every part is quoted)."""
    parts = [*entry_point(), "hook"]
    if config:
        parts += ["--config", os.path.abspath(os.path.expanduser(config))]
    if state:
        parts += ["--state", state]
    return shlex.join(parts)


def is_ours(command: Any) -> bool:
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    for i, word in enumerate(words[:-1]):
        name = os.path.basename(word)
        if name in ENTRY_NAMES and words[i + 1] == "hook":
            return True
    return False


def read_settings(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SettingsError(f"{path} is not valid JSON ({exc}); not changing it") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path} does not hold a JSON object; not changing it")
    hooks = data.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise SettingsError(f"{path}: `hooks` is not an object; not changing it")
    for event in EVENTS:
        groups = (hooks or {}).get(event)
        if groups is not None and not isinstance(groups, list):
            raise SettingsError(f"{path}: `hooks.{event}` is not a list; not changing it")
    return data


def our_commands(settings: dict[str, Any]) -> dict[str, list[str]]:
    """event -> our hook commands in it."""
    found: dict[str, list[str]] = {}
    for event, groups in (settings.get("hooks") or {}).items():
        for group in groups if isinstance(groups, list) else []:
            for handler in _handlers(group):
                if handler.get("type") == "command" and is_ours(handler.get("command")):
                    found.setdefault(event, []).append(handler["command"])
    return found


def _handlers(group: Any) -> list[dict[str, Any]]:
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return []
    return [h for h in group["hooks"] if isinstance(h, dict)]


def without_ours(settings: dict[str, Any]) -> dict[str, Any]:
    """A copy with our handlers removed, and the groups and events that held only ours."""
    result = dict(settings)
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return result
    new_hooks: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            new_hooks[event] = groups
            continue
        kept = []
        for group in groups:
            handlers = _handlers(group)
            if handlers and any(_is_our_handler(h) for h in handlers):
                others = [h for h in group["hooks"] if not _is_our_handler(h)]
                if not others:
                    continue  # the group held only our hook
                group = {**group, "hooks": others}
            kept.append(group)
        if kept or not groups:  # an event left empty by us goes; one empty before stays
            new_hooks[event] = kept
    if new_hooks or not hooks:
        result["hooks"] = new_hooks
    else:
        result.pop("hooks")
    return result


def _is_our_handler(handler: Any) -> bool:
    return isinstance(handler, dict) and is_ours(handler.get("command"))


def with_ours(settings: dict[str, Any], command: str, matcher: str | None) -> dict[str, Any]:
    """A copy with exactly one group per event running `command` (ours replaced)."""
    result = without_ours(settings)
    hooks = dict(result.get("hooks") or {})
    for event in EVENTS:
        group: dict[str, Any] = {}
        if matcher is not None and event == "PreToolUse":
            group["matcher"] = matcher
        group["hooks"] = [{"type": "command", "command": command, "timeout": HOOK_TIMEOUT}]
        hooks[event] = [*(hooks.get(event) or []), group]
    result["hooks"] = hooks
    return result


def write_settings(path: Path, data: dict[str, Any], backup: bool = True) -> Path | None:
    """Write `data` atomically; returns the backup made of the old file, if any."""
    saved = None
    if path.exists() and backup:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        saved = path.with_name(f"{path.name}.bak-{stamp}")
        n = 1
        while saved.exists():
            saved = path.with_name(f"{path.name}.bak-{stamp}-{n}")
            n += 1
        shutil.copy2(path, saved)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = (path.stat().st_mode & 0o777) if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return saved


def install_into(
    path: Path, args: argparse.Namespace, matcher: str | None, label: str
) -> tuple[int, str]:
    """Install into one settings file; returns (exit code, message)."""
    try:
        settings = read_settings(path)
    except SettingsError as exc:
        return 1, f"error: {exc}"
    command = hook_command(args.config, args.state)
    wanted = with_ours(settings, command, matcher)
    if wanted == settings:
        return 0, f"{label}: already installed in {path}\n  hook command: {command}"
    saved = write_settings(path, wanted, backup=not args.no_backup)
    note = f" (backup: {saved})" if saved else ""
    return 0, f"{label}: installed in {path}{note}\n  hook command: {command}"


def uninstall_from(path: Path, args: argparse.Namespace, label: str) -> tuple[int, str]:
    try:
        settings = read_settings(path)
    except SettingsError as exc:
        return 1, f"error: {exc}"
    if not our_commands(settings):
        return 0, f"{label}: not installed in {path}; nothing changed"
    saved = write_settings(path, without_ours(settings), backup=not args.no_backup)
    note = f" (backup: {saved})" if saved else ""
    return 0, f"{label}: removed from {path}{note}"


# -- doctor ------------------------------------------------------------------------------
class Report:
    """Collects doctor's findings: each check says ok or exactly what is wrong."""

    def __init__(self) -> None:
        self.problems = 0

    def ok(self, text: str) -> None:
        print(f"ok       {text}")

    def problem(self, text: str, fix: str | None = None) -> None:
        self.problems += 1
        print(f"PROBLEM  {text}")
        if fix:
            print(f"         fix: {fix}")

    def note(self, text: str) -> None:
        print(f"         {text}")


def doctor_files(
    report: Report, files: list[tuple[str, Path]], label: str, install_hint: str
) -> list[str]:
    """Check where our hook is installed; returns the distinct commands found."""
    commands: list[str] = []
    seen: set[Path] = set()
    for scope, path in files:
        if path in seen:  # e.g. the project is the home directory
            continue
        seen.add(path)
        try:
            settings = read_settings(path)
        except SettingsError as exc:
            report.problem(str(exc), f"fix the file by hand, then run `{install_hint}`")
            continue
        found = our_commands(settings)
        if not found:
            continue
        missing = [e for e in EVENTS if e not in found]
        if missing:
            report.problem(
                f"{label} ({scope}, {path}): the hook is missing for {', '.join(missing)}",
                f"run `{install_hint}`",
            )
        else:
            report.ok(f"{label} ({scope}): hook installed in {path}")
        for event_commands in found.values():
            for command in event_commands:
                if command not in commands:
                    commands.append(command)
    if not commands:
        where = ", ".join(str(p) for _, p in files)
        report.problem(f"{label}: the hook is not installed (looked in {where})", install_hint)
    return commands


def doctor_command(report: Report, command: str) -> None:
    """Run an installed hook command as the harness would (through bash), with a probe
    event that must be allowed silently, then a UserPromptSubmit that clears the probe."""
    session = f"dsh-circuit-breaker-doctor-{uuid.uuid4().hex[:12]}"
    probe = {
        "session_id": session,
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "true", "description": "dsh-circuit-breaker doctor"},
        "tool_use_id": "doctor",
        "cwd": os.getcwd(),
    }
    reset = {"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": "doctor"}
    shell = shutil.which("bash") or "/bin/sh"
    for event in (probe, reset):
        try:
            started = time.monotonic()
            done = subprocess.run(
                [shell, "-c", command],
                input=json.dumps(event),
                capture_output=True,
                text=True,
                timeout=HOOK_TIMEOUT,
            )
            elapsed = (time.monotonic() - started) * 1000
        except (OSError, subprocess.TimeoutExpired) as exc:
            report.problem(f"hook command did not run: {command}: {exc}")
            return
        name = event["hook_event_name"]
        if done.returncode != 0:
            report.problem(
                f"hook command exited {done.returncode} on {name}: {command}",
                f"stderr: {done.stderr.strip()[:500] or '(empty)'}; reinstall with "
                "this environment's `dsh-circuit-breaker install ...`",
            )
            return
        if done.stdout.strip():
            report.problem(f"hook command denied the doctor's probe: {done.stdout.strip()[:300]}")
            return
        if done.stderr.strip():
            report.problem(f"hook command warned on {name}: {done.stderr.strip()[:500]}")
            return
        report.ok(f"hook command runs ({name} answered in {elapsed:.0f} ms): {command}")


def options_of(command: str) -> tuple[str | None, str | None]:
    """The `--config` and `--state` written into an installed hook command."""
    from ..hook import Malformed, parse_args

    words = shlex.split(command)
    try:
        return parse_args(words[words.index("hook") + 1 :])
    except (ValueError, Malformed):  # not our shape: the defaults apply
        return None, None


def run_doctor(
    args: argparse.Namespace,
    files: list[tuple[str, Path]],
    label: str,
    install_hint: str,
    note: str | None = None,
) -> int:
    """doctor for one harness: where the hook is, that its command runs, that its
    config is valid and its state store writable. Exit 1 on any problem."""
    report = Report()
    commands = doctor_files(report, files, label, install_hint)
    for command in commands:
        doctor_command(report, command)
    if commands and note:
        report.note(note)
    config, state = options_of(commands[0]) if commands else (None, None)
    doctor_config_and_state(report, args.config or config, args.state or state)
    print("all good" if not report.problems else f"{report.problems} problem(s)")
    return 1 if report.problems else 0


def doctor_config_and_state(report: Report, config_path: str | None, state: str | None) -> None:
    """The config the hook would load is valid, and its state store takes a write."""
    from ..config import ConfigError
    from ..hook import hook_config, state_url
    from ..stores import StoreUnavailable, store_from_url

    try:
        config, file_state = hook_config(config_path)
    except ConfigError as exc:
        report.problem(f"config: {exc}", "fix the key named above")
        return
    from ..config_file import find_config

    source = find_config(config_path)
    report.ok(f"config valid ({source or 'defaults: no config file'})")
    url = state_url(state, file_state)
    agent = f"dsh-circuit-breaker-doctor-{uuid.uuid4().hex[:12]}"
    try:
        store = store_from_url(url, config)
        try:
            store.transact(agent, lambda s: s.calls)
            store.reset(agent)
        finally:
            store.close()
    except (ConfigError, StoreUnavailable) as exc:
        report.problem(f"state store {url} is not writable: {exc}")
        return
    report.ok(f"state store writable: {url}")
    if config.incident_log:
        report.note(f"incident log: {config.incident_log}")


class Target:
    """One harness's install / uninstall / doctor over its JSON hook settings.

    `path_of(scope, project)` locates the file of a scope; `file_option` (e.g.
    `--settings`) names any file instead. `note` is printed after install and by doctor.
    """

    def __init__(
        self,
        label: str,
        scopes: tuple[str, ...],
        path_of: Callable[[str, str | None], Path],
        file_option: str,
        file_help: str,
        install_hint: str,
        note: str | None = None,
    ) -> None:
        self.label = label
        self.scopes = scopes
        self.path_of = path_of
        self.file_option = file_option
        self.file_help = file_help
        self.install_hint = install_hint
        self.note = note

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--scope", choices=self.scopes, default="user", help="settings file to change"
        )
        parser.add_argument(
            "--project", metavar="DIR", default=None, help="project directory (default: current)"
        )
        parser.add_argument(
            self.file_option, dest="file", metavar="FILE", default=None, help=self.file_help
        )
        add_common_arguments(parser)

    def chosen(self, args: argparse.Namespace) -> Path:
        if args.file:
            return Path(args.file).expanduser().absolute()
        return self.path_of(args.scope, args.project)

    def install(self, args: argparse.Namespace) -> int:
        # No matcher: every tool, in both harnesses (Codex's matchers are regular
        # expressions, where a `*` would be invalid).
        code, message = install_into(self.chosen(args), args, None, self.label)
        print(message)
        if code == 0 and self.note:
            print(self.note)
        return code

    def uninstall(self, args: argparse.Namespace) -> int:
        code, message = uninstall_from(self.chosen(args), args, self.label)
        print(message)
        return code

    def doctor(self, args: argparse.Namespace) -> int:
        if args.file:
            files = [(self.file_option, self.chosen(args))]
        else:
            files = [(scope, self.path_of(scope, args.project)) for scope in self.scopes]
        return run_doctor(args, files, self.label, self.install_hint, self.note)
