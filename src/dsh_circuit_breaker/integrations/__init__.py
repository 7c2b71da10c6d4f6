"""Adapters that put the breaker in front of each agent framework's tool calls.

One module per framework: `pydantic_ai`, `langchain`, `langgraph`, `openai_agents`,
`claude_agent_sdk`, `strands`, `google_adk`, `agno`, `agent_framework`; and for MCP
servers, `fastmcp` and `mcp_server` (the official SDK). Each imports its framework when it
is imported itself, and the core never imports any of them; install the matching extra, e.g.
`pip install 'dsh-circuit-breaker[pydantic-ai]'`.
"""
