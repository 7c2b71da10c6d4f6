"""Mistral Vibe: `[[hooks]]` tables (`name`, `type`, `command`, `timeout`; no `match`: every
tool) of type `pre_tool` and `post_tool` in `$VIBE_HOME/hooks.toml` (default ~/.vibe), the
user's hook file. The tables are appended and removed as text (`_toml`), the rest of the
file left as it was. Vibe wants each hook's `name` unique across its hook files: ours are
`dsh-circuit-breaker-pre_tool` and `dsh-circuit-breaker-post_tool`.

The event is Vibe's own: `hook_event_name` (`pre_tool`, `post_tool`, `post_agent`),
`session_id`, `parent_session_id` (set inside a subagent, whose `session_id` is its own),
`tool_name` (namespaced, e.g. `file_system.bash`), `tool_call_id`, `tool_input`. The deny
is stdout `{"decision": "deny", "reason": ...}`, and the reason alone is the tool result the
model reads. A hook cannot end the run: a stop is the plain deny. There is no prompt event
(only `post_agent`, after the turn), so nothing resets on a typed prompt. `post_tool`
carries `tool_status`, `tool_output` (the tool's own result) and `tool_error`; it fires only
for a tool that ran.
"""

from __future__ import annotations

from ..judge import Call, Malformed, Outcome, escaped_id, subagent_key
from . import _defaults

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from ..core.breaker import Decision
    from ..judge import Prompt
    from ._toml import TomlFile

NAME = "mistral-vibe"
LABEL = "Mistral Vibe"
CLI = "vibe"
CLI_PACKAGE = "mistral-vibe"
# 3.0.3, the last release, cannot install (it pins a certifi release that does not exist).
CLI_INSTALL = "uv tool install --python 3.13 mistral-vibe==3.0.2"
CLI_TIMEOUT = _defaults.CLI_TIMEOUT
# SPEC's three, as Vibe's hook names them (it has no plan-mode tool).
EXEMPT = ("todo", "vibe.todo", "ui.ask_user_question")
ANNOTATION_ARGS: tuple[str, ...] = ()  # its bash tool takes no description

SCOPES = ("user",)
FILE_OPTION = "--hooks-file"
SETTINGS_EVENTS = ("pre_tool",)
POST_EVENTS = ("post_tool",)
HOOK_NAME = "dsh-circuit-breaker-"  # + the event: Vibe wants hook names unique

# `_contract.CommandHook`'s members it has nothing of its own for, from `_defaults`:
NOTE = _defaults.NOTE
HTTP_EVENTS = _defaults.HTTP_EVENTS
START_EVENT = _defaults.START_EVENT
EMPTY_FILE = _defaults.EMPTY_FILE


def parse(event: dict[str, Any]) -> Call | Prompt | Outcome | None:
    name = event.get("hook_event_name")
    if name == "pre_tool":
        call_id = event.get("tool_call_id")
        return Call(*_call_of(event, name), call_id if isinstance(call_id, str) else None)
    if name == "post_tool":
        result = {k: event.get(k) for k in ("tool_status", "tool_output", "tool_error")}
        return Outcome(*_call_of(event, name), result)
    if name == "post_agent":
        return None  # the end of a turn: not a prompt, and no call
    raise Malformed(f"unknown hook event {name!r}, allowed")


def agent_key(event: dict[str, Any], name: str) -> str:
    """The session; inside a subagent, its parent's session and its own."""
    session = event.get("session_id")
    if not isinstance(session, str) or not session:
        raise Malformed(f"{name} event has no session_id")
    parent = event.get("parent_session_id")
    if isinstance(parent, str) and parent:
        return subagent_key(parent, session)
    return escaped_id(session)


def _call_of(event: dict[str, Any], name: str) -> tuple[str, str, Any]:
    tool = event.get("tool_name")
    if not isinstance(tool, str) or not tool:
        raise Malformed(f"{name} event has no tool_name")
    if "tool_input" not in event:
        raise Malformed(f"{name} event has no tool_input")
    return agent_key(event, name), tool, event["tool_input"]


def answer(decision: Decision) -> str | None:
    """Allow: print nothing. Deny (a stop too: Vibe's hook has no way to end the run): the
    reason is what the model gets as the tool's result."""
    if decision.allowed:
        return None
    from ..core.cjson import canonical

    return canonical({"decision": "deny", "reason": decision.message})


def probe_events(session: str) -> list[dict[str, Any]]:
    """A call that a working hook allows silently."""
    import os

    return [
        {
            "session_id": session,
            "parent_session_id": None,
            "hook_event_name": "pre_tool",
            "tool_name": "file_system.bash",
            "tool_call_id": "doctor",
            "tool_input": {"command": "true"},
            "cwd": os.getcwd(),
        }
    ]


# -- the hook file (install / uninstall / doctor: harnesses/_command_hook) ---------------
def vibe_home() -> Path:
    import os
    from pathlib import Path

    return Path(os.environ.get("VIBE_HOME") or Path.home() / ".vibe").expanduser()


def settings_path(scope: str, project: str | None = None) -> Path:
    return vibe_home() / "hooks.toml"


def read_settings(path: Path, events: tuple[str, ...] = ()) -> TomlFile:
    """The file, its hook tables checked (those of `events` among them)."""
    from . import _toml

    return _toml.read(path, "hooks")


def our_commands(settings: TomlFile) -> dict[str, list[str]]:
    """event -> our hook commands in it."""
    from . import _toml

    return _toml.our_commands(settings, "hooks", "type")


def with_ours(
    settings: TomlFile, command: str, events: tuple[str, ...] = SETTINGS_EVENTS
) -> TomlFile:
    """Exactly one table per event of `events` running `command` (ours replaced)."""
    from ..core.invocation import HOOK_TIMEOUT
    from . import _toml

    tables = [
        {"name": HOOK_NAME + e, "type": e, "command": command, "timeout": HOOK_TIMEOUT}
        for e in events
    ]
    return _toml.with_tables(settings, "hooks", tables, _toml.is_ours)


def without_ours(settings: TomlFile) -> TomlFile | None:
    """The file without our tables; None when nothing else was in it (install made it)."""
    from . import _toml

    return _toml.without_ours(settings, "hooks")


def write_settings(path: Path, settings: TomlFile, backup: bool = True) -> Path | None:
    from . import _toml

    return _toml.write(path, settings, backup)


def conflicts(path: Path) -> list[str]:
    """Why Vibe would skip our hook in `path`: another table there with our name (Vibe keeps
    the first of a name and skips the rest)."""
    from . import _toml
    from ._settings import SettingsError

    try:
        tables = _toml.tables(read_settings(path), "hooks")
    except SettingsError:
        return []  # reported where the file is read
    ours = {HOOK_NAME + e for e in (*SETTINGS_EVENTS, *POST_EVENTS)}
    taken = sorted({t["name"] for t in tables if not _toml.is_ours(t) and t.get("name") in ours})
    return [
        f"{path}: a hook that is not ours is named {name!r}, the name ours takes "
        "(Vibe runs one hook of a name)"
        for name in taken
    ]
