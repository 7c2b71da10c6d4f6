"""The scripted OpenAI server (fake_openai.py) as smolagents is read from it.

smolagents sends no tool messages: it writes each step's calls into an assistant message
("Calling tools:\\n[{'id': ..., ...}]") and their results into the user message after it
("Observation:\\n..."; "Error:\\n..." for a step that failed), merging messages of one role
in a row. `FakeSmolagents` reads tool results in that form, so the checks written for
every framework (agent_scenarios.py) read them by call id as for the others.

A ToolCallingAgent ends its run by calling its `final_answer` tool: `answering` turns a
scripted text answer into that call.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from support.fake_openai import FakeOpenAI
from support.scripted_server import ToolResult, text_of, tool_call

CALLING = "Calling tools:\n"
OBSERVATION = "Observation:\n"
ERROR = re.compile(r"(?:^|\n)Error:\n")


def smolagents_results(body: dict[str, Any]) -> list[ToolResult]:
    """The tool results in one request: each "Calling tools:" message's call, answered by
    the next user message's observation or error. A ToolCallingAgent call that raised
    leaves no "Calling tools:" message, only its error: that one gets the id `error-<n>`."""
    results: list[ToolResult] = []
    pending: list[tuple[str, str]] = []
    for message in body.get("messages") or []:
        text = text_of(message.get("content"))
        if message.get("role") == "assistant" and CALLING in text:
            calls = ast.literal_eval(text.split(CALLING, 1)[1])
            pending = [(c["id"], c["function"]["name"]) for c in calls]
        elif message.get("role") == "user":
            first, *errors = ERROR.split(text)
            # "Call id: <id>" before an error: the error is that call's result.
            answered = pending and not first.startswith("Call id:")
            parts = [(first.removeprefix(OBSERVATION), False)] if answered else []
            for part, is_error in [*parts, *((e, True) for e in errors)]:
                call_id, name = pending.pop(0) if pending else (f"error-{len(results)}", "")
                results.append(ToolResult(call_id, is_error, part, message, name))
            pending = []
    return results


class FakeSmolagents(FakeOpenAI):
    results_of = staticmethod(smolagents_results)


def answering(respond: Any) -> Any:
    """A scripted turn whose text answers become `final_answer` calls."""

    def turn(body: dict[str, Any]) -> Any:
        reply = respond(body)
        if isinstance(reply, str):
            return tool_call("final_answer", {"answer": reply}, "final")
        return reply

    return turn
