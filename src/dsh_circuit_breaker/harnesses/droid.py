"""Factory droid: Claude Code-format command hooks (`PreToolUse`, every tool, no matcher;
`UserPromptSubmit`) under `hooks` in droid's settings file: `~/.factory/settings.json`
($FACTORY_HOME_OVERRIDE replaces the home directory) for the user,
`<project>/.factory/settings.json` for a project. Events and answers are Claude Code's
(`_pretooluse`), plus `continue: false` and `stopReason` on a stop, which end the session
(a `Task` subagent is a session of its own); droid sends no subagent id.

droid also reads a `hooks.json` beside the settings file (else `hooks/hooks.json`), the
file its own hook editor writes, and an event defined there replaces the settings file's
hooks for that event: `conflicts` names such an event, so install refuses and doctor
reports rather than leaving a hook that never runs.
"""

from __future__ import annotations

from . import _defaults, _pretooluse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


NAME = "droid"
LABEL = "Factory droid"
CLI = "droid"
CLI_PACKAGE = "@factory/cli"
EXEMPT = ("TodoWrite", "AskUser", "ExitSpecMode")
# Execute's required `summary`, `riskLevel` and `riskLevelReason`: the model's own account
# of the command, written afresh on every call.
ANNOTATION_ARGS = ("summary", "riskLevel", "riskLevelReason")

parse = _pretooluse.parse
# droid checks `continue: false` before any permissionDecision, so a stop's answer refuses
# the call and ends `droid exec`; the deny stays, so a droid that ignored `continue` would
# still refuse. (Exit 3, droid's other abort, ends it the same way; `continue` keeps the
# hook's one exit status, 0.)
answer = _pretooluse.answer

SCOPES = ("user", "project")
FILE_OPTION = "--settings"
SETTINGS_EVENTS = _pretooluse.EVENTS
# With results on: PostToolUse's `tool_response`, the output as droid hands it to the
# model (`...[Process exited with code 0]`); droid sends none for a command that failed.
POST_EVENTS = ("PostToolUse",)

# `_contract.CommandHook`'s members it has nothing of its own for, from `_defaults`:
CLI_INSTALL = _defaults.CLI_INSTALL
CLI_TIMEOUT = _defaults.CLI_TIMEOUT
NOTE = _defaults.NOTE
HTTP_EVENTS = _defaults.HTTP_EVENTS
START_EVENT = _defaults.START_EVENT
EMPTY_FILE = _defaults.EMPTY_FILE
read_settings = _defaults.read_settings
our_commands = _defaults.our_commands
with_ours = _defaults.with_ours
without_ours = _defaults.without_ours
write_settings = _defaults.write_settings


def probe_events(session: str) -> list[dict[str, Any]]:
    call, prompt = _pretooluse.probe_events(session)
    call["tool_name"] = "Execute"
    call["tool_input"] = {
        "command": "true",
        "summary": "Check the circuit breaker hook",
        "riskLevel": "low",
        "riskLevelReason": "dsh-circuit-breaker doctor: runs nothing.",
    }
    return [call, prompt]


def settings_path(scope: str, project: str | None = None) -> Path:
    import os
    from pathlib import Path

    if scope == "user":
        home = os.environ.get("FACTORY_HOME_OVERRIDE") or Path.home()
        return Path(home) / ".factory" / "settings.json"
    return Path(project or os.getcwd()).absolute() / ".factory" / "settings.json"


def conflicts(path: Path) -> list[str]:
    """The events of droid's hooks file beside `path` that would replace ours in `path`."""
    from . import _settings

    hooks_file = path.parent / "hooks.json"
    if not hooks_file.exists():
        hooks_file = path.parent / "hooks" / "hooks.json"
    try:
        defined = _settings.read_json(hooks_file)  # events at the top, no `hooks` key
    except _settings.SettingsError as exc:
        return [f"{exc} (droid reads its hooks from it too)"]
    ours = _settings.our_commands({"hooks": defined})
    return [
        f"{hooks_file} defines {event}, which replaces the {event} hooks of {path} for droid"
        f": move that entry into {path.name}'s `hooks`, or add ours there by hand"
        for event in SETTINGS_EVENTS
        if event in defined and event not in ours
    ]
