"""A Claude Agent SDK agent with the circuit breaker (docs/claude-agent-sdk.md).

The agent is asked to run one command ten times (the DSH probe): Bash runs it five times,
calls 6 to 8 get the breaker's text as their error result, and the 8th, the third refusal
in a row, ends the session (the CLI's own stop; the transcript records why). It prints
each tool result, then how the session ended (or the model's answer).

    pip install '.[claude-agent-sdk]'
    ANTHROPIC_API_KEY=... python examples/claude_agent_sdk_example.py

The SDK drives the Claude Code CLI it bundles, which reads ANTHROPIC_BASE_URL (the tests
point it at a scripted model on 127.0.0.1).
"""

from __future__ import annotations

import asyncio

from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, ToolResultBlock, UserMessage, query

from dsh_circuit_breaker.integrations.claude_agent_sdk import circuit_breaker_hooks

PROMPT = "Run `echo cbprobe4` ten times with Bash, one call at a time, then say what it printed."


async def main() -> None:
    options = ClaudeAgentOptions(hooks=circuit_breaker_hooks(), allowed_tools=["Bash"])
    async for message in query(prompt=PROMPT, options=options):
        if isinstance(message, UserMessage) and isinstance(message.content, list):
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    print("tool result:", block.content)
        elif isinstance(message, ResultMessage) and message.terminal_reason == "hook_stopped":
            print("stopped: the breaker ended the session (terminal_reason hook_stopped)")
        elif isinstance(message, ResultMessage):
            print("answer:", message.result)


if __name__ == "__main__":
    asyncio.run(main())
