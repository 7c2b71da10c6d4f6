"""Gemini CLI: a `BeforeTool` command hook (every tool, no matcher) and a `BeforeAgent`
one (a new user prompt), in a Gemini CLI settings file: `user`
($GEMINI_CLI_HOME or ~, then .gemini/settings.json) or `project`
(<project>/.gemini/settings.json).

The event is one JSON object on stdin with `session_id`, `hook_event_name`, and on
BeforeTool `tool_name` and `tool_input`; a subagent's calls come through the same hook
with its parent's `session_id` and nothing naming the subagent, so every call of a
session is keyed by the session. BeforeAgent fires for Gemini CLI's own follow-ups too (a
nudge after an empty reply, the retry after its loop-detection dialog); only a prompt a
person typed resets the session (`_not_typed`). A denial is `{"decision": "deny",
"reason": ...}` on stdout with exit 0; the model gets `Tool execution blocked: <reason>` as
the call's error. A stop adds `continue: false` and `stopReason`, which end the main agent's loop (a
subagent takes it as the call's error and goes on). Gemini CLI counts hook timeouts in
milliseconds.
"""

from __future__ import annotations

from ..judge import Call, Malformed, Outcome, Prompt
from . import _defaults
from ._pretooluse import call_of, session_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from ..core.breaker import Decision

NAME = "gemini-cli"
LABEL = "Gemini CLI"
CLI = "gemini"
CLI_PACKAGE = "@google/gemini-cli"
# Its todo list, its question to the user, entering plan mode (exit_plan_mode is SPEC's
# already), the topic line it is told to update as it works, and the call by which a
# subagent hands back its result (refused, a looping subagent would run on to its turn
# limit and hand back nothing).
EXEMPT = ("write_todos", "ask_user", "enter_plan_mode", "update_topic", "complete_task")
# Besides run_shell_command's `description` (SPEC's already): the scheduling flag Gemini
# CLI adds to tools' schemas, and the edit tool's prose restatement of its edit.
ANNOTATION_ARGS = ("wait_for_previous", "instruction")
NOTE = (
    "Gemini CLI runs hooks only in a trusted folder (headless -p runs need "
    "GEMINI_CLI_TRUST_WORKSPACE=true or --skip-trust anyway)."
)

SCOPES = ("user", "project")
FILE_OPTION = "--settings"
SETTINGS_EVENTS = ("BeforeTool", "BeforeAgent")
# With results on: AfterTool, whose `tool_response` is `{llmContent, returnDisplay,
# error}`; its `llmContent` (what the model is sent, a failure's text too) is the result.
POST_EVENTS = ("AfterTool",)
# How Gemini CLI's own nudges to the model begin (`BeforeAgent` carries them as prompts).
NUDGE = "[System: "
HOOK_NAME = "dsh-circuit-breaker"  # what /hooks lists, and `/hooks disable` takes

# `_contract.CommandHook`'s members it has nothing of its own for, from `_defaults`:
CLI_INSTALL = _defaults.CLI_INSTALL
CLI_TIMEOUT = _defaults.CLI_TIMEOUT
HTTP_EVENTS = _defaults.HTTP_EVENTS
START_EVENT = _defaults.START_EVENT
EMPTY_FILE = _defaults.EMPTY_FILE
conflicts = _defaults.conflicts
read_settings = _defaults.read_settings
our_commands = _defaults.our_commands
without_ours = _defaults.without_ours
write_settings = _defaults.write_settings


def parse(event: dict[str, Any]) -> Call | Prompt | Outcome | None:
    name = event.get("hook_event_name")
    if name == "BeforeTool":
        return Call(*call_of(event, name, session_of))
    if name == "AfterTool":
        response = event.get("tool_response")
        if not isinstance(response, dict):
            raise Malformed("AfterTool event has no tool_response")
        return Outcome(*call_of(event, name, session_of), response.get("llmContent", response))
    if name == "BeforeAgent":
        return None if _not_typed(event.get("prompt")) else Prompt(session_of(event, name))
    raise Malformed(f"unknown hook event {name!r}, allowed")


def _not_typed(prompt: object) -> bool:
    """A BeforeAgent Gemini CLI sent for itself, not for a prompt a person typed: its own
    nudge after an empty reply (`[System: You successfully executed a tool but returned an
    empty response. ...]`), which it also resends when loop detection is switched off
    mid-turn and it retries the request, or a retry of tool results (an empty prompt).
    Resetting there restarted the count under one typed prompt (0.61.0: 4 + 6 copies)."""
    if not isinstance(prompt, str):
        return False  # no prompt field: as before, a new prompt
    text = prompt.strip()
    return not text or (text.startswith(NUDGE) and text.endswith("]"))


def answer(decision: Decision) -> str | None:
    """Allow: print nothing. Deny: `decision: "deny"` with the text, exit 0 (exit 2
    would deny with stderr as the reason). Stop: the deny plus `continue: false` and
    `stopReason`, which Gemini CLI checks first: the call does not run and the agent loop
    ends; the deny stays, so a Gemini CLI that ignored `continue` would still refuse."""
    if decision.allowed:
        return None
    from ..core.cjson import canonical

    out: dict[str, Any] = {"decision": "deny", "reason": decision.message}
    if decision.stop:
        out.update({"continue": False, "stopReason": decision.stop_reason})
    return canonical(out)


def probe_events(session: str) -> list[dict[str, Any]]:
    """A call that must be allowed silently, then a prompt that clears it again."""
    import os

    base = {"session_id": session, "transcript_path": "", "cwd": os.getcwd()}
    return [
        {
            **base,
            "hook_event_name": "BeforeTool",
            "tool_name": "run_shell_command",
            "tool_input": {"command": "true", "description": "dsh-circuit-breaker doctor"},
        },
        {**base, "hook_event_name": "BeforeAgent", "prompt": "doctor"},
    ]


def with_ours(
    settings: dict[str, Any], command: str, events: tuple[str, ...] = SETTINGS_EVENTS
) -> dict[str, Any]:
    """Our handler, its command ending in `|| true`: Gemini CLI takes any exit status
    from 2 up, with stderr, as a denial, so a hook whose Python is gone (exit 127) would
    refuse every tool call and every prompt. The hook itself always exits 0."""
    from ..core.invocation import HOOK_TIMEOUT
    from . import _settings

    handler = {"name": HOOK_NAME, "timeout": HOOK_TIMEOUT * 1000}
    return _settings.with_ours(settings, f"{command} || true", events, handler)


def gemini_home() -> Path:
    import os
    from pathlib import Path

    return Path(os.environ.get("GEMINI_CLI_HOME") or Path.home())


def settings_path(scope: str, project: str | None = None) -> Path:
    import os
    from pathlib import Path

    if scope == "user":
        return gemini_home() / ".gemini" / "settings.json"
    return Path(project or os.getcwd()).absolute() / ".gemini" / "settings.json"
