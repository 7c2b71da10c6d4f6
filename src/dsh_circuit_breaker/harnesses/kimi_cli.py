"""Kimi CLI: `[[hooks]]` tables (`event`, `command`, `timeout`; no `matcher`: every tool)
for `PreToolUse` and `UserPromptSubmit` in Kimi's config file, `$KIMI_SHARE_DIR/config.toml`
(default ~/.kimi), its only hook file. The tables are appended and removed as text
(`_toml`), the rest of the file left as it was.

Events and the deny are Claude Code's shape (`_pretooluse`): `session_id`, `tool_name`,
`tool_input`, `tool_call_id`; the deny's reason is the tool's error. Kimi reads no
`continue`, so a stop is the plain deny. A subagent runs in its parent's session and its
events name nothing else: it is keyed as its parent, and its task prompt comes as a
`UserPromptSubmit` like a typed one (only the fixed follow-up Kimi sends a subagent whose
summary was too short is told apart). `PostToolUse` carries `tool_output`, the repr of the
tool's return value cut at 2,000 characters; Kimi fires it without waiting, so it may
arrive after the next call's `PreToolUse`.
"""

from __future__ import annotations

from ..judge import Malformed, Outcome
from . import _defaults, _pretooluse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from ..judge import Call, Prompt
    from ._toml import TomlFile

NAME = "kimi-cli"
LABEL = "Kimi CLI"
CLI = "kimi"
CLI_PACKAGE = "kimi-cli"
# 1.52.0, the last release, only prints a notice (and with no arguments runs a download).
CLI_INSTALL = "uv tool install --python 3.13 kimi-cli==1.51.0"
CLI_TIMEOUT = _defaults.CLI_TIMEOUT
EXEMPT = ("SetTodoList", "AskUserQuestion", "ExitPlanMode")  # SPEC's three, Kimi's spelling
# Shell's and Agent's `description` are in SPEC's ignoreArgs already.
ANNOTATION_ARGS: tuple[str, ...] = ()

answer = _pretooluse.deny_only

SCOPES = ("user",)
FILE_OPTION = "--config-file"  # Kimi's own option for another config file
SETTINGS_EVENTS = _pretooluse.EVENTS
POST_EVENTS = _pretooluse.POST_EVENTS
# What HookDef (kimi_cli/hooks/config.py) accepts; any other event stops Kimi at start.
EVENTS = frozenset(
    (
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "UserPromptSubmit",
        "Stop",
        "StopFailure",
        "SessionStart",
        "SessionEnd",
        "SubagentStart",
        "SubagentStop",
        "PreCompact",
        "PostCompact",
        "Notification",
    )
)
# The prompt Kimi sends a subagent whose answer was too short (subagents/runner.py).
SUMMARY_CONTINUATION = "Your previous response was too brief. Please provide a more comprehensive"

# `_contract.CommandHook`'s members it has nothing of its own for, from `_defaults`:
NOTE = _defaults.NOTE
HTTP_EVENTS = _defaults.HTTP_EVENTS
START_EVENT = _defaults.START_EVENT
EMPTY_FILE = _defaults.EMPTY_FILE


def parse(event: dict[str, Any]) -> Call | Prompt | Outcome | None:
    name = event.get("hook_event_name")
    if name == "PostToolUse":
        if "tool_output" not in event:
            raise Malformed("PostToolUse event has no tool_output")
        return Outcome(*_pretooluse.call_of(event, name), event["tool_output"])
    if name == "UserPromptSubmit":
        prompt = event.get("prompt")
        if isinstance(prompt, str) and prompt.startswith(SUMMARY_CONTINUATION):
            return None  # Kimi's own follow-up inside a subagent, not the person
    return _pretooluse.parse(event)


def probe_events(session: str) -> list[dict[str, Any]]:
    call, prompt = _pretooluse.probe_events(session)
    call["tool_name"] = "Shell"
    call["tool_call_id"] = call.pop("tool_use_id")
    return [call, prompt]


# -- the config file (install / uninstall / doctor: harnesses/_command_hook) -------------
def share_dir() -> Path:
    import os
    from pathlib import Path

    return Path(os.environ.get("KIMI_SHARE_DIR") or Path.home() / ".kimi")


def settings_path(scope: str, project: str | None = None) -> Path:
    return share_dir() / "config.toml"


def read_settings(path: Path, events: tuple[str, ...] = ()) -> TomlFile:
    """The file, its hook tables checked (those of `events` among them)."""
    from . import _toml
    from ._settings import SettingsError

    if path.suffix.lower() == ".json":
        raise SettingsError(
            f"{path}: Kimi CLI reads a .json config file as JSON, and install writes TOML; "
            "name a .toml file"
        )
    return _toml.read(path, "hooks")


def our_commands(settings: TomlFile) -> dict[str, list[str]]:
    """event -> our hook commands in it."""
    from . import _toml

    return _toml.our_commands(settings, "hooks", "event")


def with_ours(
    settings: TomlFile, command: str, events: tuple[str, ...] = SETTINGS_EVENTS
) -> TomlFile:
    """Exactly one table per event of `events` running `command` (ours replaced)."""
    from ..core.invocation import HOOK_TIMEOUT
    from . import _toml

    tables = [{"event": e, "command": command, "timeout": HOOK_TIMEOUT} for e in events]
    return _toml.with_tables(settings, "hooks", tables, _toml.is_ours)


def without_ours(settings: TomlFile) -> TomlFile | None:
    """The file without our tables; None when nothing else was in it (install made it)."""
    from . import _toml

    return _toml.without_ours(settings, "hooks")


def write_settings(path: Path, settings: TomlFile, backup: bool = True) -> Path | None:
    from . import _toml

    return _toml.write(path, settings, backup)


def conflicts(path: Path) -> list[str]:
    """Why Kimi would not run our hook from `path`: a hook table Kimi rejects (it then
    refuses the whole file and does not start), or a legacy config.json that Kimi moves
    into config.toml only while there is no config.toml (install would create one)."""
    from . import _toml
    from ._settings import SettingsError

    if not path.exists():
        legacy = path.with_name("config.json")
        if path == settings_path("user") and legacy.exists():
            return [
                f"{legacy} is Kimi's old config, which it moves into {path.name} only while "
                f"there is none: run `kimi` once first, so that it does"
            ]
        return []
    try:
        tables = _toml.tables(read_settings(path), "hooks")
    except SettingsError:
        return []  # reported where the file is read
    problems = [problem for problem in map(_problem, tables) if problem]
    return [f"{path}: {problem}; Kimi refuses the file" for problem in problems]


def _problem(table: dict[str, Any]) -> str | None:
    """What Kimi's HookDef rejects in a hook table, if anything."""
    event, timeout = table.get("event"), table.get("timeout", 30)
    if event not in EVENTS:
        return f"a [[hooks]] table has event {event!r}, which Kimi does not know"
    if not isinstance(table.get("command"), str):
        return f"a [[hooks]] table for {event} has no command"
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 600:
        return f"a [[hooks]] table for {event} has timeout {timeout!r} (1 to 600 seconds)"
    return None
