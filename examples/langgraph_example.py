"""A hand-built LangGraph agent with the circuit breaker (docs/langgraph.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 get the breaker's text as their error result, and
the 8th, the third refusal in a row, stops the agent (`after_tools` routes to END instead
of back to the model). It prints each tool result, then why the run stopped (or the
model's answer).

    pip install '.[langgraph]' langchain-anthropic
    ANTHROPIC_API_KEY=... python examples/langgraph_example.py [--model anthropic:claude-sonnet-4-5]

Any chat model `init_chat_model` knows works, with its provider package installed. The
Anthropic client reads ANTHROPIC_BASE_URL (the tests point it at a scripted model on
127.0.0.1).
"""

from __future__ import annotations

import argparse
from typing import Any

from langchain.chat_models import init_chat_model
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from dsh_circuit_breaker.integrations.langgraph import (
    CircuitBreakerToolWrapper,
    after_tools,
    stop_reason,
)

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


@tool
def search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


def build(model_name: str) -> Any:
    tools = [search]
    model = init_chat_model(model_name).bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    guard = CircuitBreakerToolWrapper()
    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", guard.tool_node(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_conditional_edges("tools", after_tools("agent"))  # ends the run on a stop
    return graph.compile()


def main(model_name: str) -> None:
    out = build(model_name).invoke({"messages": [("user", PROMPT)]})
    for message in out["messages"]:
        if isinstance(message, ToolMessage):
            print(f"tool result ({message.status}):", message.content)
    reason = stop_reason(out)
    if reason is not None:  # refused 3 times in a row: the breaker ended the run
        print("stopped:", reason)
    else:
        print("answer:", out["messages"][-1].text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="anthropic:claude-sonnet-4-5")
    main(parser.parse_args().model)
