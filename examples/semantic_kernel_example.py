"""A Semantic Kernel agent with the circuit breaker (docs/semantic-kernel.md).

The agent is asked to run one search ten times, as the DSH probe asks for one command:
the tool runs five times, calls 6 to 8 get the breaker's text as their result, and the 8th,
the third refusal in a row, stops the agent (the filter sets `context.terminate`, which
ends Semantic Kernel's function-calling loop: no further model request). It prints each
tool result, then why the run stopped (or the model's answer).

    pip install '.[semantic-kernel]'
    OPENAI_API_KEY=... python examples/semantic_kernel_example.py [--model gpt-4o]

Semantic Kernel's OpenAI connector builds an AsyncOpenAI client, which reads
OPENAI_BASE_URL (the tests point it at a scripted model on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import asyncio

from semantic_kernel.agents import ChatCompletionAgent, ChatHistoryAgentThread
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion
from semantic_kernel.contents import FunctionResultContent
from semantic_kernel.functions import kernel_function

from dsh_circuit_breaker.integrations.semantic_kernel import guard, stop_reason

PROMPT = "Search for 'cbprobe' ten times, one call at a time, then say how many searches ran."


class Web:
    @kernel_function
    def search(self, query: str) -> str:
        """Search the web."""
        return f"3 results for {query!r}"


async def main(model: str) -> None:
    agent = ChatCompletionAgent(
        service=OpenAIChatCompletion(ai_model_id=model),
        name="researcher",
        plugins=[Web()],
        # Semantic Kernel's default is 5 rounds of function calls per request.
        function_choice_behavior=FunctionChoiceBehavior.Auto(maximum_auto_invoke_attempts=20),
    )
    guard(agent)
    thread = ChatHistoryAgentThread()
    response = await agent.get_response(messages=PROMPT, thread=thread)
    async for message in thread.get_messages():
        for item in message.items:
            if isinstance(item, FunctionResultContent):
                print("tool result:", item.result)
    reason = stop_reason(response)
    if reason is not None:  # refused 3 times in a row: the breaker ended the run
        print("stopped:", reason)
    else:
        print("answer:", response.message.content)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-4o")
    asyncio.run(main(parser.parse_args().model))
