"""CrewAI: the breaker as CrewAI's global tool-call and model-call hooks.

    from dsh_circuit_breaker.integrations.crewai import CrewAICircuitBreaker

    breaker = CrewAICircuitBreaker().register()  # every crew and agent in the process
    crew.kickoff()

CrewAI runs every tool call through its `before_tool_call` hooks; the breaker's one is
asked first and returns False for a refused call, which CrewAI skips. CrewAI then answers
the call with its own fixed text ("Tool execution blocked by hook. Tool: X"), but runs the
`after_tool_call` hooks on the blocked call too, and a string an after-hook returns
replaces the result: the breaker's after-hook puts its refusal there, so the model reads
the breaker's text as that call's result. Both hooks see the same `tool_input` dict, which
is how the after-hook knows the call it refused.

When the breaker stops an agent, its `before_llm_call` hook raises `CrewAIStopped` (a
`HookAborted`, CrewAI's deliberate abort, and an `AgentStopped`) before the agent's next
model request: CrewAI does not retry it, and `crew.kickoff()` raises it with the stop
reason as its text. (Returning False from `before_llm_call` raises a ValueError that the
agent's `max_retry_limit` loop retries, with new model requests.)

Which agent a call belongs to: each crew member within one kickoff (the kickoff marked by
CrewAI's `execution_start` hook, its state dropped at `execution_end`); an agent run on
its own (`agent.kickoff`) keeps one state for the agent object.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

from crewai.hooks.dispatch import (
    HookAborted,
    InterceptionPoint,
    get_global_hook_list,
    register,
    unregister,
)

from ..core.breaker import CircuitBreaker, Decision
from ..core.config import Config
from ..core.stop import AgentStopped
from ._common import (
    PendingStops,
    RanCalls,
    make_breaker,
    model_arguments,
    refusal_text,
    safe_reset,
    warn_allowed,
)


class CrewAIStopped(HookAborted, AgentStopped):
    """The breaker stopped a CrewAI agent: `crew.kickoff()` (or `agent.kickoff()`) raises
    this, its text the stop reason. A `HookAborted`, so CrewAI passes it through its retry
    loops, and an `AgentStopped`, like every integration's stop."""

    def __init__(self, decision: Decision, agent: str | None = None) -> None:
        AgentStopped.__init__(self, decision, agent)
        self.source = "dsh-circuit-breaker"


class CrewAICircuitBreaker:
    """Refuses a tool call once its agent loops, as the breaker decides (see SPEC).

    `breaker`: share one breaker (and its store); default a new in-memory breaker built
    from `config`. `register()` adds the hooks to CrewAI's global hook lists (first, so no
    other hook runs a refused call); `unregister()` takes them out. Also a context manager.
    """

    def __init__(self, breaker: CircuitBreaker | None = None, *, config: Config | None = None):
        self.breaker = make_breaker(breaker, config, __name__)
        self._stops = PendingStops()
        self._ran = RanCalls(self.breaker)  # allowed calls, till their result is observed
        self._refused: dict[int, tuple[dict[str, Any], str]] = {}  # id(tool_input) -> text
        self._runs: dict[int, tuple[Any, str]] = {}  # id(crew) -> (crew, this kickoff's id)
        self._run_agents: dict[str, set[str]] = {}  # kickoff id -> the agent ids it made
        self._lock = threading.Lock()
        self._hooks = (
            (InterceptionPoint.EXECUTION_START, self.execution_start),
            (InterceptionPoint.EXECUTION_END, self.execution_end),
            (InterceptionPoint.PRE_TOOL_CALL, self.before_tool_call),
            (InterceptionPoint.POST_TOOL_CALL, self.after_tool_call),
            (InterceptionPoint.PRE_MODEL_CALL, self.before_llm_call),
        )

    def register(self) -> CrewAICircuitBreaker:
        for point, hook in self._hooks:
            register(point, hook)
            hooks = get_global_hook_list(point)  # first in the queue: outermost
            hooks.insert(0, hooks.pop())
        return self

    def unregister(self) -> None:
        for point, hook in self._hooks:
            unregister(point, hook)

    def __enter__(self) -> CrewAICircuitBreaker:
        return self.register()

    def __exit__(self, *exc: object) -> None:
        self.unregister()

    # -- which agent ------------------------------------------------------------------
    def agent_id(self, agent: Any, crew: Any) -> str:
        role = getattr(agent, "role", None) or type(agent).__name__
        who = f"{role}:{getattr(agent, 'id', None) or id(agent)}"
        run = self._runs.get(id(crew)) if crew is not None else None
        if run is None or run[0] is not crew:
            return f"crewai:agent:{who}"
        key = f"crewai:crew:{getattr(crew, 'name', None) or 'crew'}:{run[1]}:{who}"
        with self._lock:
            self._run_agents.setdefault(run[1], set()).add(key)
        return key

    def execution_start(self, context: Any) -> None:
        crew = getattr(context, "crew", None)
        if crew is not None:
            self._runs[id(crew)] = (crew, secrets.token_hex(6))

    def execution_end(self, context: Any) -> None:
        crew = getattr(context, "crew", None)
        run = self._runs.pop(id(crew), None) if crew is not None else None
        if run is None:
            return
        with self._lock:
            agents = self._run_agents.pop(run[1], set())
        for agent in agents:  # nothing reads a finished kickoff's ids again
            self._stops.take(agent)
            if self.breaker.config.reset_on_user_prompt:
                safe_reset(self.breaker, agent)

    # -- the calls ----------------------------------------------------------------------
    def before_tool_call(self, context: Any) -> bool | None:
        try:
            agent = self.agent_id(context.agent, context.crew)
            tool = str(context.tool_name)
            arguments = model_arguments(context.tool_input)
        except Exception:
            warn_allowed("crewai before_tool_call hook")
            return None
        decision = self.breaker.check(agent, tool, arguments)
        if decision.allowed:
            # Both hooks get the one tool_input dict: it names the call (see after_tool_call).
            self._ran.add(id(context.tool_input), (agent, tool, arguments), decision)
            return None
        with self._lock:
            self._refused[id(context.tool_input)] = (context.tool_input, refusal_text(decision))
        self._stops.add(agent, decision)
        return False

    def after_tool_call(self, context: Any) -> str | None:
        with self._lock:
            refused = self._refused.pop(id(context.tool_input), None)
        if refused is None or refused[0] is not context.tool_input:
            self._ran.observe_sync(id(context.tool_input), context.tool_result)
            return None
        return refused[1]

    def before_llm_call(self, context: Any) -> None:
        try:
            agent = self.agent_id(context.agent, context.crew)
        except Exception:
            warn_allowed("crewai before_llm_call hook")
            return
        stop = self._stops.take(agent)
        if stop is not None:
            raise CrewAIStopped(stop, agent)
