"""Adapters that put the breaker in front of each agent framework's tool calls.

One module per framework (`langchain`, `openai_agents`, `claude_agent_sdk`, `pydantic_ai`).
Each imports its framework only when used, so the core never needs any of them; install
the matching extra, e.g. `pip install 'dsh-circuit-breaker[pydantic-ai]'`.
"""
