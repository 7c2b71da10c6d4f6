"""`install claude-code` / `uninstall claude-code` / `doctor claude-code`.

The hook goes into a Claude Code settings file: `hooks.PreToolUse` (no matcher: every
tool) and `hooks.UserPromptSubmit`, each one command hook running this interpreter's
`dsh-circuit-breaker hook`. Scopes are Claude Code's own: `user`
($CLAUDE_CONFIG_DIR or ~/.claude/settings.json), `project` (.claude/settings.json, shared
with the repository) and `local` (.claude/settings.local.json, yours only).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from . import hook_settings as hs

LABEL = "Claude Code"
SCOPES = ("user", "project", "local")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scope", choices=SCOPES, default="user", help="settings file to change")
    parser.add_argument(
        "--project", metavar="DIR", default=None, help="project directory (default: current)"
    )
    parser.add_argument(
        "--settings", metavar="FILE", default=None, help="a settings file of your own instead"
    )
    hs.add_common_arguments(parser)


def config_dir() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")


def settings_path(scope: str, project: str | None = None) -> Path:
    root = Path(project or os.getcwd()).absolute()
    if scope == "user":
        return config_dir() / "settings.json"
    if scope == "project":
        return root / ".claude" / "settings.json"
    return root / ".claude" / "settings.local.json"


def _chosen(args: argparse.Namespace) -> Path:
    if args.settings:
        return Path(args.settings).expanduser().absolute()
    return settings_path(args.scope, args.project)


def install(args: argparse.Namespace) -> int:
    code, message = hs.install_into(_chosen(args), args, None, LABEL)
    print(message)
    return code


def uninstall(args: argparse.Namespace) -> int:
    code, message = hs.uninstall_from(_chosen(args), args, LABEL)
    print(message)
    return code


def doctor(args: argparse.Namespace) -> int:
    if args.settings:
        files = [("--settings", _chosen(args))]
    else:
        files = [(scope, settings_path(scope, args.project)) for scope in SCOPES]
    hint = "dsh-circuit-breaker install claude-code [--scope ...]"
    return hs.run_doctor(args, files, LABEL, hint)
