"""Microsoft Agent Framework: the breaker as function middleware, keyed per agent run.

    from dsh_circuit_breaker.integrations.agent_framework import circuit_breaker_middleware

    agent = Agent(client=..., tools=[...], middleware=circuit_breaker_middleware())

The function middleware asks the breaker before each function tool runs; a denied call
never reaches `call_next()`: the middleware sets `context.result` to the breaker's text,
which the framework sends as that call's result. An allowed call's `context.result` (or a
raised error's text) is reported to the breaker as its result (docs/results.md).

When the breaker stops the agent it sets the same result and raises `MiddlewareTermination`:
the framework answers the call with it and ends the function-calling loop, so no model
request follows, and `agent.run` returns the response with the stop reason in
`response.additional_properties` (`stop_reason`).

Which agent a call belongs to: the agent middleware beside it marks each `agent.run` with
an id (the agent's id plus a fresh run id, or the session's id when state should follow a
session), which the function middleware reads from a context variable. An agent used as
another agent's tool (`as_tool()`) runs inside the parent's call under its own mark.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from agent_framework import (
    AgentContext,
    AgentMiddleware,
    AgentResponse,
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    MiddlewareTermination,
)

from ..core.breaker import CircuitBreaker
from ..core.config import Config
from ._common import (
    PendingStops,
    acheck,
    areset,
    arun_observed,
    make_breaker,
    model_arguments,
    refusal_text,
    warn_allowed,
)

STOP_KEY = "circuit_breaker_stop"  # in a stopped run's response.additional_properties
RUN_KEY = "circuit_breaker_run"  # in the run's session.state: the run's breaker id
_RUN: ContextVar[str | None] = ContextVar("dsh_circuit_breaker_agent_framework_run", default=None)


class CircuitBreakerRunScope(AgentMiddleware):
    """Marks each agent run with the breaker id its function calls count against, and
    records a stop on the run's response."""

    def __init__(self, breaker: CircuitBreaker, stops: PendingStops) -> None:
        self.breaker = breaker
        self._stops = stops

    def run_id(self, context: AgentContext) -> tuple[str, bool]:
        """The run's breaker id, and whether it is this run's alone (dropped at its end)."""
        agent = context.agent
        name = getattr(agent, "id", None) or getattr(agent, "name", None) or ""
        session = getattr(context.session, "session_id", None)
        if session and not self.breaker.config.reset_on_user_prompt:
            return f"agent-framework:{name}:session:{session}", False
        return f"agent-framework:{name}:run:{secrets.token_hex(8)}", True

    async def process(
        self, context: AgentContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        try:
            agent, per_run = self.run_id(context)
        except Exception:
            warn_allowed("agent-framework run id")
            await call_next()
            return
        # A streamed run (as an agent used as a tool is) calls its tools after this returns,
        # outside the context variable's scope; its session, which `as_tool` makes anew for
        # the child, carries the id there.
        if context.session is not None:
            context.session.state[RUN_KEY] = agent
        token = _RUN.set(agent)
        try:
            await call_next()
        finally:
            _RUN.reset(token)
            stop = self._stops.take(agent)
            if stop is not None and isinstance(context.result, AgentResponse):
                context.result.additional_properties[STOP_KEY] = stop.stop_reason
            if per_run:  # nothing reads a finished run's id again
                await areset(self.breaker, agent)


class CircuitBreakerFunctionMiddleware(FunctionMiddleware):
    """Refuses a function call once its agent loops, as the breaker decides (see SPEC)."""

    def __init__(self, breaker: CircuitBreaker, stops: PendingStops) -> None:
        self.breaker = breaker
        self._stops = stops

    async def process(
        self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        try:
            agent = _agent_of(context)
            arguments = model_arguments(dict(context.arguments))
            tool = str(context.function.name)
        except Exception:
            warn_allowed("agent-framework function middleware")
            await call_next()
            return
        decision = await acheck(self.breaker, agent, tool, arguments)
        if decision.allowed:
            call = (agent, tool, arguments)
            await arun_observed(self.breaker, call, call_next(), lambda _: _output(context.result))
            return
        context.result = refusal_text(decision)
        if decision.stop:
            self._stops.add(agent, decision)
            raise MiddlewareTermination(decision.stop_reason or "Circuit breaker: stopped.")


def _output(result: Any) -> Any:
    """A function's result as text and JSON: the framework hands it on as `Content` items
    (whose repr says nothing of what they hold)."""
    if isinstance(result, Content):
        return result.text if result.type == "text" else result.to_dict()
    if isinstance(result, list):
        return [_output(item) for item in result]
    return result


def _agent_of(context: FunctionInvocationContext) -> str:
    session = context.session
    marked = session.state.get(RUN_KEY) if session is not None else None
    if isinstance(marked, str):
        return marked
    return _RUN.get() or "agent-framework:unscoped"


def circuit_breaker_middleware(
    breaker: CircuitBreaker | None = None, *, config: Config | None = None
) -> list[AgentMiddleware | FunctionMiddleware]:
    """The two middleware an agent takes (`Agent(..., middleware=...)`): the run scope that
    keys its runs and the function middleware that guards its calls. Give the same list to
    every agent that should share the breaker (a sub-agent used as a tool too): each run
    still gets its own id. `breaker`: share one breaker (and its store); default a new
    in-memory breaker built from `config`."""
    shared = make_breaker(breaker, config, __name__)
    stops = PendingStops()
    return [CircuitBreakerRunScope(shared, stops), CircuitBreakerFunctionMiddleware(shared, stops)]


def stop_reason(response: Any) -> str | None:
    """Why the breaker stopped this run (an `AgentResponse`), or None."""
    properties = getattr(response, "additional_properties", None) or {}
    reason = properties.get(STOP_KEY)
    return reason if isinstance(reason, str) else None
