"""A stdio MCP server with the breaker's middleware, for the middleware tests.

    python mcp_guarded_server.py fastmcp|mcp RUNS_FILE [--server NAME]

Built with FastMCP or with the official SDK's MCPServer, its `search` tool appends one
line to RUNS_FILE each time it really runs (so a test counts what the server saw), and
`report` returns structured content (a tool with an output schema, whose refusal must
still be a valid result). `todo_write` is exempt by the breaker's defaults. `poll` reports
a job's state (see `poll`), for the results-as-progress tests.
"""

from __future__ import annotations

import argparse
from typing import Any


def record(path: str, query: str) -> str:
    with open(path, "a", encoding="utf-8") as runs:
        runs.write(query + "\n")
    return f"3 results for {query!r}"


def poll(path: str, job: str, error: type[Exception]) -> str:
    """Job "moving" has ingested one more book at every poll; "frozen" is stuck at three;
    "failing" fails at a new step every time (an error result that moves: `error` is the
    SDK's ToolError, whose text it passes on as it is). Each answer carries a clock time
    that moves too, which the breaker's normalizing masks."""
    record(path, f"poll {job}")
    with open(path, encoding="utf-8") as runs:
        n = sum(line.startswith("poll ") for line in runs)
    if job == "failing":
        raise error(f"step {n} failed")
    return f"job {job}: {n if job == 'moving' else 3} books ingested, checked at 04:44:{n:02d}"


def fastmcp_server(runs: str, server: str | None) -> Any:
    from fastmcp import FastMCP
    from fastmcp.exceptions import ToolError

    from dsh_circuit_breaker.integrations.fastmcp import CircuitBreakerMiddleware

    mcp = FastMCP("guarded", middleware=[CircuitBreakerMiddleware(server=server)])

    @mcp.tool
    def search(query: str) -> str:
        """Search the web."""
        return record(runs, query)

    @mcp.tool
    def report(n: int) -> dict[str, int]:
        """A structured result."""
        record(runs, f"report {n}")
        return {"n": n}

    @mcp.tool
    def todo_write(item: str) -> str:
        """Exempt by default."""
        return record(runs, f"todo {item}")

    @mcp.tool(name="poll")
    def poll_tool(job: str) -> str:
        """Poll a job."""
        return poll(runs, job, ToolError)

    return mcp


def sdk_server(runs: str, server: str | None) -> Any:
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from dsh_circuit_breaker.integrations.mcp_server import CircuitBreakerMiddleware

    mcp = MCPServer("guarded", middleware=[CircuitBreakerMiddleware(server=server)])

    @mcp.tool()
    def search(query: str) -> str:
        """Search the web."""
        return record(runs, query)

    @mcp.tool()
    def report(n: int) -> dict[str, int]:
        """A structured result."""
        record(runs, f"report {n}")
        return {"n": n}

    @mcp.tool()
    def todo_write(item: str) -> str:
        """Exempt by default."""
        return record(runs, f"todo {item}")

    @mcp.tool(name="poll")
    def poll_tool(job: str) -> str:
        """Poll a job."""
        return poll(runs, job, ToolError)

    return mcp


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("sdk", choices=("fastmcp", "mcp"))
    parser.add_argument("runs")
    parser.add_argument("--server", default=None)
    args = parser.parse_args()
    build = fastmcp_server if args.sdk == "fastmcp" else sdk_server
    build(args.runs, args.server).run()
