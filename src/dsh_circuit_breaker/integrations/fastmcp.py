"""FastMCP: the breaker as server middleware.

    from fastmcp import FastMCP
    from dsh_circuit_breaker.integrations.fastmcp import CircuitBreakerMiddleware

    mcp = FastMCP("search", middleware=[CircuitBreakerMiddleware()])

On `on_call_tool` it asks the breaker; a refused call never reaches the tool (nor any
middleware added after this one): it returns FastMCP's own error result,
`ToolResult(content=text, is_error=True)`, which the client gets as a normal
`CallToolResult` with `isError: true` and the breaker's text as its one text block
(FastMCP adds `resultType` and the server's `_meta` for the negotiated version). An allowed
call's result content (an error's text too) is reported to the breaker (docs/results.md).
"""

from __future__ import annotations

from collections.abc import Callable

import mcp_types
from fastmcp.server.context import Context
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult
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
from ._mcp import agent_key, client_name, result_content, tool_name

AgentIdFunc = Callable[[Context], str]


def default_agent_id(ctx: Context) -> str:
    """A conversation id the client sends in `_meta`, else the client's name plus FastMCP's
    `session_id` (the `Mcp-Session-Id` over HTTP, else an id FastMCP keeps per connection):
    a new connection is a new agent. At 2026-07-28 every request stands alone (FastMCP
    gives each its own session id), so a client's requests without a conversation id all
    count as one agent, `mcp:<client name>`."""
    request = ctx.request_context
    if request is None:  # `call_tool` from the server's own code: no client
        return agent_key(None, None, None)
    params = request.session.client_params
    client = client_name(params.client_info) if params is not None else None
    connection = None
    if request.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        connection = ctx.session_id
    return agent_key(request.meta, client, connection)


class CircuitBreakerMiddleware(Middleware):
    """Refuses a tool call once its agent loops, as the breaker decides (see SPEC).

    `breaker`: share one breaker (and its store) between servers; default a new in-memory
    breaker built from `config`. `agent_id(ctx) -> str` names the agent a call counts
    against, from FastMCP's `Context` (default `default_agent_id`). `server`: a name to
    prefix the tools with in state and in the breaker's text (`search/web_search`), as the
    relay's `--name` does.

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

    async def on_call_tool(
        self,
        context: MiddlewareContext[mcp_types.CallToolRequestParams],
        call_next: CallNext[mcp_types.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        try:
            name = context.message.name
            arguments = model_arguments(context.message.arguments)
            ctx = context.fastmcp_context
            agent = self.agent_id(ctx) if ctx is not None else agent_key(None, None, None)
        except Exception:
            warn_allowed("fastmcp on_call_tool")
            return await call_next(context)
        tool = tool_name(name, self.server)
        decision = await acheck(self.breaker, agent, tool, arguments)
        if decision.allowed:
            call = (agent, tool, arguments)
            return await arun_observed(self.breaker, call, call_next(context), result_content)
        text = refusal_text(decision)
        return ToolResult(content=text, is_error=True)
