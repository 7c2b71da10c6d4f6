"""install / uninstall / doctor for a harness that runs our command hook from a settings
file (JSON, or the module's own format), written once for every such harness module: the
members it reads are `_contract.CommandHook`'s (a module borrows from `_defaults` what it
has nothing of its own for).
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.config import ConfigError
from ..core.config_file import hook_config
from ..core.invocation import hook_command, options_of
from ..usage import FAILED, directory, error
from . import _doctor, _http_hook, _settings

if TYPE_CHECKING:  # `_contract` stands on Protocols the kernel declares for mypy only
    from ._contract import SomeCommandHook


def add_arguments(harness: SomeCommandHook, parser: argparse.ArgumentParser, action: str) -> None:
    if action != "doctor":
        parser.add_argument(
            "--scope",
            choices=harness.SCOPES,
            default=harness.SCOPES[0],
            help="settings file to change (default: %(default)s)",
        )
    parser.add_argument(
        "--project",
        metavar="DIR",
        type=directory,
        default=None,
        help="project directory (default: current)",
    )
    parser.add_argument(
        harness.FILE_OPTION,
        dest="file",
        metavar="FILE",
        default=None,
        help="a settings file of your own instead",
    )
    if action != "uninstall":
        where = (
            "written into the hook command"
            if action == "install"
            else "checked instead of the one the installed hook command names"
        )
        parser.add_argument(
            "--config",
            metavar="FILE",
            help=f"config file the hook reads ({where}; default: "
            "$DSH_CIRCUIT_BREAKER_CONFIG, else the user config file)",
        )
        parser.add_argument(
            "--state",
            metavar="URL",
            help=f"state URL the hook uses ({where}; default: "
            "$DSH_CIRCUIT_BREAKER_STATE, else sqlite:// in the user's state directory)",
        )
    if action == "install" and _http_hook.supports(harness):
        _http_hook.add_arguments(parser)
    if action != "doctor":
        parser.add_argument(
            "--no-backup",
            action="store_true",
            help="do not back up a settings file before changing it",
        )


def _http_ours(harness: SomeCommandHook, settings: Any) -> dict[str, list[dict[str, Any]]]:
    """Our HTTP hooks in `settings`, where the harness takes them (another settings shape
    has none)."""
    return _http_hook.ours(settings) if _http_hook.supports(harness) else {}


def _chosen(harness: SomeCommandHook, args: argparse.Namespace) -> Path:
    if args.file:
        return Path(args.file).expanduser().absolute()
    path: Path = harness.settings_path(args.scope, args.project)
    return path


def install(harness: SomeCommandHook, args: argparse.Namespace) -> int:
    path = _chosen(harness, args)
    try:
        settings = harness.read_settings(path, harness.SETTINGS_EVENTS)
    except _settings.SettingsError as exc:
        return error(exc, exc.code)
    blocked = harness.conflicts(path)
    if blocked:
        for reason in blocked:
            error(f"{reason}; not changing {path}", FAILED)
        return FAILED
    post = post_events(harness, args.config)
    if getattr(args, "http", None):
        return _http_hook.install(harness, args, path, settings, post)
    command = hook_command(args.config, args.state, harness.NAME)
    wanted = harness.with_ours(settings, command, (*harness.SETTINGS_EVENTS, *post))
    results = f"\n  results: {', '.join(post)} (resultProgress / sameResultLimit)" if post else ""
    if wanted == settings:
        print(f"{harness.LABEL}: already installed in {path}\n  hook command: {command}{results}")
        return 0
    saved = harness.write_settings(path, wanted, backup=not args.no_backup)
    note = _settings.backup_note(saved, not args.no_backup)
    print(f"{harness.LABEL}: installed in {path}{note}\n  hook command: {command}{results}")
    if harness.NOTE:
        print(harness.NOTE)
    return 0


def post_events(harness: SomeCommandHook, config_path: str | None) -> tuple[str, ...]:
    """The harness's post-tool events, if the config the hook will read observes results
    (else none: the hook would start only to record nothing). `install` checked that
    config already (commands/install.py), so it loads."""
    events = harness.POST_EVENTS
    if not events:
        return ()

    return events if hook_config(config_path, harness)[0].observes_results else ()


def uninstall(harness: SomeCommandHook, args: argparse.Namespace) -> int:
    path = _chosen(harness, args)
    try:
        settings = harness.read_settings(path, harness.SETTINGS_EVENTS)
    except _settings.SettingsError as exc:
        return error(exc, exc.code)
    if not harness.our_commands(settings) and not _http_ours(harness, settings):
        print(f"{harness.LABEL}: not installed in {path}; nothing changed")
        return 0
    cleaned = harness.without_ours(settings)
    backup = not args.no_backup
    if cleaned is None:  # it held nothing but us (install made it): nothing to back up
        _settings.remove_file(path, backup=False)
        note = " (no backup: it held only our entries)"
    else:
        if cleaned == harness.EMPTY_FILE:  # a file of our own, now empty
            saved = _settings.remove_file(path, backup=backup)
        else:
            saved = harness.write_settings(path, cleaned, backup=backup)
        note = _settings.backup_note(saved, backup)
    print(f"{harness.LABEL}: removed from {path}{note}")
    return 0


def doctor(harness: SomeCommandHook, args: argparse.Namespace) -> int:
    """Where the hook is, that the harness's CLI is there, that the installed command
    answers the harness's probe events, that its config is valid and its store writable."""
    report = _doctor.Report()
    _doctor.doctor_cli(
        report,
        harness.LABEL,
        harness.CLI,
        harness.CLI_PACKAGE,
        harness.CLI_INSTALL,
        harness.CLI_TIMEOUT,
    )
    if args.file:
        files = [(harness.FILE_OPTION, _chosen(harness, args))]
    else:
        files = [(scope, harness.settings_path(scope, args.project)) for scope in harness.SCOPES]
    commands, http = _installed(harness, report, files)
    session = f"dsh-circuit-breaker-doctor-{uuid.uuid4().hex[:12]}"
    for command in commands:
        _doctor.doctor_command(report, command, harness.probe_events(session))
    if commands and harness.NOTE:
        report.note(harness.NOTE)
    # The hook's command says what it runs with, else the guard's start command.
    config, state = options_of([*commands, *http][0]) if commands or http else (None, None)
    _doctor.doctor_config_and_state(report, args.config or config, args.state or state, harness)
    if commands or http:
        _doctor_results(harness, report, files, args.config or config)
    return report.finish()


def _doctor_results(
    harness: SomeCommandHook,
    report: _doctor.Report,
    files: list[tuple[str, Path]],
    config_path: str | None,
) -> None:
    """Whether the post-tool hook is there exactly when the config observes results."""
    events = harness.POST_EVENTS
    if not events:
        return

    try:
        config, _ = hook_config(config_path, harness)
    except ConfigError:
        return  # reported with the config
    found: set[str] = set()
    for _, path in dict.fromkeys(files):
        try:
            settings = harness.read_settings(path, harness.SETTINGS_EVENTS)
        except _settings.SettingsError:
            continue  # reported with the commands
        found.update(harness.our_commands(settings), _http_ours(harness, settings))
    missing = [e for e in events if e not in found]
    fix = f"run `dsh-circuit-breaker install {harness.NAME}` again"
    if config.observes_results:
        report.check(
            not missing,
            f"results on: the post-tool hook is installed ({', '.join(events)})"
            if not missing
            else f"results are on in the config, but the post-tool hook is missing for "
            f"{', '.join(missing)}: no result reaches the rules",
            fix,
        )
    elif len(missing) < len(events):
        report.note(
            "the post-tool hook is installed but the config observes no results: one more "
            f"hook per tool call for nothing ({fix} to drop it)"
        )


def _installed(
    harness: SomeCommandHook, report: _doctor.Report, files: list[tuple[str, Path]]
) -> tuple[list[str], list[str]]:
    """Our hook commands found, and the start commands of our HTTP installs (whose hooks
    `_http_hook.doctor` checks); reports a harness with neither."""
    commands = _installed_commands(harness, report, files)
    starts: list[str] = []
    if _http_hook.supports(harness):
        for _, path in dict.fromkeys(files):
            try:
                settings = harness.read_settings(path, harness.SETTINGS_EVENTS)
            except _settings.SettingsError:
                continue  # reported with the commands
            if _http_hook.doctor(harness, report, path, settings):
                found = _settings.our_commands(settings, "serve").get(harness.START_EVENT, [])
                starts += [c for c in found if c not in starts]
                break
    if not commands and not starts:
        where = ", ".join(str(p) for _, p in files)
        hint = f"dsh-circuit-breaker install {harness.NAME}"
        report.problem(f"{harness.LABEL}: the hook is not installed (looked in {where})", hint)
    return commands, starts


def _installed_commands(
    harness: SomeCommandHook, report: _doctor.Report, files: list[tuple[str, Path]]
) -> list[str]:
    """Check where our hook is installed; returns the distinct commands found."""
    hint = f"dsh-circuit-breaker install {harness.NAME}"
    commands: list[str] = []
    seen: set[Path] = set()
    for scope, path in files:
        if path in seen:  # e.g. the project is the home directory
            continue
        seen.add(path)
        try:
            found = harness.our_commands(harness.read_settings(path, harness.SETTINGS_EVENTS))
        except _settings.SettingsError as exc:
            report.problem(str(exc), f"fix the file by hand, then run `{hint}`")
            continue
        if not found:
            continue
        missing = [e for e in harness.SETTINGS_EVENTS if e not in found]
        report.check(
            not missing,
            f"{harness.LABEL} ({scope}, {path}): "
            + (f"the hook is missing for {', '.join(missing)}" if missing else "hook installed"),
            f"run `{hint}`",
        )
        for reason in harness.conflicts(path):
            report.problem(reason)
        for event_commands in found.values():
            commands += [c for c in event_commands if c not in commands]
    return commands
