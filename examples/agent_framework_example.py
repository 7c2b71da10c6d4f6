"""A Microsoft Agent Framework agent with the circuit breaker (docs/agent-framework.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 get the breaker's text as their result, and the 8th,
the third refusal in a row, stops the agent (`MiddlewareTermination` ends the function
calling loop: no further model request). It prints each tool result, then why the run
stopped (or the model's answer).

    pip install '.[agent-framework]' agent-framework-openai
    OPENAI_API_KEY=... python examples/agent_framework_example.py [--model gpt-4o]

The OpenAI Chat Completions client reads OPENAI_BASE_URL (the tests point it at a scripted
model on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import asyncio

from agent_framework import Agent
from agent_framework.openai import OpenAIChatCompletionClient

from dsh_circuit_breaker.integrations.agent_framework import (
    circuit_breaker_middleware,
    stop_reason,
)

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


def search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


async def main(model: str) -> None:
    client = OpenAIChatCompletionClient(model=model)
    agent = Agent(client=client, tools=[search], middleware=circuit_breaker_middleware())
    out = await agent.run(PROMPT)
    for message in out.messages:
        for content in message.contents:
            if content.type == "function_result":
                print("tool result:", content.result)
    reason = stop_reason(out)
    if reason is not None:  # refused 3 times in a row: the breaker ended the run
        print("stopped:", reason)
    else:
        print("answer:", out.text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-4o")
    asyncio.run(main(parser.parse_args().model))
