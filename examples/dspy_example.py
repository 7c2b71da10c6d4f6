"""A DSPy ReAct agent with the circuit breaker (docs/dspy.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 get the breaker's text as their observation, and
the 8th, the third refusal in a row, stops the agent (`CircuitBreakerStop`, raised past
ReAct: no further model request). It prints what the model read in its last request (the
trajectory, each tool result in it), then why the run stopped (or the model's answer).

    pip install '.[dspy]'
    OPENAI_API_KEY=... python examples/dspy_example.py [--model openai/gpt-4o]

`dspy.LM` calls the model through LiteLLM, which reads OPENAI_BASE_URL (the tests point
it at a scripted model on 127.0.0.1); LITELLM_LOCAL_MODEL_COST_MAP=True keeps LiteLLM
from fetching its model cost map at import.
"""

from __future__ import annotations

import argparse

import dspy

from dsh_circuit_breaker.integrations.dspy import CircuitBreakerStop, guard

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


def search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


def main(model: str) -> None:
    lm = dspy.LM(model)
    dspy.configure(lm=lm)
    agent = guard(dspy.ReAct("question -> answer", tools=[search]))
    reason = None
    try:
        answer = agent(question=PROMPT).answer
    except CircuitBreakerStop as stop:  # refused 3 times in a row: the breaker ended the run
        answer, reason = None, stop.stop_reason
    lm.inspect_history(n=1)  # the last request: the trajectory, each tool result in it
    if reason is not None:
        print("stopped:", reason)
    else:
        print("answer:", answer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="openai/gpt-4o")
    main(parser.parse_args().model)
