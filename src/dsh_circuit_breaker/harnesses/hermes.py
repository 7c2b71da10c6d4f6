"""Hermes Agent: shell hooks under `hooks:` in `$HERMES_HOME/config.yaml` (default
~/.hermes), one list of `{command, timeout}` per event: `pre_tool_call` (judged),
`pre_llm_call` (once per turn, before the model is first asked: the typed prompt) and
`post_tool_call` (the result). Hermes splits the command with shlex and runs it without a
shell; it runs a hook only once the person accepted it (a prompt on a terminal, else
`--accept-hooks`, `HERMES_ACCEPT_HOOKS=1` or `hooks_auto_accept: true`).

Every event is `{hook_event_name, tool_name, tool_input, session_id, cwd, extra}`, the
event's own fields in `extra` (`tool_call_id`; `result` and `status` after the call). A
subagent (`delegate_task`) runs under a session of its own, so it is keyed apart. The
deny is `{"decision": "block", "reason": ...}`, which the model gets as the tool's
`{"error": reason}`; a hook cannot end the run, so a stop is the plain deny.

The file is read and written with PyYAML (the `yaml` extra): the user's other keys and
hooks are kept, their comments are not.
"""

from __future__ import annotations

from ..judge import Call, Malformed, Outcome, Prompt, escaped_id
from . import _defaults

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from ..core.breaker import Decision

NAME = "hermes"
LABEL = "Hermes Agent"
CLI = "hermes"
CLI_PACKAGE = "hermes-agent"
CLI_INSTALL = "pip install hermes-agent, on Python 3.11+"
CLI_TIMEOUT = _defaults.CLI_TIMEOUT
EXEMPT = ("todo", "clarify")  # SPEC's todo writer and ask-the-user, Hermes's spelling
ANNOTATION_ARGS: tuple[str, ...] = ()  # its tools take no label the model rewrites

SCOPES = ("user",)
FILE_OPTION = "--config-file"
SETTINGS_EVENTS = ("pre_tool_call", "pre_llm_call")
POST_EVENTS = ("post_tool_call",)
# `_contract.CommandHook`'s members it has nothing of its own for, from `_defaults`:
NOTE = _defaults.NOTE
HTTP_EVENTS = _defaults.HTTP_EVENTS
START_EVENT = _defaults.START_EVENT
EMPTY_FILE = _defaults.EMPTY_FILE
conflicts = _defaults.conflicts


def _session(event: dict[str, Any], name: str) -> str:
    session = event.get("session_id")
    if not isinstance(session, str) or not session:
        raise Malformed(f"{name} event has no session_id")
    return escaped_id(session)


def _call(event: dict[str, Any], name: str) -> tuple[str, str, Any]:
    tool = event.get("tool_name")
    if not isinstance(tool, str) or not tool:
        raise Malformed(f"{name} event has no tool_name")
    if not isinstance(event.get("tool_input"), dict):
        raise Malformed(f"{name} event has no tool_input")
    return _session(event, name), tool, event["tool_input"]


def _extra(event: dict[str, Any]) -> dict[str, Any]:
    extra = event.get("extra")
    return extra if isinstance(extra, dict) else {}


def parse(event: dict[str, Any]) -> Call | Prompt | Outcome | None:
    name = event.get("hook_event_name")
    if name == "pre_tool_call":
        call_id = _extra(event).get("tool_call_id")
        return Call(*_call(event, name), call_id if isinstance(call_id, str) else None)
    if name == "post_tool_call":
        extra = _extra(event)
        if extra.get("status") == "blocked":
            return None  # a refused call, ours or another hook's: it never ran
        if "result" not in extra:
            raise Malformed("post_tool_call event has no result")
        return Outcome(*_call(event, name), extra["result"])
    if name == "pre_llm_call":
        return Prompt(_session(event, name))
    raise Malformed(f"unknown hook event {name!r}, allowed")


def answer(decision: Decision) -> str | None:
    """Allow: print nothing. Deny (and stop, which Hermes cannot act on): a block."""
    if decision.allowed:
        return None
    from ..core.cjson import canonical

    return canonical({"decision": "block", "reason": decision.message})


def probe_events(session: str) -> list[dict[str, Any]]:
    import os

    call = {
        "hook_event_name": "pre_tool_call",
        "tool_name": "terminal",
        "tool_input": {"command": "true"},
        "session_id": session,
        "cwd": os.getcwd(),
        "extra": {"tool_call_id": "doctor"},
    }
    prompt = dict(call, hook_event_name="pre_llm_call", tool_name=None, tool_input=None)
    return [call, prompt]


# -- the config file (install / uninstall / doctor: harnesses/_command_hook) -------------
def settings_path(scope: str, project: str | None = None) -> Path:
    import os
    from pathlib import Path

    return Path(os.environ.get("HERMES_HOME") or Path.home() / ".hermes") / "config.yaml"


def _yaml() -> Any:
    from ._settings import SettingsError

    try:
        import yaml  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise SettingsError(
            "Hermes Agent's config is YAML, which needs PyYAML: "
            "pip install 'dsh-circuit-breaker[yaml]'"
        ) from None
    return yaml


def read_settings(path: Path, events: tuple[str, ...] = ()) -> dict[str, Any]:
    """The file's mapping ({} when missing or blank); `SettingsError` for a file that is not
    a YAML mapping, or whose `hooks` or an event's list is of another shape (those of
    every event of ours, `events` among them)."""
    from ..core.config_file import _counted
    from ..core.files import read_regular
    from ._settings import MAX_SETTINGS_BYTES, SettingsError, Unreadable

    if not path.exists():
        return {}
    try:  # never a FIFO (it would block) or a directory
        raw = read_regular(str(path), MAX_SETTINGS_BYTES)
    except OSError as exc:
        raise Unreadable(f"cannot read {path}: {exc.strerror or exc}") from None
    yaml = _yaml()
    try:
        data = _counted(yaml.safe_load(raw), str(path))
    except Exception as exc:  # PyYAML's errors, and too many values through aliases
        problem = " ".join(str(exc).split())
        raise SettingsError(f"{path} is not valid YAML ({problem}); not changing it") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path} does not hold a YAML mapping; not changing it")
    hooks = data.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise SettingsError(f"{path}: `hooks` is not a mapping; not changing it")
    for event in (*SETTINGS_EVENTS, *POST_EVENTS):
        entries = (hooks or {}).get(event)
        if entries is not None and not isinstance(entries, list):
            raise SettingsError(f"{path}: `hooks.{event}` is not a list; not changing it")
    return data


def _is_ours(entry: Any) -> bool:
    from ..core.invocation import is_ours

    return isinstance(entry, dict) and is_ours(entry.get("command"))


def our_commands(settings: dict[str, Any]) -> dict[str, list[str]]:
    """event -> our hook commands in it."""
    found: dict[str, list[str]] = {}
    for event, entries in (settings.get("hooks") or {}).items():
        for entry in entries if isinstance(entries, list) else []:
            if _is_ours(entry):
                found.setdefault(event, []).append(entry["command"])
    return found


def without_ours(settings: dict[str, Any]) -> dict[str, Any] | None:
    """A copy without our entries, and without the events and `hooks` left empty by that;
    None when nothing is left (install made the file)."""
    result = dict(settings)
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return result or None
    kept: dict[str, Any] = {}
    for event, entries in hooks.items():
        if not isinstance(entries, list):
            kept[event] = entries
            continue
        rest = [e for e in entries if not _is_ours(e)]
        if rest or not entries:
            kept[event] = rest
    if kept:
        result["hooks"] = kept
    else:
        result.pop("hooks")
    return result or None


def with_ours(
    settings: dict[str, Any], command: str, events: tuple[str, ...] = SETTINGS_EVENTS
) -> dict[str, Any]:
    """Exactly one entry per event of `events` running `command` (ours replaced), after
    the user's own."""
    from ..core.invocation import HOOK_TIMEOUT

    result = without_ours(settings) or {}
    hooks = dict(result.get("hooks") or {})
    for event in events:
        hooks[event] = [*hooks.get(event, []), {"command": command, "timeout": HOOK_TIMEOUT}]
    result["hooks"] = hooks
    return result


def write_settings(path: Path, settings: dict[str, Any], backup: bool = True) -> Path | None:
    from ._settings import write_text

    text = _yaml().safe_dump(settings, sort_keys=False, allow_unicode=True, width=1000)
    return write_text(path, text, backup)
