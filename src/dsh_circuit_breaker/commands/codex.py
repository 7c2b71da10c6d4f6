"""`install codex` / `uninstall codex` / `doctor codex`.

Codex reads command hooks from `hooks.json` next to its config: `$CODEX_HOME/hooks.json`
(default ~/.codex) for the user, `<project>/.codex/hooks.json` for a project. The shape
and the hook's stdin/stdout are Claude Code's (PreToolUse with
`hookSpecificOutput.permissionDecision: "deny"`), so the same hook command serves both.

Codex runs a user or project hook only once it is trusted: after installing, open Codex
and approve the two new hooks in `/hooks` (Codex records a hash of each; changing the
command, e.g. by reinstalling with other options, asks again).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from . import hook_settings as hs

LABEL = "Codex"
SCOPES = ("user", "project")
TRUST_NOTE = "Codex runs new hooks only once trusted: open Codex and approve them in /hooks."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scope", choices=SCOPES, default="user", help="hooks file to change")
    parser.add_argument(
        "--project", metavar="DIR", default=None, help="project directory (default: current)"
    )
    parser.add_argument(
        "--hooks-file", metavar="FILE", default=None, help="a hooks.json of your own instead"
    )
    hs.add_common_arguments(parser)


def codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


def hooks_path(scope: str, project: str | None = None) -> Path:
    if scope == "user":
        return codex_home() / "hooks.json"
    return Path(project or os.getcwd()).absolute() / ".codex" / "hooks.json"


def _chosen(args: argparse.Namespace) -> Path:
    if args.hooks_file:
        return Path(args.hooks_file).expanduser().absolute()
    return hooks_path(args.scope, args.project)


def install(args: argparse.Namespace) -> int:
    # No matcher: Codex treats a missing matcher as "every tool" (a `*` is not a regex).
    code, message = hs.install_into(_chosen(args), args, None, LABEL)
    print(message)
    if code == 0:
        print(TRUST_NOTE)
    return code


def uninstall(args: argparse.Namespace) -> int:
    code, message = hs.uninstall_from(_chosen(args), args, LABEL)
    print(message)
    return code


def doctor(args: argparse.Namespace) -> int:
    if args.hooks_file:
        files = [("--hooks-file", _chosen(args))]
    else:
        files = [(scope, hooks_path(scope, args.project)) for scope in SCOPES]
    note = TRUST_NOTE + " This check cannot see Codex's trust records."
    return hs.run_doctor(args, files, LABEL, "dsh-circuit-breaker install codex", note)
