"""An MCP server built with the official `mcp` SDK (`MCPServer`), which speaks both
2025-11-25 (the `initialize` handshake) and 2026-07-28 (a `_meta` envelope on every
request), over stdio, or Streamable HTTP with `--http PORT` (at /mcp): the relay's upstream
for the 2026-07-28 tests, since server-everything speaks only 2025-11-25. `echo` answers the
same to the same message and counts its runs, which `runs` tells; `progress` answers more
every time (a moving result), `slow_progress` too, slowly; `status` the same but for the
clock time (a frozen one, as results.py normalizes it); `slow` takes as long as it is told."""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("sdk-echo")
runs = 0
checks = 0


@server.tool()
def echo(message: str) -> str:
    """Echo the message."""
    global runs
    runs += 1
    return f"echo: {message}"


@server.tool(name="runs")
def count_runs() -> str:
    """How many times echo has run."""
    return f"{runs} echo runs"


@server.tool()
def progress(job: str) -> str:
    """A job that moves: each check finds it further on."""
    global checks
    checks += 1
    return f"job {job}: {checks * 5}% done"


@server.tool()
async def slow_progress(job: str) -> str:
    """`progress`, answered after two seconds: copies a client sends at once are all
    checked before any answer comes back (parallel calls)."""
    global checks
    await anyio.sleep(2)
    checks += 1
    return f"job {job}: {checks * 5}% done"


@server.tool()
def status(job: str) -> str:
    """A job that never moves: only the time it was checked changes."""
    from datetime import datetime, timezone

    return f"job {job}: pending, checked at {datetime.now(timezone.utc).isoformat()}"


@server.tool()
async def slow(seconds: float) -> str:
    """A tool that takes `seconds` to answer."""
    import asyncio

    await asyncio.sleep(seconds)
    return f"slept {seconds}"


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--http"]:  # `--json`: each POST answered with plain JSON, not SSE
        json_response = sys.argv[3:4] == ["--json"]
        server.run(
            "streamable-http", host="127.0.0.1", port=int(sys.argv[2]), json_response=json_response
        )
    else:
        server.run("stdio")
