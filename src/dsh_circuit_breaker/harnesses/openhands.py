"""OpenHands SDK: our command hook in the `HookConfig` a program hands its `Conversation`
(integrations/openhands.py builds it; nothing is installed, and there is no CLI to check).

OpenHands runs the command through a shell for every hook event, one JSON object on stdin:
`event_type` (`PreToolUse`, `PostToolUse`, `UserPromptSubmit`), `tool_name`, `tool_input`
(the action's fields, plus `kind`, the action's class name), `tool_response` (after the
call: the observation's fields), `message` (the prompt), `session_id` (the conversation's
id), `working_dir`. A conversation is one agent: a subagent (the task tool's
sub-conversation) has an id of its own, so it is keyed apart and counted on its own.

The answer is `{"decision": "deny", "reason": text}` on stdout, exit 0: OpenHands blocks
the action and sends the model `Action rejected: <text>` as that call's result (a
`UserRejectObservation`). A stop adds `continue: false` and `stopReason`: OpenHands reads
`continue: false` as a block as well, and the integration's callback, which sees our
output in the hook's `HookExecutionEvent`, pauses the conversation.
"""

from __future__ import annotations

from ..judge import Call, Malformed, Outcome, Prompt
from ._pretooluse import session_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..core.breaker import Decision

NAME = "openhands"
LABEL = "OpenHands"
# `finish` hands the run back (a refused finish would keep the agent going), `think` and
# `task_tracker` only write down the agent's own plan.
EXEMPT = ("finish", "think", "task_tracker")
# OpenHands takes the model's `security_risk` and `summary` out of the arguments before it
# builds the action, so `tool_input` holds only what changes what runs.
ANNOTATION_ARGS: tuple[str, ...] = ()
PRE_EVENTS = ("PreToolUse", "UserPromptSubmit")
POST_EVENTS = ("PostToolUse",)


def parse(event: dict[str, Any]) -> Call | Prompt | Outcome | None:
    kind = event.get("event_type")
    if kind == "PreToolUse":
        return Call(*_call_of(event, kind))
    if kind == "PostToolUse":
        response = event.get("tool_response")
        if not isinstance(response, dict):
            raise Malformed("PostToolUse event has no tool_response")
        return Outcome(*_call_of(event, kind), _seen_by_model(response))
    if kind == "UserPromptSubmit":
        return Prompt(session_of(event, kind))
    if kind in ("SessionStart", "SessionEnd", "Stop"):
        return None
    raise Malformed(f"unknown hook event {kind!r}, allowed")


def _call_of(event: dict[str, Any], kind: str) -> tuple[str, str, Any]:
    tool = event.get("tool_name")
    if not isinstance(tool, str) or not tool:
        raise Malformed(f"{kind} event has no tool_name")
    arguments = event.get("tool_input")
    if not isinstance(arguments, dict):
        raise Malformed(f"{kind} event has no tool_input")
    # `kind` is the action's class, the same on every call of the tool: not the model's.
    return session_of(event, kind), tool, {k: v for k, v in arguments.items() if k != "kind"}


def _seen_by_model(response: dict[str, Any]) -> Any:
    """The observation's text and error flag: what the model is sent, without the fields
    (timings, process ids) an observation keeps for the screen."""
    content = response.get("content")
    if not isinstance(content, list):
        return response
    texts = [c.get("text") for c in content if isinstance(c, dict) and c.get("type") == "text"]
    return {"text": texts, "is_error": response.get("is_error")}


def answer(decision: Decision) -> str | None:
    """Allow: print nothing. Deny: the decision and the breaker's text as its reason."""
    if decision.allowed:
        return None
    from ..core.cjson import canonical

    output: dict[str, Any] = {"decision": "deny", "reason": decision.message}
    if decision.stop:
        output["continue"] = False
        output["stopReason"] = decision.stop_reason or decision.message
    return canonical(output)
