"""A LlamaIndex agent workflow with the circuit breaker (docs/llamaindex.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 and 7 get the breaker's text as their error result, and
the 8th, the third refusal in a row, stops the agent (`LlamaIndexStopped`, raised out of
the workflow's call_tool step: no further model request). It prints each tool result,
then why the run stopped (or the model's answer).

    pip install '.[llamaindex]' llama-index-llms-openai
    OPENAI_API_KEY=... python examples/llamaindex_example.py [--model gpt-4o]

The base URL is OPENAI_BASE_URL when set (the tests point it at a scripted model on
127.0.0.1).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.core.workflow.handler import WorkflowHandler
from llama_index.llms.openai import OpenAI

from dsh_circuit_breaker.integrations.llamaindex import LlamaIndexStopped, guard

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


def search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


async def main(model_id: str) -> None:
    llm = OpenAI(model=model_id, api_base=os.environ.get("OPENAI_BASE_URL"))
    agent = FunctionAgent(tools=[search], llm=llm)
    guard(agent)
    handler = agent.run(user_msg=PROMPT)
    # The events are read beside the run: a stopped run's event stream does not end, so it
    # is the handler that is awaited.
    shown = asyncio.create_task(show(handler))
    try:
        print("answer:", await handler)
    except LlamaIndexStopped as stopped:  # refused 3 times in a row: the breaker ended it
        print("stopped:", stopped.reason)
    finally:
        shown.cancel()


async def show(handler: WorkflowHandler) -> None:
    async for event in handler.stream_events():
        if isinstance(event, ToolCallResult):
            status = "error" if event.tool_output.is_error else "success"
            print(f"tool result ({status}):", event.tool_output.content)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-4o")
    asyncio.run(main(parser.parse_args().model))
