"""Qwen Code: a `PreToolUse` command hook (every tool, no matcher) and a
`UserPromptSubmit` one in a Qwen Code settings file: `$QWEN_HOME/settings.json` (default
~/.qwen) for the user, `<project>/.qwen/settings.json` for a project (read only in a
trusted folder). The settings shape and the hook's stdin/stdout are Claude Code's
(`_pretooluse`); a subagent's events carry `agent_id`, keyed `session_id/agent_id`.

Qwen fires `UserPromptSubmit` before every model request of a turn, tool results
included; only a request that starts from what the person submitted carries
`submitted_prompt`, so that alone is a new prompt. A stop is the plain deny: Qwen's
`PreToolUse` reads the deny before `continue` and ends no run.
"""

from __future__ import annotations

from ..judge import Outcome, Prompt
from . import _defaults, _pretooluse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from ..judge import Call

NAME = "qwen-code"
LABEL = "Qwen Code"
CLI = "qwen"
CLI_PACKAGE = "@qwen-code/qwen-code"
EXEMPT = ()  # todo_write, ask_user_question, exit_plan_mode: SPEC's defaults already
# run_shell_command's `description` is in SPEC's ignoreArgs already; its other arguments
# (command, is_background, timeout, directory) change what runs.
ANNOTATION_ARGS: tuple[str, ...] = ()

answer = _pretooluse.deny_only

SCOPES = ("user", "project")
FILE_OPTION = "--settings"
SETTINGS_EVENTS = _pretooluse.EVENTS
# With results on: PostToolUse's `tool_response.llmContent` (what the model is sent;
# `returnDisplay` is the screen's, with a subagent's timings), PostToolUseFailure's `error`.
POST_EVENTS = _pretooluse.POST_EVENTS

# `_contract.CommandHook`'s members it has nothing of its own for, from `_defaults`:
CLI_INSTALL = _defaults.CLI_INSTALL
CLI_TIMEOUT = _defaults.CLI_TIMEOUT
NOTE = _defaults.NOTE
HTTP_EVENTS = _defaults.HTTP_EVENTS
START_EVENT = _defaults.START_EVENT
EMPTY_FILE = _defaults.EMPTY_FILE
conflicts = _defaults.conflicts
read_settings = _defaults.read_settings
our_commands = _defaults.our_commands
with_ours = _defaults.with_ours
without_ours = _defaults.without_ours
write_settings = _defaults.write_settings


def parse(event: dict[str, Any]) -> Call | Prompt | Outcome | None:
    name = event.get("hook_event_name")
    if name != "UserPromptSubmit":
        what = _pretooluse.parse(event)
        if isinstance(what, Outcome) and isinstance(what.result, dict):
            what.result = what.result.get("llmContent", what.result)
        return what
    submitted = event.get("submitted_prompt")
    if event.get("agent_id") or not isinstance(submitted, str) or not submitted.strip():
        return None  # a tool result or a subagent's request going to the model
    return Prompt(_pretooluse.session_of(event, name))


def probe_events(session: str) -> list[dict[str, Any]]:
    call, prompt = _pretooluse.probe_events(session)
    call["tool_name"] = "run_shell_command"
    prompt["submitted_prompt"] = prompt["prompt"]
    return [call, prompt]


def settings_path(scope: str, project: str | None = None) -> Path:
    import os
    from pathlib import Path

    if scope == "user":
        return Path(os.environ.get("QWEN_HOME") or Path.home() / ".qwen") / "settings.json"
    return Path(project or os.getcwd()).absolute() / ".qwen" / "settings.json"
