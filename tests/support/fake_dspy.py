"""The scripted OpenAI server (fake_openai.py) speaking DSPy ReAct's text format.

ReAct sends no tool calls on the wire: the model answers in DSPy's ChatAdapter fields
(`next_thought`, `next_tool_name`, `next_tool_args`), and the next request carries the
trajectory, each call's `observation_<n>` in it. `FakeDSPy` takes turns scripted as for
every fake and sends a tool call with its id as the thought, so that results are read by
call id as for the other frameworks; a text answer is sent as ReAct's `finish`, the text
its thought. Once ReAct has finished it asks once more for the signature's outputs (the
extract step): that request is answered on the side, with the last thought.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from support.fake_openai import FakeOpenAI
from support.scripted_server import ToolResult, Turn, text, text_of

FIELD = re.compile(  # a trajectory field and its value, up to the next field or the end
    r"\[\[ ## (thought|tool_name|tool_args|observation)_(\d+) ## \]\]\n"
    r"(.*?)(?=\n\n\[\[ ## |\n\n\w|\Z)",
    re.DOTALL,
)


def trajectory(body: dict[str, Any]) -> dict[int, dict[str, str]]:
    """The trajectory in a request's last user message: step -> its fields."""
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    steps: dict[int, dict[str, str]] = {}
    for name, step, value in FIELD.findall(text_of(users[-1]["content"]) if users else ""):
        steps.setdefault(int(step), {})[name] = value
    return steps


def dspy_results(body: dict[str, Any]) -> list[ToolResult]:
    """Each tool call's observation in a request, by the id its thought carries (ReAct's
    own `finish` left out)."""
    return [
        ToolResult(step["thought"], False, step.get("observation", ""), body, step["tool_name"])
        for _, step in sorted(trajectory(body).items())
        if step.get("tool_name") != "finish"
    ]


def is_extract(body: dict[str, Any]) -> bool:
    """The extract step's request: its outputs are the signature's, not ReAct's."""
    return "next_tool_name" not in json.dumps(body.get("messages"))


def extract_answer(body: dict[str, Any]) -> str:
    steps = trajectory(body)
    final = steps[max(steps)]["thought"] if steps else ""
    return f"[[ ## reasoning ## ]]\nDone.\n\n[[ ## answer ## ]]\n{final}\n\n[[ ## completed ## ]]"


def react_step(thought: str, tool: str, args: dict[str, Any]) -> str:
    return (
        f"[[ ## next_thought ## ]]\n{thought}\n\n[[ ## next_tool_name ## ]]\n{tool}\n\n"
        f"[[ ## next_tool_args ## ]]\n{json.dumps(args)}\n\n[[ ## completed ## ]]"
    )


class FakeDSPy(FakeOpenAI):
    results_of = staticmethod(dspy_results)

    def __init__(self, turns: Iterable[Any] = (), *, after: Any = "Done.") -> None:
        super().__init__(turns, after=after, side=is_extract, side_reply=extract_answer)

    def reply_for(self, body: dict[str, Any], number: int) -> Turn:
        turn = super().reply_for(body, number)
        if is_extract(body):
            return turn
        if turn.calls:
            call = turn.calls[0]
            return Turn([text(react_step(call["id"], call["name"], call["input"]))])
        return Turn([text(react_step(" ".join(turn.texts), "finish", {}))])
