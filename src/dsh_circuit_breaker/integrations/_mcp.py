"""What the two MCP server middlewares (`fastmcp`, `mcp_server`) share with the relay
(`guard/mcp.py`): the agent a `tools/call` counts against, keyed as the relay keys it, the
refusal, the relay's `CallToolResult`, and what of a result the breaker digests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..guard.mcp import CONVERSATION_KEYS, MAX_KEY_PART, META_CLIENT, refusal

__all__ = ["STATE_KEY", "agent_key", "client_name", "refusal", "result_content", "tool_name"]

# Where a middleware keeps its id for a connection, in the SDK's per-connection `state`.
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


def tool_name(name: str, server: str | None) -> str:
    """The tool as state and the live page know it: `server/name` with a server name."""
    return f"{server}/{name}" if server else name


def result_content(result: Any) -> Any:
    """What a `CallToolResult` (an SDK model or its JSON) says, as the breaker digests it:
    its content blocks, the text of a text block, any other block as JSON; all text, one
    string. An error result is its text like any other."""
    content = result.get("content") if isinstance(result, Mapping) else result.content
    blocks = [_block(b) for b in content or ()]
    return "\n".join(blocks) if all(isinstance(b, str) for b in blocks) else blocks


def _block(block: Any) -> Any:
    if not isinstance(block, Mapping):
        block = block.model_dump(mode="json", by_alias=True, exclude_none=True)
    return block.get("text") if block.get("type") == "text" else block
