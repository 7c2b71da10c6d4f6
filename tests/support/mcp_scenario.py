"""Every feature `@modelcontextprotocol/server-everything` exercises, driven by the official
`mcp` client, and what the client saw of each: the same function runs against the server
direct and through the relay, and the two observations must be equal, feature by feature.

Observations are JSON values with what varies from run to run taken out (times, random
ids, the random level of a simulated log message); everything else is kept as the client
got it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

E2E_BIN = Path(__file__).resolve().parents[1] / "e2e" / "node_modules" / ".bin"
EVERYTHING = E2E_BIN / "mcp-server-everything"
ROOT = "file:///tmp/relay-root"
# What varies between two runs of the same scenario.
VARYING = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?"), "<time>"),
    (re.compile(r"\b\d{1,2}:\d\d:\d\d ?(AM|PM)?"), "<clock>"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
]
SECONDS = 20.0  # for any one feature


def http(url: str, headers: dict[str, str]) -> Callable[[], Any]:
    """A maker of a Streamable HTTP transport to `url`, every request with `headers`."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    def transport() -> Any:
        client = httpx2.AsyncClient(headers=headers, timeout=SECONDS)
        return streamable_http_client(url, http_client=client)

    return transport


def params(command: list[str], env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=command[0], args=command[1:], env=dict(os.environ if env is None else env)
    )


def plain(value: Any) -> Any:
    """A pydantic model as the JSON the client was sent, with the varying parts taken out."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, str):
        for pattern, replacement in VARYING:
            value = pattern.sub(replacement, value)
    return value


class Seen:
    """What arrives from the server outside any one answer."""

    def __init__(self) -> None:
        self.notifications: list[Any] = []
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.arrived = anyio.Event()

    async def message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.notifications.append({"exception": type(message).__name__})
        else:
            self.notifications.append(plain(message))
        self.arrived.set()

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self.arrived.set()

    async def wait_for(self, found: Callable[[], bool]) -> None:
        with anyio.fail_after(SECONDS):
            while not found():
                self.arrived = anyio.Event()
                await self.arrived.wait()


async def sampling(
    context: Any, request: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    asked = request.messages[0].content
    text = asked.text if isinstance(asked, types.TextContent) else "?"
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"sampled: {text}"),
        model="scripted-model",
        stop_reason="endTurn",
    )


async def elicitation(context: Any, request: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Ada", "check": True})


async def roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri=ROOT, name="relay root")])  # type: ignore[arg-type]


def client(server: Any, mode: str, seen: Seen) -> Client:
    return Client(
        server,
        mode=mode,
        sampling_callback=sampling,
        elicitation_callback=elicitation,
        list_roots_callback=roots,
        logging_callback=seen.log,
        message_handler=seen.message,
        read_timeout_seconds=SECONDS,
    )


# Arguments for each tool server-everything lists; a tool not here is called with {}.
ARGUMENTS: dict[str, dict[str, Any]] = {
    "echo": {"message": "hello relay"},
    "get-annotated-message": {"messageType": "success", "includeImage": True},
    "get-resource-links": {"count": 3},
    "get-resource-reference": {"resourceType": "Text", "resourceId": 2},
    "get-structured-content": {"location": "Chicago"},
    "get-sum": {"a": 2, "b": 40},
    "gzip-file-as-resource": {"name": "small.gz", "data": "data:text/plain,hello"},
    "trigger-long-running-operation": {"duration": 0.2, "steps": 2},
    "trigger-sampling-request": {"prompt": "say hi", "maxTokens": 20},
    "trigger-url-elicitation": {"url": "https://example.com/login"},
    "simulate-research-query": {"topic": "relays", "ambiguous": False},
}
# Tools whose result is the server's own environment or a toggle's state: called, their
# result's shape compared (the relay passes the client's environment on unchanged, but
# PATH and the like differ between a process and its relay's child).
SHAPE_ONLY = {"get-env"}
# Tools that start a background activity observed by its own feature below.
TOGGLES = {"toggle-simulated-logging", "toggle-subscriber-updates"}


async def observe(server: Any, mode: str) -> dict[str, Any]:
    """feature -> what the client saw of it; `server` as `Client` takes it (stdio
    parameters, or a function making a fresh HTTP transport)."""
    if callable(server):
        server = server()
    seen = Seen()
    out: dict[str, Any] = {}
    async with client(server, mode, seen) as session:
        out["version"] = session.session._negotiated_version
        listed = await session.list_tools()
        out["tools/list"] = plain(listed)
        for tool in sorted(t.name for t in listed.tools):
            if tool in TOGGLES:
                continue
            out[f"tools/call {tool}"] = await _call(session, tool)
        out["resources/list"] = plain(await session.list_resources())
        out["resources/templates/list"] = plain(await session.list_resource_templates())
        out["resources/read"] = plain(await session.read_resource("demo://resource/dynamic/text/1"))
        out["resources/subscribe + updated"] = await _subscribe(session, seen)
        out["prompts/list"] = plain(await session.list_prompts())
        out["prompts/get"] = plain(
            await session.get_prompt("args-prompt", {"city": "Paris", "state": "TX"})
        )
        out["completion/complete"] = plain(
            await session.complete(
                types.PromptReference(type="ref/prompt", name="completable-prompt"),
                {"name": "department", "value": "E"},
            )
        )
        out["logging"] = await _logging(session, seen)
        out["progress"] = await _progress(session)
        out["cancellation"] = await _cancellation(session)
        out["ping"] = plain(await session.send_ping())
    return out


async def _call(session: Client, tool: str) -> Any:
    result = await session.call_tool(tool, ARGUMENTS.get(tool, {}))
    if tool in SHAPE_ONLY:
        return {"isError": result.is_error, "content types": [c.type for c in result.content]}
    return plain(result)


async def _subscribe(session: Client, seen: Seen) -> Any:
    uri = "demo://resource/dynamic/text/1"
    await session.subscribe_resource(uri)
    toggled = await session.call_tool("toggle-subscriber-updates", {})

    def updated() -> list[Any]:
        return [
            n for n in seen.notifications if n.get("method") == "notifications/resources/updated"
        ]

    await seen.wait_for(lambda: bool(updated()))
    await session.unsubscribe_resource(uri)
    await session.call_tool("toggle-subscriber-updates", {})  # off again
    return {"toggle": plain(toggled), "first update": updated()[0]}


async def _logging(session: Client, seen: Seen) -> Any:
    await session.set_logging_level("debug")
    toggled = await session.call_tool("toggle-simulated-logging", {})
    await seen.wait_for(lambda: bool(seen.logs))
    await session.call_tool("toggle-simulated-logging", {})  # off again
    # The level (and so the text) is the server's random pick: the message's shape is kept.
    return {"toggle": plain(toggled), "a log message": sorted(plain(seen.logs[0]).keys())}


async def _progress(session: Client) -> Any:
    steps: list[tuple[float, float | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        steps.append((value, total))

    result = await session.call_tool(
        "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress_callback=progress
    )
    return {"result": plain(result), "progress": steps}


async def _cancellation(session: Client) -> Any:
    """A long call abandoned by the client (its `notifications/cancelled` goes out), then
    a call after it: the session still works."""
    steps: list[float] = []
    first = anyio.Event()

    async def progress(value: float, total: float | None, message: str | None) -> None:
        steps.append(value)
        first.set()

    cancelled = False
    async with anyio.create_task_group() as group:

        async def long_call() -> None:
            nonlocal cancelled
            with anyio.CancelScope() as scope:
                group_scope.append(scope)
                await session.call_tool(
                    "trigger-long-running-operation",
                    {"duration": 6, "steps": 6},
                    progress_callback=progress,
                )
            cancelled = scope.cancel_called

        group_scope: list[anyio.CancelScope] = []
        group.start_soon(long_call)
        with anyio.fail_after(SECONDS):
            await first.wait()
        group_scope[0].cancel()
    after = await session.call_tool("echo", {"message": "after the cancel"})
    return {"cancelled": cancelled, "progress before": steps[:1], "after": plain(after)}


def run(server: Any, mode: str) -> dict[str, Any]:
    import warnings

    with warnings.catch_warnings():  # 2026-07-28 deprecates some of what a 2025 server does
        warnings.simplefilter("ignore")
        found: dict[str, Any] = anyio.run(observe, server, mode)
    return found
