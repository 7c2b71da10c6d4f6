"""smolagents: the breaker at each agent's tool calls, keyed per agent run.

    from dsh_circuit_breaker.integrations.smolagents import guard

    agent = ToolCallingAgent(tools=[...], model=..., managed_agents=[...])
    guard(agent)  # the agent and its managed agents, theirs too

smolagents has no hook before one tool call; `guard` puts the breaker where the agent runs
its calls. A `ToolCallingAgent` runs each call through `execute_tool_call`: the guarded one
asks the breaker first, and a refused call's result (its observation) is the breaker's
text. A `CodeAgent` calls its tools from the code it writes: each tool is wrapped, and a
refused call raises `ToolCallRefused` with the breaker's text, which stops the snippet
there (the code after it would go on with a made-up result) and reaches the model as the
step's execution error.

When the breaker stops the agent, the refused call is answered as any other and the guard
calls `agent.interrupt()`: smolagents ends the run before its next model request, and the
guarded `run` raises `CircuitBreakerStop` (an `AgentError`), the stop reason its message,
where smolagents' own interrupt raises a bare "Agent interrupted.".
"""

from __future__ import annotations

import itertools
import secrets
import types
from collections.abc import Callable, Iterator
from typing import Any

# smolagents ships no type information (no py.typed).
from smolagents import CodeAgent, ToolCallingAgent  # type: ignore[import-untyped]
from smolagents.local_python_executor import (  # type: ignore[import-untyped]
    LocalPythonExecutor,
)
from smolagents.utils import AgentError  # type: ignore[import-untyped]

from ..core._log import warn
from ..core.breaker import CircuitBreaker, Decision
from ..core.config import Config
from ._common import (
    CheckedCall,
    PendingStops,
    make_breaker,
    model_arguments,
    refusal_text,
    run_observed,
    safe_reset,
    warn_allowed,
)

RUN_ATTR = "_circuit_breaker_run"  # on a guarded agent: the breaker id of its current run
FINAL_ANSWER = "final_answer"  # ends the run: never counted or refused
_UNNAMED = itertools.count(1)


class ToolCallRefused(Exception):  # the name the model reads in a CodeAgent's error
    """A CodeAgent's refused tool call: the snippet stops, the model reads the text."""


class CircuitBreakerStop(AgentError):  # type: ignore[misc]
    """Raised from a guarded agent's `run` when the breaker stopped it; `stop_reason` is why."""

    def __init__(self, stop_reason: str, logger: Any) -> None:
        super().__init__(stop_reason, logger)
        self.stop_reason = stop_reason


class CircuitBreakerGuard:
    """Refuses a tool call once its agent loops, as the breaker decides (see SPEC).

    `breaker`: share one breaker (and its store) between agents; default a new in-memory
    breaker built from `config`. `guard(agent)` puts it on an agent and its managed agents.
    """

    def __init__(self, breaker: CircuitBreaker | None = None, *, config: Config | None = None):
        self.breaker = make_breaker(breaker, config, __name__)
        self._stops = PendingStops()

    def guard(self, agent: Any) -> Any:
        """Guard `agent` (a ToolCallingAgent or CodeAgent) and, recursively, its managed
        agents; returns `agent`. Guarding an agent twice changes nothing."""
        if RUN_ATTR not in vars(agent):
            name = agent.name or f"{type(agent).__name__}-{next(_UNNAMED)}"
            setattr(agent, RUN_ATTR, f"smolagents:{name}")
            agent.run = self._run_of(agent, name, agent.run)
            if isinstance(agent, CodeAgent):
                if not isinstance(agent.python_executor, LocalPythonExecutor):
                    # The code, and the tools it calls, run in the remote sandbox.
                    warn("dsh-circuit-breaker: %s runs its code remotely: not guarded", name)
                for tool_name, tool in list(agent.tools.items()):
                    if tool_name != FINAL_ANSWER:
                        agent.tools[tool_name] = GuardedTool(tool, self, agent)
            elif isinstance(agent, ToolCallingAgent):
                agent.execute_tool_call = self._execute_of(agent, agent.execute_tool_call)
        for member in (agent.managed_agents or {}).values():
            self.guard(member)
        return agent

    def call(
        self,
        agent: Any,
        tool: str,
        arguments: Any,
        run: Callable[[], Any],
        refused: Callable[[Decision], Any],
    ) -> Any:
        """One call of `agent`'s current run: `run()` it if the breaker allows it (its
        result observed, docs/results.md), or if the guard's own step failed (fail open);
        else what `refused(decision)` gives."""
        call = self._call(agent, tool, arguments)
        if call is None:
            return run()
        decision = self.breaker.check(*call)
        if decision.allowed:
            return run_observed(self.breaker, call, run, str)
        if decision.stop:
            self._stops.add(call[0], decision)
            agent.interrupt()  # smolagents ends the run before its next model request
        return refused(decision)

    def _call(self, agent: Any, tool: str, arguments: Any) -> CheckedCall | None:
        try:
            return getattr(agent, RUN_ATTR), tool, model_arguments(arguments)
        except Exception:
            warn_allowed("smolagents guard")
            return None

    def _execute_of(self, agent: Any, execute: Callable[..., Any]) -> Callable[..., Any]:
        def execute_tool_call(tool_name: str, arguments: Any) -> Any:
            def run() -> Any:
                return execute(tool_name, arguments)

            if tool_name == FINAL_ANSWER:
                return run()
            return self.call(agent, tool_name, arguments, run, refusal_text)

        return execute_tool_call

    def _run_of(self, agent: Any, name: str, run: Callable[..., Any]) -> Callable[..., Any]:
        per_run = self.breaker.config.reset_on_user_prompt

        def guarded_run(*args: Any, **kwargs: Any) -> Any:
            key = (
                f"smolagents:{name}:run:{secrets.token_hex(8)}" if per_run else f"smolagents:{name}"
            )
            outer = getattr(agent, RUN_ATTR)
            setattr(agent, RUN_ATTR, key)
            done = True
            try:
                result = run(*args, **kwargs)
                if isinstance(result, types.GeneratorType):  # run(stream=True): steps to come
                    done = False
                    return self._stream(agent, key, outer, per_run, result)
                return result
            except AgentError as error:
                self._raise_stop(agent, key, error)
                raise
            finally:
                if done:
                    self._end(agent, key, outer, per_run)

        return guarded_run

    def _stream(
        self, agent: Any, key: str, outer: str, per_run: bool, steps: Iterator[Any]
    ) -> Iterator[Any]:
        setattr(agent, RUN_ATTR, key)
        try:
            yield from steps
        except AgentError as error:
            self._raise_stop(agent, key, error)
            raise
        finally:
            self._end(agent, key, outer, per_run)

    def _raise_stop(self, agent: Any, key: str, error: AgentError) -> None:
        """smolagents' interrupt, when the breaker asked for it, becomes the stop with its
        reason; any other error is left to go on as it was."""
        stop = self._stops.take(key)
        if stop is not None and not isinstance(error, CircuitBreakerStop):
            reason = stop.stop_reason or refusal_text(stop)
            raise CircuitBreakerStop(reason, agent.logger) from error

    def _end(self, agent: Any, key: str, outer: str, per_run: bool) -> None:
        setattr(agent, RUN_ATTR, outer)
        self._stops.take(key)  # a stop the run ended before acting on
        if per_run:  # nothing reads a finished run's id again
            safe_reset(self.breaker, key)


class GuardedTool:
    """A CodeAgent's tool with the breaker in front: the agent's code calls it as it would
    call the tool (everything else, such as its prompt text, is the tool's own)."""

    def __init__(self, tool: Any, guard: CircuitBreakerGuard, agent: Any) -> None:
        self.tool = tool
        self._guard = guard
        self._agent = agent

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tool, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        named = dict(zip(self.tool.inputs, args, strict=False)) if args else {}

        def refused(decision: Decision) -> Any:
            raise ToolCallRefused(refusal_text(decision))

        def run() -> Any:
            return self.tool(*args, **kwargs)

        arguments = {**named, **kwargs}
        return self._guard.call(self._agent, self.tool.name, arguments, run, refused)


def guard(
    agent: Any, breaker: CircuitBreaker | None = None, *, config: Config | None = None
) -> Any:
    """Guard a smolagents agent and its managed agents with one new `CircuitBreakerGuard`
    (sharing `breaker`, or a new in-memory one built from `config`); returns `agent`."""
    return CircuitBreakerGuard(breaker, config=config).guard(agent)


def stop_reason(error: BaseException) -> str | None:
    """Why the breaker stopped a run (the error its `run` raised), or None."""
    return error.stop_reason if isinstance(error, CircuitBreakerStop) else None
