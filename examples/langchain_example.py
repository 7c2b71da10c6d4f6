"""A LangChain agent with the circuit breaker (docs/langchain.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 get the breaker's text as their error result, and
the 8th, the third refusal in a row, stops the agent (`AgentStopped`, before the next model
request). It prints each tool result, then why the run stopped (or the model's answer).

    pip install '.[langchain]' langchain-anthropic
    ANTHROPIC_API_KEY=... python examples/langchain_example.py [--model anthropic:claude-sonnet-4-5]

Any chat model `init_chat_model` knows works, with its provider package installed. The
Anthropic client reads ANTHROPIC_BASE_URL (the tests point it at a scripted model on
127.0.0.1).
"""

from __future__ import annotations

import argparse

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool

from dsh_circuit_breaker import AgentStopped
from dsh_circuit_breaker.integrations.langchain import CircuitBreakerMiddleware

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


@tool
def search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


def main(model_name: str) -> None:
    model = init_chat_model(model_name)
    tools = [search]
    agent = create_agent(model, tools, middleware=[CircuitBreakerMiddleware()])
    state, stopped = {"messages": []}, None
    try:
        for step in agent.stream({"messages": [("user", PROMPT)]}, stream_mode="values"):
            state = step  # each step's whole state: the last one is kept
    except AgentStopped as error:  # refused 3 times in a row: the breaker ended the run
        stopped = error
    for message in state["messages"]:
        if isinstance(message, ToolMessage):
            print(f"tool result ({message.status}):", message.content)
    if stopped is not None:
        print("stopped:", stopped.reason)
    else:
        print("answer:", state["messages"][-1].text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="anthropic:claude-sonnet-4-5")
    main(parser.parse_args().model)
