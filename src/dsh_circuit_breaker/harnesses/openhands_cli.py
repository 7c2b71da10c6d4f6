"""OpenHands CLI (PyPI `openhands`): our command hook in the `hooks.json` its SDK's
`HookConfig.load` reads at start, `.openhands/hooks.json` in the working directory, else
`~/.openhands/hooks.json` (the first that exists, not both), in Claude Code's JSON shape:
`{"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", ...}]}]}}`,
or the same events without the `hooks` wrapper, or spelled `pre_tool_use`.

The events and the deny are the OpenHands SDK's (`openhands.parse`: `event_type`,
`session_id` the conversation's id, `tool_input` the action, `tool_response` after the call,
`message` on `UserPromptSubmit`). The model reads `Action rejected: <reason>`. The CLI
gives the conversation no callback of ours, and its SDK reads `continue: false` as one more
way to block the call: nothing ends a run from a hook, so a stop is the plain deny. A
subagent (the task tool) runs with its agent definition's hooks only, never hooks.json's.
"""

from __future__ import annotations

from . import _defaults, openhands

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from ..core.breaker import Decision

NAME = "openhands-cli"
LABEL = "OpenHands CLI"
CLI = "openhands"
CLI_PACKAGE = "openhands"
CLI_INSTALL = "uv tool install --python 3.12 openhands==1.16.0"
# `openhands --version` imports the whole SDK first: 7 s of CPU here, a minute under load.
CLI_TIMEOUT = 180
EXEMPT = openhands.EXEMPT
ANNOTATION_ARGS = openhands.ANNOTATION_ARGS  # OpenHands drops `summary` and `security_risk`

parse = openhands.parse

SCOPES = ("user", "project")
FILE_OPTION = "--hooks-file"
SETTINGS_EVENTS = openhands.PRE_EVENTS
POST_EVENTS = openhands.POST_EVENTS
# HookConfig's fields (openhands/sdk/hooks/config.py): a key of another name makes
# `HookConfig.load` raise, and the CLI with it.
FIELDS = {
    "PreToolUse": "pre_tool_use",
    "PostToolUse": "post_tool_use",
    "UserPromptSubmit": "user_prompt_submit",
    "SessionStart": "session_start",
    "SessionEnd": "session_end",
    "Stop": "stop",
}
SPELLED = {snake: pascal for pascal, snake in FIELDS.items()}

NOTE = _defaults.NOTE
HTTP_EVENTS = _defaults.HTTP_EVENTS
START_EVENT = _defaults.START_EVENT
EMPTY_FILE = _defaults.EMPTY_FILE
write_settings = _defaults.write_settings


def answer(decision: Decision) -> str | None:
    """Allow: print nothing. Deny (a stop too): the decision and the breaker's text."""
    if decision.allowed:
        return None
    from ..core.cjson import canonical

    return canonical({"decision": "deny", "reason": decision.message})


def probe_events(session: str) -> list[dict[str, Any]]:
    """A terminal call that must be allowed silently, then a prompt that clears it."""
    import os

    base = {"session_id": session, "working_dir": os.getcwd(), "metadata": {}}
    action = {"command": "true", "is_input": False, "reset": False}
    return [
        {**base, "event_type": "PreToolUse", "tool_name": "terminal", "tool_input": action},
        {**base, "event_type": "UserPromptSubmit", "message": "doctor"},
    ]


# -- hooks.json (install / uninstall / doctor: harnesses/_command_hook) --------------------
def settings_path(scope: str, project: str | None = None) -> Path:
    import os
    from pathlib import Path

    if scope == "user":
        return Path.home() / ".openhands" / "hooks.json"
    return Path(project or os.getcwd()).absolute() / ".openhands" / "hooks.json"


def _snake(key: str) -> str:
    """The HookConfig field a key names (`PreToolUse` and `pre_tool_use` alike)."""
    return FIELDS.get(key, key)


def _events(settings: dict[str, Any]) -> dict[str, Any]:
    """The object holding the events: `hooks` (Claude Code's wrapper) or the file itself."""
    events = settings.get("hooks", settings)
    return events if isinstance(events, dict) else {}


def read_settings(path: Path, events: tuple[str, ...] = SETTINGS_EVENTS) -> dict[str, Any]:
    """The file, every event in it checked to be a list (OpenHands' own check, not only
    `events`: any event of another shape makes it refuse the file)."""
    from ._settings import SettingsError, read_json

    data = read_json(path)
    if "hooks" in data and not isinstance(data["hooks"], dict):
        raise SettingsError(f"{path}: `hooks` is not an object; not changing it")
    for key, groups in _events(data).items():
        if _snake(key) in SPELLED and not isinstance(groups, list):
            raise SettingsError(f"{path}: `{key}` is not a list; not changing it")
    return data


def our_commands(settings: dict[str, Any]) -> dict[str, list[str]]:
    """event (as `PreToolUse`) -> our hook commands in it, however the file spells it."""
    from . import _settings

    found = _settings.our_commands({"hooks": _events(settings)})
    return {SPELLED.get(_snake(event), event): commands for event, commands in found.items()}


def with_ours(
    settings: dict[str, Any], command: str, events: tuple[str, ...] = SETTINGS_EVENTS
) -> dict[str, Any]:
    """Exactly one group per event running `command` (ours replaced), under the key the
    file already uses for that event (OpenHands refuses `PreToolUse` beside
    `pre_tool_use`), in the file's own shape."""
    from . import _settings

    present = {_snake(key): key for key in _events(settings)}
    spelled = tuple(present.get(FIELDS[event], event) for event in events)
    hooks = _settings.with_ours({"hooks": _events(settings)}, command, spelled)["hooks"]
    if "hooks" in settings or not settings:
        return {**settings, "hooks": hooks}
    return dict(hooks)  # the events at the top, as the user wrote them


def without_ours(settings: dict[str, Any]) -> dict[str, Any] | None:
    """The file without our groups; None when nothing else was in it (install made it)."""
    from . import _settings

    kept = _settings.without_ours({"hooks": _events(settings)}).get("hooks")
    if "hooks" not in settings:
        return dict(kept) if kept else None
    rest = {k: v for k, v in settings.items() if k != "hooks"}
    return ({**rest, "hooks": kept} if kept is not None else rest) or None


def conflicts(path: Path) -> list[str]:
    """Why OpenHands would not run our hook from `path`: a file its `HookConfig` rejects
    (the CLI then fails at start), or, for the user's file, a project file in the current
    directory, which OpenHands reads in its place."""
    from ._settings import SettingsError

    try:
        problems = [f"{path}: {p}; OpenHands rejects the file" for p in _rejected(path)]
    except SettingsError:
        return []  # reported where the file is read
    project = settings_path("project")
    if path == settings_path("user") and project != path and project.exists():
        try:
            ours = our_commands(read_settings(project))
        except SettingsError:
            ours = {}
        if not ours:
            problems.append(
                f"{project} exists, and OpenHands reads only the first hooks.json it finds "
                f"(the project's, then yours): the hook in {path} would not run in "
                f"{project.parent.parent}; install it there with `--scope project`"
            )
    return problems


def _rejected(path: Path) -> list[str]:
    """What `HookConfig.load` refuses in the file: an event it does not know, one event
    under two spellings, a group or a hook of another shape."""
    problems: list[str] = []
    seen: dict[str, str] = {}
    for key, groups in _events(read_settings(path)).items():
        field = _snake(key)
        if field not in SPELLED:
            problems.append(f"it has an event {key!r}, which OpenHands does not know")
        elif field in seen:
            problems.append(f"it has both {seen[field]!r} and {key!r}")
        seen[field] = key
        for group in groups if isinstance(groups, list) else []:
            if not _valid_group(group):
                problems.append(f"a group under {key!r} is not a matcher with a hooks list")
    return problems


def _valid_group(group: Any) -> bool:
    if not isinstance(group, dict) or not isinstance(group.get("matcher", "*"), str):
        return False
    hooks = group.get("hooks", [])
    return isinstance(hooks, list) and all(
        isinstance(h, dict) and isinstance(h.get("command"), str) for h in hooks
    )
