"""A Strands agent with the circuit breaker (docs/strands.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 get the breaker's text as their error result, and
the 8th, the third refusal in a row, stops the agent (Strands' own cancel, before the next
model call). It prints each tool result, then why the run stopped (or the model's answer).

    pip install '.[strands]' anthropic
    ANTHROPIC_API_KEY=... python examples/strands_example.py [--model claude-sonnet-4-5]

The Anthropic client reads ANTHROPIC_BASE_URL (the tests point it at a scripted model on
127.0.0.1).
"""

from __future__ import annotations

import argparse

from strands import Agent, tool
from strands.models.anthropic import AnthropicModel

from dsh_circuit_breaker.integrations.strands import CircuitBreakerHooks

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


@tool
def search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


def main(model_id: str) -> None:
    model = AnthropicModel(model_id=model_id, max_tokens=4096)
    agent = Agent(model=model, tools=[search], hooks=[CircuitBreakerHooks()])
    answer = agent(PROMPT)
    for message in agent.messages:
        for block in message["content"]:
            if "toolResult" in block:
                result = block["toolResult"]
                print(f"tool result ({result['status']}):", result["content"][0]["text"])
    # A stop is Strands' own cancel: the final message is then why the breaker stopped it.
    print("stopped:" if answer.stop_reason == "cancelled" else "answer:", str(answer).strip())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="claude-sonnet-4-5")
    main(parser.parse_args().model)
