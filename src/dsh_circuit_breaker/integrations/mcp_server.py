"""The official MCP Python SDK (`mcp`): the breaker as server middleware.

    from mcp.server import MCPServer
    from dsh_circuit_breaker.integrations.mcp_server import CircuitBreakerMiddleware

    server = MCPServer("search", middleware=[CircuitBreakerMiddleware()])
    # a low-level Server: server.middleware.append(CircuitBreakerMiddleware())

The middleware (`Server.middleware`, `(ctx, call_next) -> result`) sees every request
before params validation and the handler. For `tools/call` it asks the breaker; a refused
call never reaches the tool: the middleware answers it itself with a normal
`CallToolResult`, `isError: true`, whose one text block is the breaker's text (with
`"resultType": "complete"` at 2026-07-28, which requires it). An allowed call's result
content (an error result's text too) is reported to the breaker (docs/results.md). Every
other request passes through untouched.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..core.breaker import CircuitBreaker
from ..core.config import Config
from ._common import (
    acheck,
    arun_observed,
    make_breaker,
    model_arguments,
    refusal_text,
    warn_allowed,
)
from ._mcp import STATE_KEY, agent_key, client_name, refusal, result_content, tool_name

AgentIdFunc = Callable[[ServerRequestContext[Any, Any]], str]


def default_agent_id(ctx: ServerRequestContext[Any, Any]) -> str:
    """A conversation id the client sends in `_meta`, else the client's name plus this
    connection (its `Mcp-Session-Id` over HTTP, else an id of our own kept on it): a new
    connection is a new agent. At 2026-07-28 every request stands alone, so a client's
    requests without a conversation id all count as one agent, `mcp:<client name>`."""
    params = ctx.session.client_params
    client = client_name(params.client_info) if params is not None else None
    connection = None
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        connection = _connection_id(ctx)
    # The raw `_meta`: the SDK's typed `ctx.meta` is not promised to keep unknown keys.
    meta = (ctx.params or {}).get("_meta")
    return agent_key(meta if isinstance(meta, Mapping) else None, client, connection)


def _connection_id(ctx: ServerRequestContext[Any, Any]) -> str | None:
    # The SDK builds a new ServerSession for every request; the per-connection object,
    # with its `state` dict for exactly this, is only reachable through it (FastMCP keys
    # its session state the same way).
    connection = getattr(ctx.session, "_connection", None)
    if connection is None:
        return None
    if connection.session_id:
        return str(connection.session_id)
    state: dict[str, Any] = connection.state
    if STATE_KEY not in state:
        state[STATE_KEY] = secrets.token_hex(4)
    return str(state[STATE_KEY])


class CircuitBreakerMiddleware:
    """Refuses a `tools/call` once its agent loops, as the breaker decides (see SPEC).

    `breaker`: share one breaker (and its store) between servers; default a new in-memory
    breaker built from `config`. `agent_id(ctx) -> str` names the agent a call counts
    against (default `default_agent_id`). `server`: a name to prefix the tools with in
    state and in the breaker's text (`search/web_search`), as the relay's `--name` does.

    MCP has no way for a server to end the client's agent: past `stopAfterDenials`
    refusals in a row, every call stays refused with the same text.
    """

    def __init__(
        self,
        breaker: CircuitBreaker | None = None,
        *,
        config: Config | None = None,
        agent_id: AgentIdFunc | None = None,
        server: str | None = None,
    ) -> None:
        self.breaker = make_breaker(breaker, config, __name__)
        self.agent_id = agent_id or default_agent_id
        self.server = server

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        try:
            params = ctx.params or {}
            name = params["name"]
            if not isinstance(name, str):
                return await call_next(ctx)  # malformed: the SDK answers it as it would
            arguments = model_arguments(params.get("arguments"))
            agent = self.agent_id(ctx)
        except Exception:
            warn_allowed("mcp tools/call middleware")
            return await call_next(ctx)
        tool = tool_name(name, self.server)
        decision = await acheck(self.breaker, agent, tool, arguments)
        if decision.allowed:
            call = (agent, tool, arguments)
            return await arun_observed(self.breaker, call, call_next(ctx), result_content)
        text = refusal_text(decision)
        return refusal(text, ctx.protocol_version)
