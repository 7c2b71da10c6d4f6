"""OpenAI Agents SDK: the breaker as a tool input guardrail.

    from dsh_circuit_breaker.integrations.openai_agents import guard_agent

    guard_agent(triage_agent)   # every function tool, MCP server, handoff and agent-as-tool

The SDK has no agent-level tool guard: input guardrails attach per function tool (or per
MCP server). `guard_agent` attaches one breaker guardrail to every function tool of an
agent, to its MCP servers, and, recursively, to the agents it hands off to and the agents
it runs as tools. A denied call returns `ToolGuardrailFunctionOutput.reject_content(text)`:
the tool does not run and the model gets `text` as that call's output. When the breaker
stops the agent (`stopAfterDenials` refusals in a row), the guardrail trips instead
(`ToolGuardrailFunctionOutput.raise_exception`): the tool does not run and `Runner.run`
raises the SDK's `ToolInputGuardrailTripwireTriggered`, whose `output.output_info` holds
`"stop": True`, the stop `reason` and the refusal `message`. A tool output guardrail beside
it reports an allowed call's output (a failed tool's error message too) to the breaker
(docs/results.md).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from agents import Agent, FunctionTool, Handoff
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)

from ..core.breaker import CircuitBreaker
from ..core.config import Config
from ._common import RanCalls, acheck, make_breaker, model_arguments, refusal_text, warn_allowed

GUARDRAIL_NAME = "dsh_circuit_breaker"
G = TypeVar("G", ToolInputGuardrail[Any], ToolOutputGuardrail[Any])

AgentIdFunc = Callable[[ToolInputGuardrailData], Any]


class AgentRun:
    """One agent within one run: what the breaker keys its state on by default.

    The SDK builds a fresh context per tool call, but every call of one run (and of agents
    it runs as tools) shares the run's `usage` object, so (usage, agent) names one agent in
    one run. A handoff target or an agent-as-tool is another agent object, so it gets its
    own state. `name` is the agent's name, which the incident log records.
    """

    __slots__ = ("__weakref__", "agent", "name")

    def __init__(self, agent: Any) -> None:
        self.agent = agent  # held so that id(agent) cannot be reused while the run lives
        self.name = str(getattr(agent, "name", "") or "agent")


class _Runs:
    """(run anchor, agent) -> AgentRun, forgotten when the run's anchor is collected."""

    def __init__(self) -> None:
        self._runs: dict[int, dict[int, AgentRun]] = {}
        self._lock = threading.Lock()

    def get(self, anchor: Any, agent: Any) -> AgentRun:
        with self._lock:
            per_run = self._runs.get(id(anchor))
            if per_run is None:
                per_run = self._runs[id(anchor)] = {}
                try:
                    weakref.finalize(anchor, self._runs.pop, id(anchor), None)
                except TypeError:  # not weakly referenceable: the agent object alone names it
                    del self._runs[id(anchor)]
                    return self._fallback(agent)
            found = per_run.get(id(agent))
            if found is None:
                found = per_run[id(agent)] = AgentRun(agent)
            return found

    def _fallback(self, agent: Any) -> AgentRun:
        per_agent = self._runs.setdefault(0, {})
        found = per_agent.get(id(agent))
        if found is None:
            found = per_agent[id(agent)] = AgentRun(agent)
        return found


def _call_id(data: ToolInputGuardrailData) -> tuple[int, str]:
    return id(data.context.usage), data.context.tool_call_id


class BreakerGuardrail:
    """The guardrail function: asks the breaker about one function tool call. `output` is
    its tool output guardrail, which reports an allowed call's output to the breaker."""

    def __init__(self, breaker: CircuitBreaker, agent_id: AgentIdFunc | None) -> None:
        self.breaker = breaker
        self.agent_id = agent_id
        self._runs = _Runs()
        self.ran = RanCalls(breaker)
        self.__name__ = GUARDRAIL_NAME
        self.output: ToolOutputGuardrail[Any] = ToolOutputGuardrail(
            guardrail_function=ResultObserver(self)
        )

    def agent_for(self, data: ToolInputGuardrailData) -> Any:
        if self.agent_id is not None:
            return self.agent_id(data)
        return self._runs.get(data.context.usage, data.agent)

    async def __call__(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        try:
            agent = self.agent_for(data)
            tool = data.context.tool_name
            arguments = model_arguments(data.context.tool_arguments)
        except Exception:
            warn_allowed("openai-agents tool guardrail")
            return ToolGuardrailFunctionOutput.allow()
        decision = await acheck(self.breaker, agent, tool, arguments)
        self.ran.add(_call_id(data), (agent, tool, arguments), decision)
        if decision.allowed:
            return ToolGuardrailFunctionOutput.allow()
        message = refusal_text(decision)
        info = {"kind": decision.kind, "count": decision.count, "limit": decision.limit}
        if decision.stop:
            # The SDK's own way to end a run from a tool guardrail.
            stop = {"stop": True, "reason": decision.stop_reason, "message": message}
            return ToolGuardrailFunctionOutput.raise_exception(output_info={**info, **stop})
        return ToolGuardrailFunctionOutput.reject_content(message, output_info=info)


class ResultObserver:
    """The output guardrail function: the tool's output (its error message, if it failed)
    as the call's result. It never changes the output."""

    def __init__(self, check: BreakerGuardrail) -> None:
        self.check = check
        self.__name__ = GUARDRAIL_NAME

    async def __call__(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        await self.check.ran.observe(_call_id(data), data.output)
        return ToolGuardrailFunctionOutput.allow()


def circuit_breaker_guardrail(
    breaker: CircuitBreaker | None = None,
    *,
    config: Config | None = None,
    agent_id: AgentIdFunc | None = None,
) -> ToolInputGuardrail[Any]:
    """A tool input guardrail to pass yourself: `@function_tool(tool_input_guardrails=[g])`
    (and `tool_output_guardrails=[g.guardrail_function.output]`, for the result keys).

        `agent_id(data) -> str | object` names the agent a call counts against (for example a
        session id, to carry state across runs in a persistent store); default: the agent object
        within the current run.
    """
    check = BreakerGuardrail(make_breaker(breaker, config, __name__), agent_id)
    return ToolInputGuardrail(guardrail_function=check, name=GUARDRAIL_NAME)


def guard_agent(
    agent: Agent[Any],
    breaker: CircuitBreaker | ToolInputGuardrail[Any] | None = None,
    *,
    config: Config | None = None,
    agent_id: AgentIdFunc | None = None,
) -> ToolInputGuardrail[Any]:
    """Attach one breaker guardrail to every function tool and MCP server of `agent`, and of
    every agent it can hand off to or runs as a tool, recursively. Returns the guardrail, to
    attach to tools added later. Tools that already carry a breaker guardrail are left as
    they are, so guarding twice never counts a call twice.

    `breaker` may be a `CircuitBreaker`, or a guardrail from an earlier call to share it.
    """
    if isinstance(breaker, ToolInputGuardrail):
        if config is not None or agent_id is not None:
            raise TypeError("config= and agent_id= belong to the guardrail already given")
        guardrail = breaker
    else:
        guardrail = circuit_breaker_guardrail(breaker, config=config, agent_id=agent_id)
    check = guardrail.guardrail_function
    output = check.output if isinstance(check, BreakerGuardrail) else None
    seen: set[int] = set()
    pending: list[Any] = [agent]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for tool in getattr(current, "tools", None) or ():
            if isinstance(tool, FunctionTool):
                tool.tool_input_guardrails = _with(tool.tool_input_guardrails, guardrail)
                if output is not None:
                    tool.tool_output_guardrails = _with(tool.tool_output_guardrails, output)
                # An agent run as a tool (`agent.as_tool`) keeps its agent here (SDK-private,
                # hence getattr): guard the inner agent's tools too.
                inner = getattr(tool, "_agent_instance", None)
                if inner is not None:
                    pending.append(inner)
        for server in getattr(current, "mcp_servers", None) or ():
            if hasattr(server, "tool_input_guardrails"):
                server.tool_input_guardrails = _with(server.tool_input_guardrails, guardrail)
                if output is not None:
                    server.tool_output_guardrails = _with(server.tool_output_guardrails, output)
        for target in getattr(current, "handoffs", None) or ():
            if isinstance(target, Handoff):
                # `handoff(agent)` keeps a weak reference to its target (SDK-private).
                ref = getattr(target, "_agent_ref", None)
                target = ref() if ref is not None else None
            if target is not None:
                pending.append(target)
    return guardrail


def _with(existing: list[G] | None, guardrail: G) -> list[G]:
    current: list[G] = list(existing or [])
    if any(isinstance(g.guardrail_function, (BreakerGuardrail, ResultObserver)) for g in current):
        return current
    # First, so a refused call never reaches the other guardrails either.
    current.insert(0, guardrail)
    return current
