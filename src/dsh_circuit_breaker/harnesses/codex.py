"""Codex: command hooks in `hooks.json` next to its config: `$CODEX_HOME/hooks.json`
(default ~/.codex) for the user, `<project>/.codex/hooks.json` for a project. The
settings shape and the hook's stdin/stdout are Claude Code's (`_pretooluse`), but a stop
is the plain deny: Codex's `PreToolUse` rejects `continue`, and the deny with it.

Codex runs a user or project hook only once it is trusted: after installing, open Codex
and approve the two new hooks in `/hooks` (Codex records a hash of each; changing the
command, e.g. by reinstalling with other options, asks again).
"""

from __future__ import annotations

from . import _defaults, _pretooluse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

NAME = "codex"
LABEL = "Codex"
CLI = "codex"
CLI_PACKAGE = "@openai/codex"
EXEMPT = ("update_plan",)  # Codex's spelling of todo_write
ANNOTATION_ARGS: tuple[str, ...] = ()
NOTE = "Codex runs new hooks only once trusted: open Codex and approve them in /hooks."

parse = _pretooluse.parse
answer = _pretooluse.deny_only
probe_events = _pretooluse.probe_events

SCOPES = ("user", "project")
FILE_OPTION = "--hooks-file"
SETTINGS_EVENTS = _pretooluse.EVENTS
# With results on: PostToolUse's `tool_response`, the command's output as one string; a
# command that fails comes through it too (0.171.0 has no failure event).
POST_EVENTS = ("PostToolUse",)

# `_contract.CommandHook`'s members it has nothing of its own for, from `_defaults`:
CLI_INSTALL = _defaults.CLI_INSTALL
CLI_TIMEOUT = _defaults.CLI_TIMEOUT
HTTP_EVENTS = _defaults.HTTP_EVENTS
START_EVENT = _defaults.START_EVENT
EMPTY_FILE = _defaults.EMPTY_FILE
conflicts = _defaults.conflicts
read_settings = _defaults.read_settings
our_commands = _defaults.our_commands
with_ours = _defaults.with_ours
without_ours = _defaults.without_ours
write_settings = _defaults.write_settings


def codex_home() -> Path:
    import os
    from pathlib import Path

    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


def settings_path(scope: str, project: str | None = None) -> Path:
    import os
    from pathlib import Path

    if scope == "user":
        return codex_home() / "hooks.json"
    return Path(project or os.getcwd()).absolute() / ".codex" / "hooks.json"
