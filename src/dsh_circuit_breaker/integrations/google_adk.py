"""Google ADK: the breaker as a Runner plugin (its before_tool_callback).

    from google.adk.runners import Runner
    from dsh_circuit_breaker.integrations.google_adk import CircuitBreakerPlugin

    runner = Runner(agent=root_agent, ..., plugins=[CircuitBreakerPlugin()])

A plugin's `before_tool_callback` runs before every tool of every agent the runner runs
(sub-agents, transfers, and `AgentTool` sub-runs, which inherit the runner's plugins). A
denied call returns `{"error": text}`: ADK skips the tool, and the model gets that dict as
the function response for the call's id. An allowed call's response, as the plugin's
`after_tool_callback` gets it (an error response too), is reported to the breaker
(docs/results.md). When the breaker stops the agent
(`stopAfterDenials` refusals in a row), the plugin's `before_model_callback` answers the
agent's next model request itself (ADK's own way to skip a model call): a final response
whose text is the stop reason and whose `custom_metadata["dsh_circuit_breaker"]` holds
`{"stop": True, ...}`. The agent's turn ends there; a sub-agent run through `AgentTool`
hands that text back to its parent, which goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from ..core.breaker import CircuitBreaker
from ..core.config import Config
from ._common import (
    PendingStops,
    RanCalls,
    acheck,
    areset,
    make_breaker,
    model_arguments,
    refusal_text,
    warn_allowed,
)

METADATA_KEY = "dsh_circuit_breaker"


class _Guard:
    """Identity, check and cleanup.

    Agent identity: the agent's name within one invocation (one user message and all the
    agent turns it causes), so a transfer target or a sub-agent counts on its own. With
    `reset_on_user_prompt=False` the session id replaces the invocation id, so the count
    follows the session across user messages.
    """

    def __init__(self, breaker: CircuitBreaker) -> None:
        self.breaker = breaker
        self._by_invocation: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._stops = PendingStops()
        self.ran = RanCalls(breaker)

    def key(self, context: ToolContext | CallbackContext) -> str:
        agent = context.agent_name
        if self.breaker.config.reset_on_user_prompt:
            invocation = context.invocation_id
            key = f"google-adk:{invocation}:{agent}"
            with self._lock:  # remembered so the invocation's end can drop its state
                self._by_invocation.setdefault(invocation, set()).add(key)
            return key
        session = context.session
        return f"google-adk:{session.app_name}:{session.user_id}:{session.id}:{agent}"

    async def check(
        self, tool: BaseTool, args: Mapping[str, Any], context: ToolContext
    ) -> dict[str, Any] | None:
        try:
            key = self.key(context)
            name = tool.name
            arguments = model_arguments(dict(args))
        except Exception:
            warn_allowed("google-adk before_tool_callback")
            return None
        decision = await acheck(self.breaker, key, name, arguments)
        self.ran.add(_call_id(context), (key, name, arguments), decision)
        if decision.allowed:
            return None
        self._stops.add(key, decision)
        return {"error": refusal_text(decision)}

    def stop_response(self, context: CallbackContext) -> LlmResponse | None:
        """The answer in place of the model's when this agent was stopped, else None."""
        try:
            key = self.key(context)
        except Exception:
            warn_allowed("google-adk before_model_callback")
            return None
        stop = self._stops.take(key)
        if stop is None:
            return None
        reason = stop.stop_reason or "Circuit breaker: this agent is being stopped."
        return LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=reason)]),
            custom_metadata={METADATA_KEY: {"stop": True, "kind": stop.kind, "reason": reason}},
        )

    async def finished(self, invocation_id: str) -> None:
        with self._lock:
            keys = self._by_invocation.pop(invocation_id, set())
        for key in keys:
            self._stops.take(key)
            await areset(self.breaker, key)


def _call_id(context: ToolContext) -> tuple[str, str | None]:
    return context.invocation_id, context.function_call_id


class CircuitBreakerPlugin(BasePlugin):
    """Refuses a tool call once its agent loops, as the breaker decides (see SPEC)."""

    def __init__(
        self,
        breaker: CircuitBreaker | None = None,
        *,
        config: Config | None = None,
        name: str = "dsh_circuit_breaker",
    ) -> None:
        super().__init__(name=name)
        self.breaker = make_breaker(breaker, config, __name__)
        self._guard = _Guard(self.breaker)

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        return await self._guard.check(tool, tool_args, tool_context)

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        # Also called for a call a before-tool callback answered: that one was never added.
        await self._guard.ran.observe(_call_id(tool_context), result)
        return None

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        return self._guard.stop_response(callback_context)

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        # The invocation is over and its ids are never seen again: drop their state.
        await self._guard.finished(invocation_context.invocation_id)
