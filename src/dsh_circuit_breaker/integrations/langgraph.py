"""LangGraph graphs built by hand: the breaker as a prebuilt `ToolNode`'s tool call wrapper.

    from dsh_circuit_breaker.integrations.langgraph import CircuitBreakerToolWrapper, after_tools

    guard = CircuitBreakerToolWrapper()
    graph.add_node("tools", guard.tool_node(tools))
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_conditional_edges("tools", after_tools("agent"))  # not add_edge("tools", "agent")

`wrap_tool_call` / `awrap_tool_call` ask the breaker before the tool runs; a denied call
never reaches the tool, and the model gets an error `ToolMessage` with the breaker's text,
tied to the call's id. An allowed call's `ToolMessage` content (an error one too) is
reported to the breaker as its result (docs/results.md). When the breaker stops the agent,
the refusal that stopped it carries the stop in its `artifact` (never sent to the model),
and `after_tools` routes to `END` instead of back to the model: the run returns normally,
and `stop_reason(output)` says why.

A `Command(goto=END)` from the tool node would not do: LangGraph follows a node's static
edges as well as its `goto`, so the usual `add_edge("tools", "agent")` would still ask the
model again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from ..core.breaker import CircuitBreaker, Decision
from ..core.config import Config
from ._common import (
    RecentAgents,
    acheck,
    aobserve,
    areset,
    make_breaker,
    refusal_text,
    safe_reset,
    warn_allowed,
)

ToolResult = ToolMessage | Command[Any]
AgentIdFunc = Callable[[ToolCallRequest], str]
STOP_KEY = "circuit_breaker_stop"  # in a stopping refusal's artifact: the stop reason
# Per-prompt agents whose state is kept; a graph has no hook at a run's end to drop it, so
# the least recently active one is dropped past this many (a finished prompt, in practice).
KEEP_PROMPTS = 1024


def default_agent_id(request: ToolCallRequest, *, per_prompt: bool = True) -> str:
    """One agent = one graph in one thread: the thread id and the namespace of the graph
    whose tool node runs the call (a subgraph, or a graph invoked inside a tool, has its
    own namespace even though it shares the parent's thread). With `per_prompt` (the
    breaker's `reset_on_user_prompt`), the id of the latest `HumanMessage` too, so each new
    user prompt starts from a fresh state."""
    config: Mapping[str, Any] = getattr(request.runtime, "config", None) or {}
    configurable = config.get("configurable") or {}
    thread = configurable.get("thread_id", "")
    # The namespace names the graph running this tool; its last part is this task only.
    namespace = str(configurable.get("checkpoint_ns", "")).rpartition("|")[0]
    prompt = _latest_prompt_id(request.state) if per_prompt else ""
    return f"langgraph:{thread}:{namespace}:{prompt}"


def _latest_prompt_id(state: Any) -> str:
    for message in reversed(_messages(state)):
        if isinstance(message, HumanMessage):
            return str(message.id or "")
    return ""


def _messages(state: Any) -> Sequence[Any]:
    if isinstance(state, Mapping):
        found = state.get("messages", ())
    elif isinstance(state, list):
        found = state
    else:
        found = getattr(state, "messages", ())
    return found if isinstance(found, Sequence) else ()


class CircuitBreakerToolWrapper:
    """Refuses a tool call once its agent loops, as the breaker decides (see SPEC).

    `breaker`: share one breaker (and its store) between graphs; default a new in-memory
    breaker built from `config`. `agent_id(request) -> str` names the agent whose state a
    call counts against (default `default_agent_id`).
    """

    def __init__(
        self,
        breaker: CircuitBreaker | None = None,
        *,
        config: Config | None = None,
        agent_id: AgentIdFunc | None = None,
    ) -> None:
        self.breaker = make_breaker(breaker, config, __name__)
        self.agent_id = agent_id or self._default_id
        per_prompt = agent_id is None and self.breaker.config.reset_on_user_prompt
        self._recent = RecentAgents(KEEP_PROMPTS) if per_prompt else None

    def _default_id(self, request: ToolCallRequest) -> str:
        return default_agent_id(request, per_prompt=self.breaker.config.reset_on_user_prompt)

    def _touch(self, agent: str) -> str | None:
        """Mark `agent` active; the per-prompt id to drop, if one fell out of KEEP_PROMPTS."""
        return self._recent.touch(agent) if self._recent is not None else None

    def tool_node(self, tools: Sequence[Any], **kwargs: Any) -> ToolNode:
        """A `ToolNode` over `tools` with this wrapper; `kwargs` go to `ToolNode`."""
        return ToolNode(
            tools,
            wrap_tool_call=self.wrap_tool_call,
            awrap_tool_call=self.awrap_tool_call,
            **kwargs,
        )

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        try:
            agent, tool, arguments = self._call(request)
        except Exception:
            warn_allowed("langgraph wrap_tool_call")
            return handler(request)
        dropped = self._touch(agent)
        if dropped is not None:
            safe_reset(self.breaker, dropped)
        decision = self.breaker.check(agent, tool, arguments)
        if not decision.allowed:
            return refusal(request, decision)
        result = handler(request)
        if isinstance(result, ToolMessage):  # a Command updates state: no answer to compare
            self.breaker.observe(agent, tool, arguments, result.content)
        return result

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        try:
            agent, tool, arguments = self._call(request)
        except Exception:
            warn_allowed("langgraph awrap_tool_call")
            return await handler(request)
        dropped = self._touch(agent)
        if dropped is not None:
            await areset(self.breaker, dropped)
        decision = await acheck(self.breaker, agent, tool, arguments)
        if not decision.allowed:
            return refusal(request, decision)
        result = await handler(request)
        if isinstance(result, ToolMessage):
            await aobserve(self.breaker, agent, tool, arguments, result.content)
        return result

    def _call(self, request: ToolCallRequest) -> tuple[str, str, Any]:
        call = request.tool_call
        return self.agent_id(request), str(call["name"]), call.get("args", {})


def refusal(request: ToolCallRequest, decision: Decision) -> ToolMessage:
    """The refused call's answer: an error `ToolMessage` with the breaker's text, its
    `artifact` holding the stop reason when this refusal stopped the agent."""
    call = request.tool_call
    artifact = {STOP_KEY: decision.stop_reason} if decision.stop else None
    return ToolMessage(
        content=refusal_text(decision),
        tool_call_id=call["id"] or "",
        name=call["name"],
        status="error",
        artifact=artifact,
    )


def stop_reason(state: Any) -> str | None:
    """Why the breaker stopped this run (the graph's state or output, or its messages), or
    None: read from the latest tool results, those after the last model turn."""
    for message in reversed(_messages(state)):
        if isinstance(message, AIMessage):
            return None
        artifact = getattr(message, "artifact", None)
        if isinstance(message, ToolMessage) and isinstance(artifact, Mapping):
            reason = artifact.get(STOP_KEY)
            if isinstance(reason, str):
                return reason
    return None


def after_tools(next_node: str) -> Callable[[Any], str]:
    """The route out of the tool node: `END` when the breaker stopped the agent at these
    tool results, else `next_node` (the model node). Use it with
    `add_conditional_edges("tools", after_tools("agent"))` in place of the static edge."""

    def route(state: Any) -> str:
        return END if stop_reason(state) is not None else next_node

    route.__name__ = f"after_tools_{next_node}"
    return route
