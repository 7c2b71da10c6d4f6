"""pydantic-ai: the breaker as an agent capability.

    from dsh_circuit_breaker.integrations.pydantic_ai import CircuitBreakerCapability

    agent = Agent(model, tools=[...], capabilities=[CircuitBreakerCapability()])

Before each tool runs, `before_tool_execute` asks the breaker; a denied call raises
`ToolFailed` with the breaker's text, which pydantic-ai turns into a failed tool return
for that call id (an error result on the wire) without using the tool's retry budget. An
allowed call's return value, or the retry prompt or error it raised, is reported to the
breaker as its result (`wrap_tool_execute`; docs/results.md).
When the breaker stops the agent (`stopAfterDenials` refusals in a row),
`before_model_request` raises `AgentStopped` instead of the next model request: `run`,
`run_sync`, `run_stream` and `iter` raise it, the refusal already in the run's messages
(`capture_run_messages()` holds them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, WrapRunHandler, WrapToolExecuteHandler
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import DeferredToolRequests, ToolDefinition

from ..core.breaker import CircuitBreaker
from ..core.config import Config
from ..core.stop import AgentStopped
from ._common import (
    PendingStops,
    RanCalls,
    acheck,
    areset,
    error_text,
    make_breaker,
    model_arguments,
    refusal_text,
    warn_allowed,
)

AgentIdFunc = Callable[[RunContext[Any]], str]


def default_agent_id(ctx: RunContext[Any]) -> str:
    """One agent = one agent's conversation: the agent's name (runs of different agents that
    share a conversation id stay apart) plus `ctx.conversation_id`, which pydantic-ai carries
    across runs that continue one message history. A delegated agent called from a tool
    starts its own conversation, so it gets its own state."""
    name = getattr(ctx.agent, "name", None) or ""
    conversation = ctx.conversation_id or ctx.run_id or ""
    return f"pydantic-ai:{name}:{conversation}"


class CircuitBreakerCapability(AbstractCapability[Any]):
    """Refuses a tool call once its agent loops, as the breaker decides (see SPEC).

    `breaker`: share one breaker (and its store) between agents; default a new in-memory
    breaker built from `config`. `agent_id(ctx) -> str` names the agent whose state a call
    counts against (default `default_agent_id`).

    With `config.reset_on_user_prompt` (the default), a run that starts with a new user
    prompt starts from a fresh state, since a person has spoken, and the state is dropped
    when the run ends unless the run stopped on deferred tool calls that a later run
    (without a new prompt) will continue.
    """

    def __init__(
        self,
        breaker: CircuitBreaker | None = None,
        *,
        config: Config | None = None,
        agent_id: AgentIdFunc | None = None,
    ) -> None:
        self.breaker = make_breaker(breaker, config, __name__)
        self.agent_id = agent_id or default_agent_id
        self._stops = PendingStops()
        self._ran = RanCalls(self.breaker)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live breaker: not buildable from an agent spec file

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        try:
            agent = self.agent_id(ctx)
        except Exception:
            warn_allowed("agent_id")
            return await handler()
        reset = self.breaker.config.reset_on_user_prompt
        if reset and ctx.prompt is not None:
            await areset(self.breaker, agent)
        deferred = False
        try:
            result = await handler()
            deferred = isinstance(result.output, DeferredToolRequests)
            return result
        finally:
            self._stops.take(agent)
            # Nothing reads this state again once the run is over (the next prompt resets it),
            # so drop it rather than keep one record per conversation for the process's life.
            if reset and not deferred:
                await areset(self.breaker, agent)

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        try:
            agent = self.agent_id(ctx)
        except Exception:
            warn_allowed("agent_id")
            return request_context
        stop = self._stops.take(agent)
        if stop is not None:
            raise AgentStopped(stop, agent)
        return request_context

    async def before_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
    ) -> dict[str, Any]:
        # The model's own arguments, not the validated ones: validation fills defaults and
        # builds objects that may not serialize, and it is the model's repetition we judge.
        try:
            agent = self.agent_id(ctx)
            arguments = model_arguments(call.args)
        except Exception:
            warn_allowed("pydantic-ai before_tool_execute")
            return args
        decision = await acheck(self.breaker, agent, call.tool_name, arguments)
        self._ran.add((ctx.run_id, call.tool_call_id), (agent, call.tool_name, arguments), decision)
        if not decision.allowed:
            self._stops.add(agent, decision)
            raise ToolFailed(refusal_text(decision))
        return args

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: WrapToolExecuteHandler,
    ) -> Any:
        # Around the whole lifecycle (our before_tool_execute included), so a tool's retry
        # prompt or failure, which the model reads as that call's result, is seen too.
        call_id = (ctx.run_id, call.tool_call_id)
        try:
            result = await handler(args)
        except Exception as exc:
            await self._ran.observe(call_id, error_text(exc))
            raise
        await self._ran.observe(call_id, result)
        return result
