"""What the two MCP server middlewares (`fastmcp`, `mcp_server`) share: which agent a
`tools/call` counts against, and the refusal in the negotiated version's shape. Both follow
the relay (`guard/mcp.py`), so an agent has the same key whichever of them guards it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Keys of the 2026-07-28 per-request `_meta` envelope.
META_CLIENT = "io.modelcontextprotocol/clientInfo"
# Conversation ids clients are known to send in a request's `_meta`.
CONVERSATION_KEYS = ("sessionID",)  # OpenCode (and Kilo, its fork)
MAX_KEY_PART = 200  # characters of a client's name or id kept in an agent key
# Protocol versions without the initialize handshake: each request stands alone (the SDKs
# build a new connection object for every one), so there is no connection to key by.
STATELESS_VERSIONS = ("2026-07-28",)
# Where a middleware keeps its per-connection id in the SDK's per-connection `state`.
STATE_KEY = "dsh_circuit_breaker.connection"


def agent_key(meta: Mapping[str, Any] | None, client: str | None, connection: str | None) -> str:
    """The agent a call counts against, first match wins: a conversation id the client
    sends in `_meta` (`mcp:<id>`), else `mcp:<client name>:<connection>`; with no
    connection to tell apart (2026-07-28, stateless HTTP), `mcp:<client name>`."""
    meta = meta or {}
    for name in CONVERSATION_KEYS:
        value = meta.get(name)
        if isinstance(value, str) and value:
            return "mcp:" + value[:MAX_KEY_PART]
    client = client_name(meta.get(META_CLIENT)) or client or "client"
    return f"mcp:{client[:MAX_KEY_PART]}" + (f":{connection}" if connection else "")


def client_name(info: Any) -> str | None:
    """`clientInfo.name`, from a mapping or an SDK model."""
    name = info.get("name") if isinstance(info, Mapping) else getattr(info, "name", None)
    return name if isinstance(name, str) and name else None


def refusal(text: str, version: str | None) -> dict[str, Any]:
    """A refused call's `CallToolResult`: an error result whose one text block is the
    breaker's text, with `resultType` where the version requires it."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
    if version in STATELESS_VERSIONS:
        result["resultType"] = "complete"
    return result


def tool_name(name: str, server: str | None) -> str:
    """The tool as state and the live page know it: `server/name` with a server name."""
    return f"{server}/{name}" if server else name
