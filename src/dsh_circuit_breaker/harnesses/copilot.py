"""GitHub Copilot CLI: a `preToolUse` and a `userPromptSubmitted` command hook in a hooks
file of our own, `dsh-circuit-breaker.json`, in Copilot's hooks directory:
`$COPILOT_HOME/hooks/` (default ~/.copilot) for the user, `<project>/.github/hooks/` for a
repository (run only once Copilot trusts the folder). Install and uninstall touch that one
file only; Copilot loads every `*.json` there.

Copilot's own hook shape, camelCase: the event is `{"sessionId", "timestamp", "cwd",
"toolName", "toolArgs"}` (a prompt: `"prompt"` in place of the tool), with no event
name, and a subagent's events carry `agentId`, `agentType` and `parentAgentId` (its
`sessionId` is its own). A deny is `{"permissionDecision": "deny",
"permissionDecisionReason": ...}`; the model gets `Denied by preToolUse hook: <reason>`.

The reason of a Stop hook that blocks comes back as a `userPromptSubmitted` with nothing
to tell it from a typed prompt (1.0.102), so it resets the session like one.
"""

from __future__ import annotations

from ..judge import Call, Malformed, Outcome, Prompt, escaped_id, subagent_key
from . import _defaults

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from ..core.breaker import Decision

NAME = "copilot"
LABEL = "GitHub Copilot"
CLI = "copilot"
CLI_PACKAGE = "@github/copilot"
EXEMPT = ("ask_user", "update_todo")  # Copilot's spellings of ask_user_question, todo_write
ANNOTATION_ARGS: tuple[str, ...] = ()  # bash's `description` is in SPEC's ignoreArgs already
NOTE = "A repository's hooks (.github/hooks/) run only once Copilot trusts the folder."

SCOPES = ("user", "project")
FILE_OPTION = "--hooks-file"
SETTINGS_EVENTS = ("preToolUse", "userPromptSubmitted")
# With results on: postToolUse, the call's fields plus `toolResult` (`{resultType,
# textResultForLlm}`); a failed command comes through it too, its exit code in the text.
POST_EVENTS = ("postToolUse",)
FILE_NAME = "dsh-circuit-breaker.json"
VERSION = 1  # the hooks file format Copilot reads
# The hooks file is ours alone: uninstall deletes it once this is all that is left.
EMPTY_FILE: dict[str, Any] = {"version": VERSION, "hooks": {}}

# `_contract.CommandHook`'s members it has nothing of its own for, from `_defaults`:
CLI_INSTALL = _defaults.CLI_INSTALL
CLI_TIMEOUT = _defaults.CLI_TIMEOUT
HTTP_EVENTS = _defaults.HTTP_EVENTS
START_EVENT = _defaults.START_EVENT
conflicts = _defaults.conflicts
write_settings = _defaults.write_settings


def agent_key(event: dict[str, Any]) -> str:
    """The session; inside a subagent, its parent and its own id (`parent/agent`): a
    subagent runs as a session of its own, whose id is its `agentId`."""
    session = event.get("sessionId")
    if not isinstance(session, str) or not session:
        raise Malformed("Copilot hook event has no sessionId")
    sub = event.get("agentId")
    if not isinstance(sub, str) or not sub:
        return escaped_id(session)
    parent = event.get("parentAgentId")
    parent = parent if isinstance(parent, str) and parent else session
    return escaped_id(sub) if parent == sub else subagent_key(parent, sub)


def parse(event: dict[str, Any]) -> Call | Prompt | Outcome | None:
    # Copilot names no event in its input: our preToolUse entry gets `toolName`, our
    # postToolUse entry `toolName` and `toolResult`, our userPromptSubmitted entry `prompt`.
    if "toolName" in event:
        name = "postToolUse" if "toolResult" in event else "preToolUse"
        tool = event["toolName"]
        if not isinstance(tool, str) or not tool:
            raise Malformed(f"{name} event has no toolName")
        if "toolArgs" not in event:
            raise Malformed(f"{name} event has no toolArgs")
        call = (agent_key(event), tool, _arguments(event["toolArgs"]))
        if "toolResult" in event:
            return Outcome(*call, _result(event["toolResult"]))
        return Call(*call)
    if "prompt" in event:
        key = agent_key(event)
        # A subagent's prompt is its parent's words, not a person's new intent.
        return None if "agentId" in event else Prompt(key)
    raise Malformed("not a preToolUse or userPromptSubmitted event, allowed")


def _arguments(args: Any) -> Any:
    """`toolArgs` is an object; a JSON string is read as one (past 1 MiB, in bounded
    memory, as a big event is: `bounded`), and a string that does not parse is itself
    the comparable value (SPEC)."""
    if not isinstance(args, str):
        return args
    from ..core.cjson import loads
    from ..judge import BIG_EVENT_BYTES

    try:
        if len(args) > BIG_EVENT_BYTES:
            from ..core.bounded import read

            return read(args.encode("utf-8", "surrogatepass"))[0]
        return loads(args)
    except (ValueError, RecursionError):
        return args


def _result(result: Any) -> Any:
    """The text the model got, the shell's running number (`<shellId: 3 completed with
    exit code 0>`, one more on every call) masked: a frozen poll's results are the same."""
    text = result.get("textResultForLlm") if isinstance(result, dict) else None
    if not isinstance(text, str):
        return result
    import re

    return re.sub(r"<shellId: \d+", "<shellId: N", text)


def answer(decision: Decision) -> str | None:
    """Allow: print nothing. Deny: Copilot's camelCase decision, exit 0."""
    if decision.allowed:
        return None
    from ..core.cjson import canonical

    return canonical({"permissionDecision": "deny", "permissionDecisionReason": decision.message})


def probe_events(session: str) -> list[dict[str, Any]]:
    """A call that must be allowed silently, then a prompt that clears it again."""
    import os
    import time

    base = {"sessionId": session, "timestamp": int(time.time() * 1000), "cwd": os.getcwd()}
    return [
        {
            **base,
            "toolName": "bash",
            "toolArgs": {"command": "true", "description": "dsh-circuit-breaker doctor"},
        },
        {**base, "prompt": "doctor"},
    ]


# -- the hooks file (install / uninstall / doctor: harnesses/_command_hook) --------------
def copilot_home() -> Path:
    import os
    from pathlib import Path

    return Path(os.environ.get("COPILOT_HOME") or Path.home() / ".copilot")


def settings_path(scope: str, project: str | None = None) -> Path:
    import os
    from pathlib import Path

    if scope == "user":
        return copilot_home() / "hooks" / FILE_NAME
    return Path(project or os.getcwd()).absolute() / ".github" / "hooks" / FILE_NAME


def read_settings(path: Path, events: tuple[str, ...] = ()) -> dict[str, Any]:
    """`{"version": 1, "hooks": {event: [handler, ...]}}`; `SettingsError` otherwise
    (every event's list is checked, `events`' among them)."""
    from ._settings import SettingsError, read_json

    data = read_json(path)
    if data.get("version", VERSION) != VERSION:
        raise SettingsError(f"{path}: hooks file version {data['version']!r} is not {VERSION}")
    hooks = data.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise SettingsError(f"{path}: `hooks` is not an object; not changing it")
    for event, handlers in (hooks or {}).items():
        if not isinstance(handlers, list):
            raise SettingsError(f"{path}: `hooks.{event}` is not a list; not changing it")
    return data


def _is_ours(handler: Any) -> bool:
    from ..core.invocation import is_ours

    return (
        isinstance(handler, dict)
        and handler.get("type") == "command"
        and is_ours(handler.get("bash"))
    )


def our_commands(settings: dict[str, Any]) -> dict[str, list[str]]:
    """event -> our hook commands in it."""
    found: dict[str, list[str]] = {}
    for event, handlers in (settings.get("hooks") or {}).items():
        for handler in handlers if isinstance(handlers, list) else []:
            if _is_ours(handler):
                found.setdefault(event, []).append(handler["bash"])
    return found


def without_ours(settings: dict[str, Any]) -> dict[str, Any]:
    """A copy with our handlers removed, and the events that held only ours."""
    result = dict(settings)
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return result
    kept: dict[str, Any] = {}
    for event, handlers in hooks.items():
        if not isinstance(handlers, list):
            kept[event] = handlers
            continue
        others = [h for h in handlers if not _is_ours(h)]
        if others or not handlers:  # an event left empty by us goes; one empty before stays
            kept[event] = others
    result["hooks"] = kept
    return result


def with_ours(
    settings: dict[str, Any], command: str, events: tuple[str, ...] = SETTINGS_EVENTS
) -> dict[str, Any]:
    """A copy with exactly one handler per event of `events` running `command` (ours
    replaced)."""
    from ..core.invocation import HOOK_TIMEOUT

    result = without_ours(settings)
    hooks = dict(result.get("hooks") or {})
    for event in events:
        handler = {"type": "command", "bash": command, "timeoutSec": HOOK_TIMEOUT}
        hooks[event] = [*(hooks.get(event) or []), handler]
    return {"version": VERSION, **result, "hooks": hooks}
