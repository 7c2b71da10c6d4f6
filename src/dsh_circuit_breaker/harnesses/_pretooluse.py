"""Claude Code's hook wire shape, which Codex (and others) copied: one JSON event on
stdin with `session_id`, `hook_event_name`, `tool_name`, `tool_input`, `tool_use_id`,
plus `agent_id` inside a subagent and `prompt` on UserPromptSubmit. After the call ran,
`PostToolUse` repeats the call's fields and adds `tool_response` (what the tool
returned); `PostToolUseFailure` (Claude Code, Qwen Code) has `error` in its place.

A harness that speaks it borrows these by assignment (`parse = _pretooluse.parse`); one
whose `PreToolUse` cannot end the agent answers with `deny_only` in place of `answer`.
"""

from __future__ import annotations

from ..judge import Call, Malformed, Outcome, Prompt, escaped_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ..core.breaker import Decision

EVENTS = ("PreToolUse", "UserPromptSubmit")
# The post-tool events install adds where the config observes results; a harness that
# has only the first names it alone.
POST_EVENTS = ("PostToolUse", "PostToolUseFailure")


def session_of(event: dict[str, Any], name: str) -> str:
    session = event.get("session_id")
    if not isinstance(session, str) or not session:
        raise Malformed(f"{name} event has no session_id")
    return escaped_id(session)


def agent_key(event: dict[str, Any], name: str = "PreToolUse") -> str:
    """The session, plus its subagent id inside a subagent (a Claude Code subagent shares
    its parent's `session_id`)."""
    session = session_of(event, name)
    sub = event.get("agent_id")
    if isinstance(sub, str) and sub:
        return f"{session}/{escaped_id(sub)}"
    return session


def parse(event: dict[str, Any]) -> Call | Prompt | Outcome | None:
    name = event.get("hook_event_name")
    if name == "PreToolUse":
        call_id = event.get("tool_use_id")
        return Call(*call_of(event, name), call_id if isinstance(call_id, str) else None)
    if name == "PostToolUse":
        if "tool_response" not in event:
            raise Malformed("PostToolUse event has no tool_response")
        return Outcome(*call_of(event, name), event["tool_response"])
    if name == "PostToolUseFailure":
        return Outcome(*call_of(event, name), {"error": event.get("error")})
    if name == "UserPromptSubmit":
        # The main agent only: a subagent's work is not what the person just typed.
        return Prompt(session_of(event, name))
    raise Malformed(f"unknown hook event {name!r}, allowed")


def call_of(
    event: dict[str, Any], name: str, key: Callable[[dict[str, Any], str], str] = agent_key
) -> tuple[str, str, Any]:
    """The agent key (by `key`), tool and arguments of a tool event, pre or post: the
    same call, so its result is recorded against the key the call was judged under."""
    tool = event.get("tool_name")
    if not isinstance(tool, str) or not tool:
        raise Malformed(f"{name} event has no tool_name")
    if "tool_input" not in event:
        raise Malformed(f"{name} event has no tool_input")
    return key(event, name), tool, event["tool_input"]


def deny_output(decision: Decision) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": decision.message,
        }
    }


def answer(decision: Decision) -> str | None:
    """Allow: print nothing. Deny: `permissionDecision: "deny"` with the text, exit 0
    (exit 2 would block with stderr as the reason). A stop adds `continue: false` and the
    `stopReason`: Claude Code refuses the call, then ends the agent (the session; inside a
    subagent, only that subagent) without asking the model again."""
    if decision.allowed:
        return None
    from ..core.cjson import canonical

    output = deny_output(decision)
    if decision.stop:
        output["continue"] = False
        output["stopReason"] = decision.stop_reason or decision.message
    return canonical(output)


def deny_only(decision: Decision) -> str | None:
    """The deny without a stop, for a harness whose `PreToolUse` cannot end the run (or
    would drop the deny if it were asked to)."""
    if decision.allowed:
        return None
    from ..core.cjson import canonical

    return canonical(deny_output(decision))


def probe_events(session: str) -> list[dict[str, Any]]:
    """A call that must be allowed silently, then a prompt that clears it again."""
    import os

    return [
        {
            "session_id": session,
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": "true", "description": "dsh-circuit-breaker doctor"},
            "tool_use_id": "doctor",
            "cwd": os.getcwd(),
        },
        {"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": "doctor"},
    ]
