"""A smolagents agent with the circuit breaker (docs/smolagents.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 get the breaker's text as their observation, and
the 8th, the third refusal in a row, stops the agent (`agent.interrupt()`: no further
model request; `run` raises `CircuitBreakerStop`). It prints each tool result, then why
the run stopped (or the model's answer).

    pip install '.[smolagents]' openai
    OPENAI_API_KEY=... python examples/smolagents_example.py [--model gpt-4o]

smolagents' `OpenAIServerModel` uses the OpenAI client, which reads OPENAI_BASE_URL (the
tests point it at a scripted model on 127.0.0.1).
"""

from __future__ import annotations

import argparse

from smolagents import ActionStep, OpenAIServerModel, ToolCallingAgent, tool

from dsh_circuit_breaker.integrations.smolagents import CircuitBreakerStop, guard

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


@tool
def search(query: str) -> str:
    """Search the web.

    Args:
        query: what to search for.
    """
    return f"3 results for {query!r}"


def main(model_id: str) -> None:
    agent = ToolCallingAgent(tools=[search], model=OpenAIServerModel(model_id=model_id))
    guard(agent)
    reason = None
    try:
        answer = agent.run(PROMPT)
    except CircuitBreakerStop as stop:  # refused 3 times in a row: the breaker ended the run
        answer, reason = None, stop.stop_reason
    for step in agent.memory.steps:
        if isinstance(step, ActionStep) and step.tool_calls and step.observations:
            print("tool result:", step.observations)
    if reason is not None:
        print("stopped:", reason)
    else:
        print("answer:", answer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-4o")
    main(parser.parse_args().model)
