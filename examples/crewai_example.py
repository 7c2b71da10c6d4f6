"""A CrewAI crew with the circuit breaker (docs/crewai.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 get the breaker's text as their result, and the 8th,
the third refusal in a row, stops the agent (`CrewAIStopped`, raised before its next model
request). It prints each tool result, then why the crew stopped (or its answer).

    pip install '.[crewai]'
    OPENAI_API_KEY=... python examples/crewai_example.py [--model gpt-4o]

CrewAI's native OpenAI client reads OPENAI_BASE_URL (the tests point it at a scripted model
on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # before crewai is imported
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from crewai import LLM, Agent, Crew, Task
from crewai.hooks import after_tool_call
from crewai.tools import tool

from dsh_circuit_breaker.integrations.crewai import CrewAICircuitBreaker, CrewAIStopped

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."
searches = 0


@tool("search")
def search(query: str) -> str:
    """Search the web."""
    global searches
    searches += 1
    # A result of its own each time, in the time it took: CrewAI ends a task by itself at
    # the 5th call with the same arguments and the same text; the breaker masks durations,
    # so to it the result has not moved (a moving one would count as progress).
    return f"3 results for {query!r} in 0.{searches}s"


@after_tool_call
def show(context: object) -> None:
    print("tool result:", getattr(context, "tool_result", None))


def main(model_id: str) -> None:
    agent = Agent(
        role="researcher",
        goal="search",
        backstory="a researcher",
        tools=[search],
        llm=LLM(model=model_id),
    )
    crew = Crew(
        agents=[agent], tasks=[Task(description=PROMPT, expected_output="a count", agent=agent)]
    )
    with CrewAICircuitBreaker():
        try:
            print("answer:", crew.kickoff().raw)
        except CrewAIStopped as stopped:  # refused 3 times in a row: the breaker ended it
            print("stopped:", stopped.reason)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-4o")
    main(parser.parse_args().model)
