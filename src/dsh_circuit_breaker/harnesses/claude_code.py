"""Claude Code: a `PreToolUse` command hook (every tool, no matcher) and a
`UserPromptSubmit` one, in a Claude Code settings file.

Scopes are Claude Code's own: `user` ($CLAUDE_CONFIG_DIR or ~/.claude/settings.json),
`project` (.claude/settings.json, shared with the repository) and `local`
(.claude/settings.local.json, yours only). The event and answer shapes are in
`_pretooluse` (a stop: the deny plus `continue: false`, which ends the session, or only
the subagent it came from); a subagent is keyed `session_id/agent_id`, its PostToolUse too.
With `install --http`, Claude
Code posts the same events to the resident guard (`serve --http`): an HTTP hook takes the
command hook's JSON in its body and its output back in a 2xx body (2.1.332).
"""

from __future__ import annotations

from . import _defaults, _pretooluse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

NAME = "claude-code"
LABEL = "Claude Code"
CLI = "claude"
CLI_PACKAGE = "@anthropic-ai/claude-code"
EXEMPT = ("TodoWrite", "AskUserQuestion", "ExitPlanMode")
ANNOTATION_ARGS: tuple[str, ...] = ()  # Bash's `description` is in SPEC's ignoreArgs already

parse = _pretooluse.parse
answer = _pretooluse.answer
probe_events = _pretooluse.probe_events

SCOPES = ("user", "project", "local")
FILE_OPTION = "--settings"
SETTINGS_EVENTS = _pretooluse.EVENTS
# With results on: `tool_response` of PostToolUse (the tool's own output object, e.g.
# Bash's stdout and stderr), `error` of PostToolUseFailure (a Bash exit status but 0).
POST_EVENTS = _pretooluse.POST_EVENTS
# `install claude-code --http` (harnesses/_http_hook.py): HTTP hooks on these events, and
# a command hook once per session that starts the guard unless it answers.
HTTP_EVENTS = _pretooluse.EVENTS
START_EVENT = "SessionStart"

# `_contract.CommandHook`'s members it has nothing of its own for, from `_defaults`:
CLI_INSTALL = _defaults.CLI_INSTALL
CLI_TIMEOUT = _defaults.CLI_TIMEOUT
NOTE = _defaults.NOTE
EMPTY_FILE = _defaults.EMPTY_FILE
conflicts = _defaults.conflicts
read_settings = _defaults.read_settings
our_commands = _defaults.our_commands
with_ours = _defaults.with_ours
without_ours = _defaults.without_ours
write_settings = _defaults.write_settings


def config_dir() -> Path:
    import os
    from pathlib import Path

    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")


def settings_path(scope: str, project: str | None = None) -> Path:
    import os
    from pathlib import Path

    root = Path(project or os.getcwd()).absolute()
    if scope == "user":
        return config_dir() / "settings.json"
    if scope == "project":
        return root / ".claude" / "settings.json"
    return root / ".claude" / "settings.local.json"
