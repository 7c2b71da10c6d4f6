"""LlamaIndex agent workflows: the breaker around each agent's tools.

    from dsh_circuit_breaker.integrations.llamaindex import guard

    agent = FunctionAgent(tools=[...], llm=...)
    guard(agent)  # or guard(AgentWorkflow(agents=[...])): every agent's tools
    response = await agent.run(user_msg="...")

LlamaIndex has no hook before a tool call, so `guard` replaces each tool of each agent
with a `GuardedTool` that asks the breaker first. A refused call never reaches the tool:
`GuardedTool` answers it with `ToolOutput(content=<the breaker's text>, is_error=True)`,
what LlamaIndex makes of a tool that failed, and the model gets the text as that call's
result. When the breaker stops the agent, the tool raises `LlamaIndexStopped` instead,
out of the workflow's `call_tool` step: the run ends with no further model request, and
`await agent.run(...)` raises it, the stop reason its text. It is a BaseException, as
LlamaIndex turns any Exception a tool raises into an error result the model reads and
goes on.

Which agent a call belongs to: a workflow agent (by its `name`) in one workflow Context:
each `run` makes a new Context, so each run starts fresh; a run continued with `ctx=`
goes on counting in that context. In an `AgentWorkflow` each agent, the ones handed off
to included, has its own state.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from llama_index.core.tools import BaseTool, FunctionTool, ToolOutput, adapt_to_async_tool

from ..core.breaker import CircuitBreaker, Decision
from ..core.config import Config
from ..core.stop import AgentStopped
from ._common import (
    CheckedCall,
    RecentAgents,
    acheck,
    areset,
    arun_observed,
    make_breaker,
    model_arguments,
    refusal_text,
    warn_allowed,
)

CTX = "_circuit_breaker_ctx"  # the name LlamaIndex hands the workflow Context under
KEEP_RUNS = 1024  # per-run agents whose state is kept (LlamaIndex has no hook at a run's end)


class LlamaIndexStopped(BaseException):
    """The breaker stopped a LlamaIndex agent: `await agent.run(...)` raises this, its text
    the stop reason. `decision`, `reason` and `agent` as in `AgentStopped`."""

    def __init__(self, decision: Decision, agent: str | None = None) -> None:
        stopped = AgentStopped(decision, agent)  # the reason every integration's stop gives
        super().__init__(stopped.reason)
        self.decision, self.reason, self.agent = decision, stopped.reason, agent

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.decision, self.agent))


class LlamaIndexCircuitBreaker:
    """The breaker, and the runs it has seen, that guarded tools share. `breaker`: share
    one breaker (and its store); default a new in-memory breaker built from `config`."""

    def __init__(self, breaker: CircuitBreaker | None = None, *, config: Config | None = None):
        self.breaker = make_breaker(breaker, config, __name__)
        self._runs: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._next_run = 0
        self._recent = RecentAgents(KEEP_RUNS)
        self._lock = threading.Lock()

    def agent_id(self, agent: str, ctx: Any) -> str:
        """One agent = one workflow agent in one workflow Context (or, with
        `reset_on_user_prompt=False` or no Context, the agent for the breaker's life)."""
        if ctx is None or not self.breaker.config.reset_on_user_prompt:
            return f"llamaindex:{agent}"
        store = ctx.store  # a step gets a Context of its own; the run's state store is shared
        with self._lock:
            run = self._runs.get(store)
            if run is None:
                self._next_run += 1
                run = self._runs[store] = self._next_run
        return f"llamaindex:{agent}:run-{run}"

    async def check(
        self, agent: str, ctx: Any, tool: str, kwargs: dict[str, Any]
    ) -> tuple[CheckedCall, Decision]:
        """The decision on one call, with the call as the breaker judged it (agent key,
        tool, arguments): what its result is observed against."""
        key = self.agent_id(agent, ctx)
        dropped = self._recent.touch(key) if ctx is not None else None
        if dropped is not None:
            await areset(self.breaker, dropped)
        call = (key, tool, model_arguments(kwargs))
        decision = await acheck(self.breaker, *call)
        if decision.stop:
            raise LlamaIndexStopped(decision, key)
        return call, decision


class GuardedTool(FunctionTool):
    """A tool that asks the breaker before it runs `inner` (any LlamaIndex tool), with the
    same name, description and schema. A FunctionTool that asks for the workflow Context,
    so an agent workflow hands it the run's."""

    def __init__(self, inner: BaseTool, guard: LlamaIndexCircuitBreaker, agent: str) -> None:
        self.inner = adapt_to_async_tool(inner)
        self.guard = guard
        self.agent = agent
        super().__init__(async_fn=self.acall, metadata=inner.metadata)
        self.requires_context, self.ctx_param_name = True, CTX

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        ctx = kwargs.pop(CTX, None)
        try:
            call, decision = await self.guard.check(
                self.agent, ctx, self.metadata.get_name(), kwargs
            )
        except LlamaIndexStopped:
            raise
        except Exception:
            warn_allowed("llamaindex guarded tool")
            return await self._run(ctx, *args, **kwargs)
        if decision.allowed:
            run = self._run(ctx, *args, **kwargs)
            return await arun_observed(self.guard.breaker, call, run, _content)
        text = refusal_text(decision)
        return ToolOutput(
            content=text,
            tool_name=self.metadata.get_name(),
            raw_input={"args": args, "kwargs": kwargs},
            raw_output=text,
            is_error=True,
        )

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return self._fn(*args, **kwargs)

    async def _run(self, ctx: Any, *args: Any, **kwargs: Any) -> ToolOutput:
        inner = self.inner
        if isinstance(inner, FunctionTool) and inner.requires_context and inner.ctx_param_name:
            kwargs[inner.ctx_param_name] = ctx
        return await inner.acall(*args, **kwargs)


def _content(output: ToolOutput) -> Any:
    """What of a tool's output the model reads: its content (an error output's too)."""
    return output.content


def guard(target: Any, guard: LlamaIndexCircuitBreaker | None = None) -> LlamaIndexCircuitBreaker:
    """Put the breaker around the tools of a workflow agent (`FunctionAgent`,
    `ReActAgent`, ...) or of every agent of an `AgentWorkflow`. Returns the shared
    `LlamaIndexCircuitBreaker` (default a new one). Tools found by a `tool_retriever`
    are not wrapped (see the doc)."""
    guard = guard or LlamaIndexCircuitBreaker()
    agents = getattr(target, "agents", None)
    for agent in agents.values() if isinstance(agents, dict) else [target]:
        name = str(getattr(agent, "name", None) or "agent")
        agent.tools = [
            tool if isinstance(tool, GuardedTool) else GuardedTool(tool, guard, name)
            for tool in agent.tools or []
        ]
    return guard
