"""LangChain 1.x agents: the breaker as agent middleware.

    from dsh_circuit_breaker.integrations.langchain import CircuitBreakerMiddleware

    agent = create_agent(model, tools, middleware=[CircuitBreakerMiddleware()])

`wrap_tool_call` / `awrap_tool_call` ask the breaker before the tool runs; a denied call
never reaches the tool, and the model gets an error `ToolMessage` with the breaker's text,
tied to the call's id. An allowed call's `ToolMessage` content is reported to the breaker as
its result (docs/results.md). When the breaker stops the agent (`stopAfterDenials` refusals in a
row), `before_model` raises `AgentStopped` instead of the next model request: `invoke`,
`ainvoke` and `stream` raise it, with the refusal already in the graph's state.

Which agent a call belongs to: each agent run carries a private state field,
`circuit_breaker_agent`, set by `before_agent`. A subagent is its own graph with its own
state, so it gets its own id even though it shares the parent's thread id and config.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import NotRequired

from ..core.breaker import CircuitBreaker, Decision
from ..core.config import Config
from ..core.stop import AgentStopped
from ._common import (
    PendingStops,
    acheck,
    aobserve,
    areset,
    make_breaker,
    safe_reset,
    warn_allowed,
)
from .langgraph import default_agent_id, refusal

STATE_FIELD = "circuit_breaker_agent"


class CircuitBreakerState(AgentState[Any]):
    """The agent state plus this run's breaker id (private: not in the input or output)."""

    circuit_breaker_agent: NotRequired[Annotated[str, PrivateStateAttr]]


ToolResult = ToolMessage | Command[Any]


class CircuitBreakerMiddleware(AgentMiddleware[CircuitBreakerState, Any, Any]):
    """Refuses a tool call once its agent loops, as the breaker decides (see SPEC).

    `breaker`: share one breaker (and its store) between agents; default a new in-memory
    breaker built from `config`.

    With `config.reset_on_user_prompt` (the default) every invocation of the agent starts
    from a fresh state and drops it at the end (a new invocation is a new user turn);
    resuming an interrupted run continues its state. With `False` and a checkpointer, the
    state follows the thread across invocations.
    """

    state_schema = CircuitBreakerState

    def __init__(self, breaker: CircuitBreaker | None = None, *, config: Config | None = None):
        super().__init__()
        self.breaker = make_breaker(breaker, config, __name__)
        self._stops = PendingStops()

    # --- which agent ---

    def _start(self, state: Any) -> dict[str, Any] | None:
        current = _field(state)
        if current is not None and not self.breaker.config.reset_on_user_prompt:
            return None  # the thread's checkpointed state keeps its id across invocations
        return {STATE_FIELD: f"langchain:{secrets.token_hex(8)}"}

    def before_agent(
        self, state: CircuitBreakerState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self._start(state)

    async def abefore_agent(
        self, state: CircuitBreakerState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self._start(state)

    def after_agent(
        self, state: CircuitBreakerState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        agent = _field(state)
        if agent is not None:
            self._stops.take(agent)
            if self.breaker.config.reset_on_user_prompt:
                # Nothing reads this id again: drop its state instead of keeping one per run.
                safe_reset(self.breaker, agent)
        return None

    async def aafter_agent(
        self, state: CircuitBreakerState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        agent = _field(state)
        if agent is not None:
            self._stops.take(agent)
            if self.breaker.config.reset_on_user_prompt:
                await areset(self.breaker, agent)
        return None

    # --- the stop: before the model request that would follow the refusal ---

    def before_model(
        self, state: CircuitBreakerState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        agent, stop = self._stop(state)
        if stop is not None:
            if self.breaker.config.reset_on_user_prompt:
                safe_reset(self.breaker, agent)  # after_agent will not run
            raise AgentStopped(stop, agent)
        return None

    async def abefore_model(
        self, state: CircuitBreakerState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        agent, stop = self._stop(state)
        if stop is not None:
            if self.breaker.config.reset_on_user_prompt:
                await areset(self.breaker, agent)
            raise AgentStopped(stop, agent)
        return None

    def _stop(self, state: Any) -> tuple[str, Decision | None]:
        agent = _field(state)
        return agent or "", self._stops.take(agent) if agent is not None else None

    # --- the guard ---

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        try:
            agent, tool, arguments = _call(request)
        except Exception:
            warn_allowed("langchain wrap_tool_call")
            return handler(request)
        decision = self.breaker.check(agent, tool, arguments)
        if not decision.allowed:
            return self._refuse(request, agent, decision)
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
            agent, tool, arguments = _call(request)
        except Exception:
            warn_allowed("langchain awrap_tool_call")
            return await handler(request)
        decision = await acheck(self.breaker, agent, tool, arguments)
        if not decision.allowed:
            return self._refuse(request, agent, decision)
        result = await handler(request)
        if isinstance(result, ToolMessage):
            await aobserve(self.breaker, agent, tool, arguments, result.content)
        return result

    def _refuse(self, request: ToolCallRequest, agent: str, decision: Decision) -> ToolMessage:
        if _field(request.state) is not None:  # only create_agent runs before_model
            self._stops.add(agent, decision)
        return refusal(request, decision)


def _call(request: ToolCallRequest) -> tuple[str, str, Any]:
    call = request.tool_call
    return _agent(request), str(call["name"]), call.get("args", {})


def _field(state: Any) -> str | None:
    value = (
        state.get(STATE_FIELD) if isinstance(state, Mapping) else getattr(state, STATE_FIELD, None)
    )
    return value if isinstance(value, str) and value else None


def _agent(request: ToolCallRequest) -> str:
    """The id `before_agent` gave this run; outside `create_agent` (a bare ToolNode), the
    one the LangGraph integration gives (thread, graph namespace, latest prompt)."""
    found = _field(request.state)
    return found if found is not None else default_agent_id(request, per_prompt=False)
