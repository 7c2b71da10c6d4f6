"""A Google ADK agent with the circuit breaker (docs/google-adk.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 get `{"error": <the breaker's text>}` as their
function response, and the 8th, the third refusal in a row, stops the agent: the plugin
answers its next model request with why. It prints each function response, then why the
run stopped (or the model's answer).

    pip install '.[google-adk]'
    GOOGLE_API_KEY=... python examples/google_adk_example.py [--model gemini-2.5-flash]

The Gemini client reads GOOGLE_GEMINI_BASE_URL (the tests point it at a scripted model on
127.0.0.1).
"""

from __future__ import annotations

import argparse
import asyncio

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from dsh_circuit_breaker.integrations.google_adk import METADATA_KEY, CircuitBreakerPlugin

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


def search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


async def main(model: str) -> None:
    root_agent = LlmAgent(name="assistant", model=model, tools=[search])
    app = App(name="my_app", root_agent=root_agent, plugins=[CircuitBreakerPlugin()])
    runner = Runner(app=app, session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="my_app", user_id="me")
    prompt = types.Content(role="user", parts=[types.Part(text=PROMPT)])
    answer = ""
    async for event in runner.run_async(user_id="me", session_id=session.id, new_message=prompt):
        for response in event.get_function_responses():
            print("function response:", response.response)
        if event.is_final_response() and event.content and event.content.parts:
            text = "".join(part.text or "" for part in event.content.parts)
            stopped = METADATA_KEY in (event.custom_metadata or {})  # the breaker's answer
            answer = ("stopped: " if stopped else "answer: ") + text
    print(answer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemini-2.5-flash")
    asyncio.run(main(parser.parse_args().model))
