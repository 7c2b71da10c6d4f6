"""An OpenAI Agents SDK agent with the circuit breaker (docs/openai-agents.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 and 7 get the breaker's text as their output, and the
8th, the third refusal in a row, trips the guardrail, which ends the run. It prints each
tool output the model was sent, then why the run stopped (or the model's answer).

    pip install '.[openai-agents]'
    OPENAI_API_KEY=... python examples/openai_agents_example.py [--model gpt-5-mini]

Any server speaking the OpenAI Responses API works: set OPENAI_BASE_URL (the tests point
it at a scripted model on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import asyncio

from agents import Agent, Runner, ToolInputGuardrailTripwireTriggered, function_tool

from dsh_circuit_breaker.integrations.openai_agents import guard_agent

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


@function_tool
def search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


async def main(model: str) -> None:
    billing = Agent(name="billing", model=model, instructions="Answer billing questions.")
    support = Agent(name="support", model=model, instructions="Answer support questions.")
    triage = Agent(name="triage", model=model, tools=[search], handoffs=[billing, support])
    guard_agent(triage)  # every function tool of triage, billing, support, ... in one call

    run = Runner.run_streamed(triage, PROMPT, max_turns=20)
    try:
        async for event in run.stream_events():
            if event.type == "run_item_stream_event" and event.name == "tool_output":
                print("tool output:", event.item.output)
    except ToolInputGuardrailTripwireTriggered as error:  # 3 refusals in a row: stopped
        print("stopped:", error.output.output_info["reason"])
        return
    print("answer:", run.final_output)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-5-mini")
    asyncio.run(main(parser.parse_args().model))
