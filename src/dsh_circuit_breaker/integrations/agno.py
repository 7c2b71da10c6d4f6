"""Agno: the breaker as a tool hook.

    from dsh_circuit_breaker.integrations.agno import CircuitBreakerToolHook

    agent = Agent(model=..., tools=[...], tool_hooks=[CircuitBreakerToolHook()])
    team = Team(members=[...], tool_hooks=[hook])  # the team's own tools (delegation)

Agno runs each tool through its `tool_hooks` chain; the hook asks the breaker before it
calls `function_call` (the rest of the chain and the tool). A denied call never reaches the
tool: the hook raises `AgentRunException` with the breaker's text, which Agno turns into
that call's error result (`tool_call_error=True`; the model gets the text as the tool's
output). An allowed call's result, once final, is reported to the breaker
(docs/results.md). When the breaker stops the agent it raises `StopAgentRun` instead: the
refusal is still that call's result, then Agno ends the run with no further model request, the stop
reason as the run's last (assistant) message.

One sync hook serves sync and async runs: Agno skips an async hook in a sync run, and in an
async run awaits what a sync hook returns.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from agno.exceptions import AgentRunException, StopAgentRun

from ..core.breaker import CircuitBreaker, Decision
from ..core.config import Config
from ._common import (
    CheckedCall,
    RecentAgents,
    arun_observed,
    error_text,
    make_breaker,
    model_arguments,
    refusal_text,
    safe_reset,
    warn_allowed,
)

AgentIdFunc = Callable[[Any, Any, Any], str]  # (agent, team, run_context) -> id
KEEP_RUNS = 1024  # per-run agents whose state is kept (Agno has no hook at a run's end)


def default_agent_id(agent: Any, team: Any, run_context: Any, *, per_run: bool = True) -> str:
    """One agent = one Agno agent (or team) in one run: its id (or name) and, with
    `per_run` (the breaker's `reset_on_user_prompt`), the run's id, so each `run` starts
    fresh; else the session's id, so the count follows the session across runs. A team
    member runs its own run, so it is its own agent."""
    owner = agent if agent is not None else team
    name = getattr(owner, "id", None) or getattr(owner, "name", None) or ""
    scope = getattr(run_context, "run_id" if per_run else "session_id", None) or ""
    kind = "team" if agent is None and team is not None else "agent"
    return f"agno:{kind}:{name}:{scope}"


class CircuitBreakerToolHook:
    """Refuses a tool call once its agent loops, as the breaker decides (see SPEC).

    `breaker`: share one breaker (and its store) between agents; default a new in-memory
    breaker built from `config`. `agent_id(agent, team, run_context) -> str` names the agent
    whose state a call counts against (default `default_agent_id`).

    The check runs inline, in sync and async runs alike (a persistent store may hold the
    call up to its `store_timeout`).
    """

    def __init__(
        self,
        breaker: CircuitBreaker | None = None,
        *,
        config: Config | None = None,
        agent_id: AgentIdFunc | None = None,
    ) -> None:
        self.breaker = make_breaker(breaker, config, __name__)
        per_run = self.breaker.config.reset_on_user_prompt
        self.agent_id = agent_id or (
            lambda agent, team, run_context: default_agent_id(
                agent, team, run_context, per_run=per_run
            )
        )
        self._recent = RecentAgents(KEEP_RUNS) if agent_id is None and per_run else None
        self.__name__ = "circuit_breaker"  # Agno logs hooks by name
        # Agno reads the hook's signature eleven times per call, to pick its arguments;
        # worked out from `__call__` each time, that costs more than the check itself.
        self.__signature__ = inspect.signature(self.__call__)

    def __call__(
        self,
        function_name: str,
        function_call: Callable[..., Any],
        arguments: dict[str, Any],
        agent: Any = None,
        team: Any = None,
        run_context: Any = None,
    ) -> Any:
        try:
            key = self.agent_id(agent, team, run_context)
            args = model_arguments(arguments)
        except Exception:
            warn_allowed("agno tool hook")
            return function_call(**arguments)
        dropped = self._recent.touch(key) if self._recent is not None else None
        if dropped is not None:
            safe_reset(self.breaker, dropped)
        decision = self.breaker.check(key, function_name, args)
        if not decision.allowed:
            raise refusal(decision)
        if not self.breaker.config.observes_results:
            return function_call(**arguments)
        return self._observed((key, function_name, args), function_call, arguments)

    def _observed(
        self, call: CheckedCall, function_call: Callable[..., Any], arguments: Any
    ) -> Any:
        """`function_call`'s result, reported to the breaker once it is final: what the
        rest of the chain returns, awaited in an async run, or a streaming tool's chunks
        joined once they are all out; an error, which Agno makes the result, as its text."""
        try:
            result = function_call(**arguments)
        except Exception as exc:
            self.breaker.observe(*call, error_text(exc))
            raise
        if inspect.isawaitable(result):
            return arun_observed(self.breaker, call, result)
        if inspect.isgenerator(result):
            return _joined(self.breaker, call, result)
        if inspect.isasyncgen(result):
            return _ajoined(self.breaker, call, result)
        self.breaker.observe(*call, result)
        return result


def _joined(breaker: CircuitBreaker, call: CheckedCall, chunks: Iterator[Any]) -> Iterator[Any]:
    seen: list[str] = []
    for chunk in chunks:
        seen.append(str(chunk))
        yield chunk
    breaker.observe(*call, "".join(seen))


async def _ajoined(
    breaker: CircuitBreaker, call: CheckedCall, chunks: AsyncIterator[Any]
) -> AsyncIterator[Any]:
    seen: list[str] = []
    async for chunk in chunks:
        seen.append(str(chunk))
        yield chunk
    breaker.observe(*call, "".join(seen))


def refusal(decision: Decision) -> AgentRunException:
    """What the hook raises for a refused call: its text is the call's error result."""
    text = refusal_text(decision)
    if decision.stop:
        return StopAgentRun(text, agent_message=decision.stop_reason)
    return AgentRunException(text)


def guard(target: Any, hook: CircuitBreakerToolHook | None = None) -> CircuitBreakerToolHook:
    """Add `hook` (default a new one) to the `tool_hooks` of an Agno agent or team, and of
    every member of a team, members of sub-teams included (a team's hooks guard only the
    team's own tools, such as delegation; each member runs its tools with its own).
    Returns the hook."""
    hook = hook or CircuitBreakerToolHook()
    hooks = list(getattr(target, "tool_hooks", None) or [])
    if hook not in hooks:
        target.tool_hooks = [hook, *hooks]  # first: outermost, before any other hook
    for member in getattr(target, "members", None) or []:
        guard(member, hook)
    return hook


def stop_reason(output: Any) -> str | None:
    """Why the breaker stopped this run (an Agno `RunOutput` or `TeamRunOutput`), or None:
    `StopAgentRun` leaves the refused call's result marked `stop_after_tool_call`, then the
    stop reason as the run's last (assistant) message."""
    messages = list(getattr(output, "messages", None) or [])
    if len(messages) < 2:
        return None
    result, last = messages[-2], messages[-1]
    if last.role == "assistant" and result.stop_after_tool_call and result.tool_call_error:
        return last.content if isinstance(last.content, str) else None
    return None
