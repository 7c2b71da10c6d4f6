"""A pydantic-ai agent with the circuit breaker (docs/pydantic-ai.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 get the breaker's text as their failed result, and
the 8th, the third refusal in a row, stops the agent (`AgentStopped`, before the next model
request). It prints each tool result, then why the run stopped (or the model's answer).

    pip install '.[pydantic-ai]' 'pydantic-ai-slim[google]'
    GOOGLE_API_KEY=... python examples/pydantic_ai_example.py [--model PROVIDER:MODEL]

Any model pydantic-ai knows works, with its provider package installed. The Gemini
client reads GOOGLE_GEMINI_BASE_URL (the tests point it at a scripted model on 127.0.0.1).
"""

from __future__ import annotations

import argparse

from pydantic_ai import Agent, capture_run_messages
from pydantic_ai.messages import ToolReturnPart

from dsh_circuit_breaker import AgentStopped
from dsh_circuit_breaker.integrations.pydantic_ai import CircuitBreakerCapability

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


def search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


def main(model: str) -> None:
    agent = Agent(model, tools=[search], capabilities=[CircuitBreakerCapability()])
    with capture_run_messages() as messages:  # kept even when the run raises
        try:
            answer = "answer: " + agent.run_sync(PROMPT).output
        except AgentStopped as error:  # refused 3 times in a row: the breaker ended the run
            answer = "stopped: " + error.reason
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                print(f"tool result ({part.outcome}):", part.content)
    print(answer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="google:gemini-2.5-flash")
    main(parser.parse_args().model)
