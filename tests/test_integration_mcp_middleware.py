"""The breaker inside an MCP server: FastMCP's middleware and the official SDK's, driven by
the official `mcp` client at both protocol versions (2025-11-25 through the initialize
handshake, 2026-07-28 with its per-request envelope). The loop runs through a real server
process over stdio, as a client starts one; the rest connect in process to the same server
objects (so one server can take several connections). The server's tools write a line per
real run, so each test counts what the server itself saw, not what the client was told."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES

SUPPORT = Path(__file__).resolve().parent / "support"
SERVER = SUPPORT / "mcp_guarded_server.py"
SDKS = {"fastmcp": "fastmcp", "mcp": "mcp.server"}  # server kind -> the module it needs
MODES = ("legacy", "2026-07-28")  # the client's: the handshake era, or the modern envelope
HAVE_CLIENT = importlib.util.find_spec("mcp") is not None

if HAVE_CLIENT:
    from mcp import StdioServerParameters
    from mcp.client import Client
    from mcp_types import CallToolResult, Implementation


# The default duplicateLimit: its LIMIT-th identical call is the first refused (the text
# counts the refused call among the copies), so RUNS run before it.
LIMIT = Config().duplicate_limit
RUNS = LIMIT - 1


def refusal(tool: str) -> str:
    return DEFAULT_MESSAGES["duplicate"].format(tool=tool, count=LIMIT, limit=LIMIT)


@pytest.fixture(params=sorted(SDKS))
def sdk(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require(HAVE_CLIENT, "the mcp SDK (extra [mcp])")
    require(importlib.util.find_spec(SDKS[name]) is not None, f"{name} (extra [{name}])")
    return name


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def runs(path: Path) -> list[str]:
    """What the server's tools really ran, one line per run."""
    return path.read_text().splitlines() if path.exists() else []


def guarded_server(sdk: str, path: Path, server: str | None = None) -> Any:
    """The guarded server (tests/support/mcp_guarded_server.py) for the client to connect
    to in process: for FastMCP, the SDK's low-level server it builds on. Its breaker
    middleware is `.guard`."""
    sys.path.insert(0, str(SUPPORT))
    try:
        import mcp_guarded_server as support
    finally:
        sys.path.remove(str(SUPPORT))
    built = (support.fastmcp_server if sdk == "fastmcp" else support.sdk_server)(str(path), server)
    target = built._mcp_server if sdk == "fastmcp" else built
    target.guard = next(m for m in built.middleware if hasattr(m, "breaker"))
    return target


@asynccontextmanager
async def connect(target: Any, mode: str) -> AsyncIterator[Any]:
    info = Implementation(name="test-client", version="1")
    async with Client(target, mode=mode, client_info=info) as client:
        yield client


def text(result: CallToolResult) -> str:
    assert len(result.content) == 1, result
    block = result.content[0]
    assert block.type == "text", result
    return block.text


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 40))


async def calls(client: Any, n: int, tool: str, arguments: dict[str, Any]) -> list[bool]:
    """`n` identical calls; their isError flags."""
    return [(await client.call_tool(tool, arguments)).is_error for _ in range(n)]


@pytest.mark.timeout(60)
def test_a_loop_runs_five_then_every_call_is_refused(sdk: str, mode: str, tmp_path: Path) -> None:
    path = tmp_path / "runs"
    process = StdioServerParameters(command=sys.executable, args=[str(SERVER), sdk, str(path)])

    async def go() -> list[CallToolResult]:
        async with connect(process, mode) as client:
            return [await client.call_tool("search", {"query": "cbprobe"}) for _ in range(10)]

    results = run(go())
    assert runs(path) == ["cbprobe"] * RUNS  # the refused five never reached the tool
    assert [r.is_error for r in results] == [False] * RUNS + [True] * (10 - RUNS)
    assert all("3 results" in text(r) for r in results[:RUNS])
    # Past stopAfterDenials nothing changes: MCP cannot end the client's agent.
    assert [text(r) for r in results[RUNS:]] == [refusal("search")] * (10 - RUNS)


def test_new_calls_exempt_tools_and_other_methods_pass(sdk: str, mode: str, tmp_path: Path) -> None:
    path = tmp_path / "runs"

    async def go() -> tuple[list[str], list[bool], CallToolResult]:
        async with connect(guarded_server(sdk, path), mode) as client:
            flags = []
            for n in range(8):  # a new query each time: healthy work
                flags.append((await client.call_tool("search", {"query": f"q{n}"})).is_error)
            flags += await calls(client, 8, "todo_write", {"item": "x"})  # exempt by default
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            flags += await calls(client, RUNS, "report", {"n": 1})
            return tools, flags, await client.call_tool("report", {"n": 1})

    tools, flags, refused = run(go())
    assert tools == ["poll", "report", "search", "todo_write"]
    assert flags == [False] * (8 + 8 + RUNS)
    # A refused tool with an output schema: the client took an error result with no
    # structured content as valid.
    assert refused.is_error and text(refused) == refusal("report")
    assert refused.structured_content is None
    assert runs(path).count("report 1") == RUNS
    assert runs(path).count("todo x") == 8


def test_a_server_name_prefixes_the_tool(sdk: str, tmp_path: Path) -> None:
    async def go() -> CallToolResult:
        async with connect(guarded_server(sdk, tmp_path / "runs", "web"), "legacy") as client:
            await calls(client, RUNS, "search", {"query": "a"})
            return await client.call_tool("search", {"query": "a"})

    assert text(run(go())) == refusal("web/search")


def test_a_conversation_id_in_meta_is_the_agent(sdk: str, mode: str, tmp_path: Path) -> None:
    """OpenCode's `sessionID`: two conversations on one connection count apart."""
    path = tmp_path / "runs"

    async def go() -> list[bool]:
        async with connect(guarded_server(sdk, path), mode) as client:
            flags = []
            for _ in range(RUNS + 2):
                for conversation in ("ses_a", "ses_b"):
                    result = await client.call_tool(
                        "search", {"query": "q"}, meta={"sessionID": conversation}
                    )
                    flags.append(result.is_error)
            return flags

    assert run(go()) == [False] * 2 * RUNS + [True] * 4
    assert runs(path) == ["q"] * 2 * RUNS


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("legacy", [False] * 2 * RUNS), ("2026-07-28", [False] * RUNS + [True] * RUNS)],
)
def test_two_connections_to_one_server(
    sdk: str, mode: str, expected: list[bool], tmp_path: Path
) -> None:
    """Two connections in turn to one server, five calls each (all run, alone). At
    2025-11-25 a connection (one `initialize`) is its own agent; at 2026-07-28 there is no
    connection, so the two are one agent, the client's name (docs/mcp.md says so)."""
    server = guarded_server(sdk, tmp_path / "runs")

    async def go() -> list[bool]:
        flags = []
        for _ in range(2):
            async with connect(server, mode) as client:
                flags += await calls(client, RUNS, "search", {"query": "q"})
        return flags

    assert run(go()) == expected


def test_a_failing_agent_id_allows_the_call_with_a_warning(
    sdk: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = guarded_server(sdk, tmp_path / "runs")

    def broken(ctx: Any) -> str:
        raise RuntimeError("no id")

    server.guard.agent_id = broken

    async def go() -> list[bool]:
        async with connect(server, "legacy") as client:
            return await calls(client, 8, "search", {"query": "q"})

    assert run(go()) == [False] * 8
    assert runs(tmp_path / "runs") == ["q"] * 8
    assert "call allowed" in caplog.text


@pytest.mark.parametrize(
    ("job", "keys", "interleaved", "refused_at"),
    [
        # The default config: results are observed (resultProgress).
        ("moving", {}, False, None),  # the poll moves: never refused
        ("failing", {}, False, None),  # an error result that moves
        ("frozen", {}, False, LIMIT),
        # New calls between: stuck all the same, after sameResultLimit identical results.
        ("frozen", {"sameResultLimit": 6}, True, 6 + 1),
    ],
)
def test_results_as_progress(
    sdk: str,
    mode: str,
    job: str,
    keys: dict[str, Any],
    interleaved: bool,
    refused_at: int | None,
    tmp_path: Path,
) -> None:
    """Ten polls of one job, a new search between any two if `interleaved`: every poll's
    result reaches the breaker, so a moving one runs on and a frozen one is refused."""
    server = guarded_server(sdk, tmp_path / "runs")
    server.guard.breaker = CircuitBreaker(Config.from_mapping(keys))

    async def go() -> list[CallToolResult]:
        polls = []
        async with connect(server, mode) as client:
            for k in range(10):
                if interleaved:
                    await client.call_tool("search", {"query": f"q{k}"})
                polls.append(await client.call_tool("poll", {"job": job}))
        return polls

    polls = run(go())
    ran = runs(tmp_path / "runs").count(f"poll {job}")
    if refused_at is None:
        assert ran == 10
        assert not any(refusal("poll") == text(r) for r in polls)
    else:
        assert ran == refused_at - 1  # the refused polls never reached the tool
        refused = 10 - (refused_at - 1)
        assert [text(r) for r in polls[refused_at - 1 :]] == [refusal("poll")] * refused
        assert all("books ingested" in text(r) for r in polls[: refused_at - 1])
