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

import os
from pathlib import Path

from . import hook_settings as hs

TRUST_NOTE = "Codex runs new hooks only once trusted: open Codex and approve them in /hooks."


def codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


def hooks_path(scope: str, project: str | None = None) -> Path:
    if scope == "user":
        return codex_home() / "hooks.json"
    return Path(project or os.getcwd()).absolute() / ".codex" / "hooks.json"


TARGET = hs.Target(
    "Codex",
    ("user", "project"),
    hooks_path,
    "--hooks-file",
    "a hooks.json of your own instead",
    "dsh-circuit-breaker install codex",
    TRUST_NOTE,
)
add_arguments = TARGET.add_arguments
install = TARGET.install
uninstall = TARGET.uninstall
doctor = TARGET.doctor
