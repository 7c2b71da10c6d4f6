"""`install claude-code` / `uninstall claude-code` / `doctor claude-code`.

The hook goes into a Claude Code settings file: `hooks.PreToolUse` (no matcher: every
tool) and `hooks.UserPromptSubmit`, each one command hook running this interpreter's
`dsh-circuit-breaker hook`. Scopes are Claude Code's own: `user`
($CLAUDE_CONFIG_DIR or ~/.claude/settings.json), `project` (.claude/settings.json, shared
with the repository) and `local` (.claude/settings.local.json, yours only).
"""

from __future__ import annotations

import os
from pathlib import Path

from . import hook_settings as hs


def config_dir() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")


def settings_path(scope: str, project: str | None = None) -> Path:
    root = Path(project or os.getcwd()).absolute()
    if scope == "user":
        return config_dir() / "settings.json"
    if scope == "project":
        return root / ".claude" / "settings.json"
    return root / ".claude" / "settings.local.json"


TARGET = hs.Target(
    "Claude Code",
    ("user", "project", "local"),
    settings_path,
    "--settings",
    "a settings file of your own instead",
    "dsh-circuit-breaker install claude-code [--scope ...]",
)
add_arguments = TARGET.add_arguments
install = TARGET.install
uninstall = TARGET.uninstall
doctor = TARGET.doctor
