"""The text a model receives in place of a denied call's result.

Each number stands after a label (`runs: 1`), never before a noun, so that the text reads
right for any count and limit (no "1 times", no "1 calls").
"""

from __future__ import annotations

DEFAULT_MESSAGES = {
    # The first words carry the meaning: a harness's UI may show only the start of the text,
    # cut at the screen width (Claude Code: `Reason: PreToolUse:Bash hook error: ...`).
    # `count` counts this call too: the limit-th identical call is the one refused.
    "duplicate": (
        "Circuit breaker: NOT run, a repeat (copies: {count}, limit: {limit}): this {tool} "
        "call is identical to calls that have already run as often as allowed. Repeating it "
        "will not give a different result. Change your approach, use the results you "
        "already have, or stop and tell the user what is blocking you."
    ),
    # Rule 5: `calls` in the repeated block, `count` its rounds, `limit` the rounds allowed.
    "cycle": (
        "Circuit breaker: NOT run, a frozen cycle (the same {calls} calls, rounds: {count}, "
        "limit: {limit}, nothing changed): this {tool} call would start another round of "
        "calls that each returned what they returned the round before. Repeating them will "
        "not give a different result. Change your approach, use the results you already "
        "have, or stop and tell the user what is blocking you."
    ),
    "cap": (
        "Circuit breaker: NOT run, tool calls used up (made: {count}, limit: {limit}): this "
        "{tool} call was refused because this agent has used up its tool calls, and no "
        "further tool calls will run for this agent. Finish with what you already have, or "
        "stop and tell the user what blocked you."
    ),
    "budget": (
        "Circuit breaker: NOT run, {tool} budget used up (made: {count}, limit: {limit}): "
        "this agent has used up its budget for {tool}, and no further {tool} calls will run "
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
        "Circuit breaker: NOT run, breaker state unreachable: this {tool} call was not run "
        "because the breaker's shared state cannot be reached and the breaker is set to "
        "fail closed. Try again later, or stop and tell the user what is blocking you."
    ),
}


# A tool name is the harness's to choose: in a message it is cut to this many characters.
MAX_TOOL = 200


def render(template: str, tool: str, kind: str, count: int, limit: int, calls: int = 1) -> str:
    if len(tool) > MAX_TOOL:
        tool = tool[: MAX_TOOL - 1] + "\u2026"
    return template.format(tool=tool, kind=kind, count=count, limit=limit, calls=calls)
