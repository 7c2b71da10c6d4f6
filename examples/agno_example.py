"""An Agno agent with the circuit breaker (docs/agno.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 get the breaker's text as their error result, and
the 8th, the third refusal in a row, stops the agent (`StopAgentRun`: no further model
request). It prints each tool result, then why the run stopped (or the model's answer).

    pip install '.[agno]' anthropic
    ANTHROPIC_API_KEY=... python examples/agno_example.py [--model claude-sonnet-4-5]

Agno's `Claude` model class uses the Anthropic client, which reads ANTHROPIC_BASE_URL (the
tests point it at a scripted model on 127.0.0.1).
"""

from __future__ import annotations

import argparse

from agno.agent import Agent
from agno.models.anthropic import Claude

from dsh_circuit_breaker.integrations.agno import CircuitBreakerToolHook, stop_reason

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


def search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


def main(model_id: str) -> None:
    tools = [search]
    agent = Agent(model=Claude(id=model_id), tools=tools, tool_hooks=[CircuitBreakerToolHook()])
    out = agent.run(PROMPT)
    for message in out.messages or []:
        if message.role == "tool":
            status = "error" if message.tool_call_error else "success"
            print(f"tool result ({status}):", message.content)
    reason = stop_reason(out)
    if reason is not None:  # refused 3 times in a row: the breaker ended the run
        print("stopped:", reason)
    else:
        print("answer:", out.content)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="claude-sonnet-4-5")
    main(parser.parse_args().model)
