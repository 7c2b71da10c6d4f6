"""A FastMCP server with the circuit breaker as middleware (docs/mcp.md).

Its one tool, `search`, runs until the client's agent has made the same call five times
with nothing new in between (and the same result each time); from the 6th, the call never
reaches the tool and the client gets an error result whose text is the breaker's. An MCP
client starts it over stdio:

    pip install '.[fastmcp]'
    # in the client's config (mcpServers): the server named "search"
    "search": {"command": "python", "args": ["examples/fastmcp_server_example.py"]}
"""

from __future__ import annotations

from fastmcp import FastMCP

from dsh_circuit_breaker.integrations.fastmcp import CircuitBreakerMiddleware

mcp = FastMCP("search", middleware=[CircuitBreakerMiddleware()])


@mcp.tool
def search(query: str) -> str:
    """Search the web."""
    return f"3 results for {query!r}"


if __name__ == "__main__":
    mcp.run()  # stdio
