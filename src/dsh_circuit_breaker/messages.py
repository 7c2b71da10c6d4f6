"""The text a model receives in place of a denied call's result.

Each number stands after a label (`runs: 1`), never before a noun, so that the text reads
right for any count and limit (no "1 times", no "1 calls").
"""

from __future__ import annotations

DEFAULT_MESSAGES = {
    "duplicate": (
        "Circuit breaker: this {tool} call was NOT run. The identical call has already run "
        "as often as allowed (runs: {count}, limit: {limit}). Repeating it will not give a "
        "different result. Change your approach, use the results you already have, "
        "or stop and tell the user what is blocking you."
    ),
    "cap": (
        "Circuit breaker: this {tool} call was NOT run. This agent has used up its tool "
        "calls (made: {count}, limit: {limit}), and no further tool calls will run for this "
        "agent. Finish with what you already have, or stop and tell the user what blocked you."
    ),
    "budget": (
        "Circuit breaker: this {tool} call was NOT run. This agent has used up its budget "
        "for {tool} (made: {count}, limit: {limit}), and no further {tool} calls will run "
        "for this agent. Use the results you already have, or stop and tell the user what "
        "blocked you."
    ),
    # For the person who reads why the run ended, not for the model: `count` is the
    # refusals in a row, `limit` is stopAfterDenials, `tool` and `kind` the last refusal's.
    "stop": (
        "Circuit breaker: this agent is being stopped because it no longer reads the "
        "breaker's answers: it kept calling after its calls were refused (refusals in a "
        "row: {count}, stop limit: {limit}; the last one a {tool} call, {kind}). None of the "
        "refused calls ran. Look at the transcript for what it kept repeating, then restart "
        "it with a changed task or configuration."
    ),
    # Only with failClosed, when a shared store cannot be reached.
    "unavailable": (
        "Circuit breaker: this {tool} call was NOT run because the breaker's shared state "
        "cannot be reached and the breaker is set to fail closed. Try again later, or stop "
        "and tell the user what is blocking you."
    ),
}


# A tool name is the harness's to choose: in a message it is cut to this many characters.
MAX_TOOL = 200


def render(template: str, tool: str, kind: str, count: int, limit: int) -> str:
    if len(tool) > MAX_TOOL:
        tool = tool[: MAX_TOOL - 1] + "\u2026"
    return template.format(tool=tool, kind=kind, count=count, limit=limit)
