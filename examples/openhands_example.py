"""An OpenHands SDK agent with the circuit breaker (docs/openhands.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 are refused by the breaker's hook (OpenHands sends
the model `Action rejected: <the breaker's text>`), and the 8th, the third refusal in a
row, stops the agent: the conversation is paused, no further model request. It prints each
tool result, then why the run stopped (or the model's answer).

    pip install '.[openhands]'    # Python 3.12 or later
    OPENAI_API_KEY=... python examples/openhands_example.py [--model openai/gpt-4o]

The search answers a little differently each time (the time it took), as a live search
does: OpenHands' own stuck detection ends a run after four identical action-observation
pairs, and only an identical result would trip it. The breaker counts identical calls, and
masks durations before comparing results, so to it the result has not moved.
The LLM is LiteLLM's; OPENAI_BASE_URL, if set, is where it sends its requests (the tests
point it at a scripted model on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import itertools
import os
from collections.abc import Sequence
from typing import Any

from openhands.sdk import LLM, Agent
from openhands.sdk.event import MessageEvent, ObservationEvent, UserRejectObservation
from openhands.sdk.tool import (
    Action,
    Observation,
    Tool,
    ToolDefinition,
    ToolExecutor,
    register_tool,
)
from pydantic import Field

from dsh_circuit_breaker.integrations.openhands import conversation, stop_reason

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."
fetches = itertools.count(1)


class SearchAction(Action):
    query: str = Field(description="what to search for")


class SearchObservation(Observation):
    pass


class Search(ToolExecutor[SearchAction, SearchObservation]):
    def __call__(self, action: SearchAction, conversation: Any = None) -> SearchObservation:
        return SearchObservation.from_text(f"3 results for {action.query!r} in {next(fetches)}ms")


class SearchTool(ToolDefinition[SearchAction, SearchObservation]):
    @classmethod
    def create(cls, conv_state: Any = None, **params: Any) -> Sequence[SearchTool]:
        return [
            cls(
                description="Search the web.",
                action_type=SearchAction,
                observation_type=SearchObservation,
                executor=Search(),
            )
        ]


register_tool("search", SearchTool)


def main(model: str) -> None:
    llm = LLM(
        model=model,
        base_url=os.environ.get("OPENAI_BASE_URL"),
        api_key=os.environ.get("OPENAI_API_KEY"),
        usage_id="agent",
    )
    agent = Agent(llm=llm, tools=[Tool(name="search")])
    chat = conversation(agent, workspace=".", visualizer=None)
    chat.send_message(PROMPT)
    chat.run()
    for event in chat.state.events:
        if isinstance(event, ObservationEvent):
            print("tool result:", event.observation.text)
        elif isinstance(event, UserRejectObservation):
            print("tool result:", event.rejection_reason)
    reason = stop_reason(chat)
    if reason is not None:  # refused 3 times in a row: the breaker paused the conversation
        print("stopped:", reason)
    else:
        said = [e for e in chat.state.events if isinstance(e, MessageEvent)]
        print("answer:", "".join(c.text for c in said[-1].llm_message.content))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="openai/gpt-4o")
    main(parser.parse_args().model)
