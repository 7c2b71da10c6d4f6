"""Strands Agents: the breaker as a hook provider.

    from strands import Agent
    from dsh_circuit_breaker.integrations.strands import CircuitBreakerHooks

    agent = Agent(model=..., tools=[...], hooks=[CircuitBreakerHooks()])

On `BeforeToolCallEvent` it asks the breaker; a denied call sets `event.cancel_tool` to the
breaker's text: the tool does not run and the model gets an error tool result with that text
for the call's toolUseId. On `AfterToolCallEvent` an allowed call's result content (an
error's text too) is reported to the breaker (docs/results.md). When the breaker stops the
agent (`stopAfterDenials` refusals in a row), it also calls Strands' own
`agent.cancel(message=reason, after_current_tools=True)`: the invocation ends before the
next model call and returns an `AgentResult` with `stop_reason == "cancelled"` whose final
message is the stop reason."""

from __future__ import annotations

from typing import Any

from strands.hooks import (
    AfterToolCallEvent,
    BeforeInvocationEvent,
    BeforeToolCallEvent,
    HookProvider,
    HookRegistry,
)

from ..core.breaker import CircuitBreaker
from ..core.config import Config
from ._common import (
    RanCalls,
    acheck,
    areset,
    make_breaker,
    model_arguments,
    refusal_text,
    warn_allowed,
)

# Runs after every hook at the default order, so it judges the call as other hooks left it
# (they may rewrite its input), and no hook after it can clear a refusal. After the call
# (callbacks in reverse), it is the first: it sees the tool's own result.
ORDER = 1000


class CircuitBreakerHooks(HookProvider):
    """Refuses a tool call once its agent loops, as the breaker decides (see SPEC).

    The agent is the `strands.Agent` object itself (one object holds one conversation);
    its state goes when the object is collected. Share one provider, or one `breaker`,
    between agents: each agent object still has its own state. With
    `config.reset_on_user_prompt` (the default) each invocation with new input resets it.
    """

    def __init__(self, breaker: CircuitBreaker | None = None, *, config: Config | None = None):
        self.breaker = make_breaker(breaker, config, __name__)
        self._ran = RanCalls(self.breaker)

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeToolCallEvent, self.before_tool_call, order=ORDER)
        registry.add_callback(AfterToolCallEvent, self.after_tool_call, order=ORDER)
        registry.add_callback(BeforeInvocationEvent, self.before_invocation)

    async def before_invocation(self, event: BeforeInvocationEvent) -> None:
        if self.breaker.config.reset_on_user_prompt and event.messages:
            await areset(self.breaker, event.agent)

    async def before_tool_call(self, event: BeforeToolCallEvent) -> None:
        if event.cancel_tool:
            return  # another hook already refused it: it will not run, so it is not counted
        try:
            tool_use = event.tool_use
            tool = str(tool_use["name"])
            arguments = model_arguments(tool_use.get("input"))
        except Exception:
            warn_allowed("strands BeforeToolCallEvent")
            return
        decision = await acheck(self.breaker, event.agent, tool, arguments)
        call_id = (id(event.agent), tool_use["toolUseId"])
        self._ran.add(call_id, (event.agent, tool, arguments), decision)
        if not decision.allowed:
            event.cancel_tool = refusal_text(decision)
            if decision.stop:
                # Strands' cooperative stop: the refusal is answered, then no model call.
                event.agent.cancel(message=decision.stop_reason, after_current_tools=True)

    async def after_tool_call(self, event: AfterToolCallEvent) -> None:
        if event.cancel_message is None:  # a cancelled call did not run
            call_id = (id(event.agent), event.tool_use.get("toolUseId"))
            await self._ran.observe(call_id, event.result.get("content"))
