"""DSPy: the breaker in front of a ReAct module's tools, keyed per module call.

    from dsh_circuit_breaker.integrations.dspy import guard

    react = guard(dspy.ReAct("question -> answer", tools=[search]))

DSPy has no hook that can refuse a tool call (a callback's `on_tool_start` runs before
each tool, but DSPy logs and swallows whatever it raises), so `guard` replaces each of the
module's tools with a `GuardedTool`, which asks the breaker before the tool runs. A
refused call's result is the breaker's text: ReAct puts it in the trajectory as that
call's observation, and the model reads it in its next request.

When the breaker stops the agent, the tool raises `CircuitBreakerStop`, a BaseException:
ReAct catches `Exception` from a tool (to show the model "Execution error in X: ..."), so
the stop goes past it and ends the module call, with no further model request; the
person calling the module gets the exception, the stop reason its message.

Which agent a call belongs to: a callback on each guarded module marks each of its calls
(a fresh id per call, dropped at its end; or, with `reset_on_user_prompt=False`, one id
per module) in a context variable the tools read. A ReAct called from another's tool (a
subagent) runs under its own mark, and its stop ends only its own call.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from contextvars import ContextVar, Token
from typing import Any

# DSPy ships no type information (no py.typed).
import dspy  # type: ignore[import-untyped]
from dspy.utils.callback import BaseCallback  # type: ignore[import-untyped]
from pydantic import PrivateAttr

from ..core.breaker import CircuitBreaker, Decision
from ..core.config import Config
from ._common import (
    acheck,
    arun_observed,
    make_breaker,
    model_arguments,
    refusal_text,
    run_observed,
    safe_reset,
    warn_allowed,
)

FINISH = "finish"  # ReAct's own tool that ends the loop: never counted or refused
_RUN: ContextVar[str | None] = ContextVar("dsh_circuit_breaker_dspy_run", default=None)
_UNNAMED = itertools.count(1)


class CircuitBreakerStop(BaseException):
    """The breaker stopped an agent: raised from its tool call, past ReAct's `except
    Exception`, out of the module call. `stop_reason` says why; `agent` is its id."""

    def __init__(self, stop_reason: str, agent: str) -> None:
        super().__init__(stop_reason)
        self.stop_reason = stop_reason
        self.agent = agent


class CircuitBreakerRunScope(BaseCallback):  # type: ignore[misc]
    """Marks each call of the guarded module it is a callback of with the breaker id its
    tool calls count against."""

    def __init__(self, breaker: CircuitBreaker, name: str) -> None:
        self.breaker = breaker
        self.name = name
        self._open: dict[str, tuple[Token[str | None], str]] = {}
        self._lock = threading.Lock()

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        key = f"dspy:{self.name}"
        if self.breaker.config.reset_on_user_prompt:  # each call of the module is a new task
            key += f":run:{secrets.token_hex(8)}"
        with self._lock:
            self._open[call_id] = (_RUN.set(key), key)

    def on_module_end(
        self, call_id: str, outputs: Any | None, exception: BaseException | None = None
    ) -> None:
        with self._lock:
            token, key = self._open.pop(call_id)
        _RUN.reset(token)
        if self.breaker.config.reset_on_user_prompt:  # nothing reads a finished call's id
            safe_reset(self.breaker, key)


class GuardedTool(dspy.Tool):  # type: ignore[misc]
    """A tool with the breaker in front; everything else is the tool's own."""

    _breaker: Any = PrivateAttr(default=None)

    @classmethod
    def of(cls, tool: Any, breaker: CircuitBreaker) -> GuardedTool:
        guarded = cls(
            tool.func,
            name=tool.name,
            desc=tool.desc,
            args=tool.args,
            arg_types=tool.arg_types,
            arg_desc=tool.arg_desc,
        )
        guarded._breaker = breaker
        return guarded

    def _key(self, kwargs: dict[str, Any]) -> tuple[str, Any] | None:
        try:
            return _RUN.get() or "dspy:unscoped", model_arguments(kwargs)
        except Exception:
            warn_allowed("dspy tool guard")
            return None

    def __call__(self, **kwargs: Any) -> Any:
        key = self._key(kwargs)
        if key is not None:
            decision = self._breaker.check(key[0], self.name, key[1])
            if not decision.allowed:
                return _refused(decision, key[0])
        run = super().__call__
        try:
            if key is None:
                return run(**kwargs)
            call = (key[0], self.name, key[1])
            return run_observed(self._breaker, call, lambda: run(**kwargs), str)
        except CircuitBreakerStop as stop:
            return _handed_back(stop, key)

    async def acall(self, **kwargs: Any) -> Any:
        key = self._key(kwargs)
        if key is not None:
            decision = await acheck(self._breaker, key[0], self.name, key[1])
            if not decision.allowed:
                return _refused(decision, key[0])
        try:
            if key is None:
                return await super().acall(**kwargs)
            call = (key[0], self.name, key[1])
            return await arun_observed(self._breaker, call, super().acall(**kwargs), str)
        except CircuitBreakerStop as stop:
            return _handed_back(stop, key)


def _refused(decision: Decision, agent: str) -> str:
    if decision.stop:
        raise CircuitBreakerStop(decision.stop_reason or refusal_text(decision), agent)
    return refusal_text(decision)


def _handed_back(stop: CircuitBreakerStop, key: tuple[str, Any] | None) -> str:
    """A subagent stopped inside this tool: its stop ends its own call only, and this
    call's result is the stop reason. The stop of this tool's own agent goes on up."""
    if key is None or stop.agent == key[0]:
        raise stop
    return stop.stop_reason


class CircuitBreakerGuard:
    """Refuses a tool call once its agent loops, as the breaker decides (see SPEC).

    `breaker`: share one breaker (and its store) between modules; default a new in-memory
    breaker built from `config`. `guard(module)` puts it on a ReAct module, or on every
    ReAct among a program's sub-modules.
    """

    def __init__(self, breaker: CircuitBreaker | None = None, *, config: Config | None = None):
        self.breaker = make_breaker(breaker, config, __name__)

    def guard(self, module: Any, name: str | None = None) -> Any:
        """Guard `module` (a ReAct, or a program holding ReAct modules); returns it. Each
        ReAct is an agent named `name` (default "ReAct-<n>"), or, inside a program, by its
        attribute path ("Program.researcher"). Guarding a module again guards only the
        tools added since."""
        if isinstance(module, dspy.ReAct):
            self._guard_react(module, name or f"ReAct-{next(_UNNAMED)}")
            return module
        prefix = name or type(module).__name__
        for path, sub in module.named_sub_modules():
            if isinstance(sub, dspy.ReAct):
                self._guard_react(sub, prefix + path.removeprefix("self"))
        return module

    def _guard_react(self, react: Any, name: str) -> None:
        callbacks = list(getattr(react, "callbacks", None) or [])
        if not any(isinstance(c, CircuitBreakerRunScope) for c in callbacks):
            react.callbacks = [*callbacks, CircuitBreakerRunScope(self.breaker, name)]
        for tool_name, tool in list(react.tools.items()):
            if tool_name != FINISH and not isinstance(tool, GuardedTool):
                react.tools[tool_name] = GuardedTool.of(tool, self.breaker)


def guard(
    module: Any,
    breaker: CircuitBreaker | None = None,
    *,
    config: Config | None = None,
    name: str | None = None,
) -> Any:
    """Guard a DSPy ReAct module (or every ReAct in a program) with one new
    `CircuitBreakerGuard` (sharing `breaker`, or a new in-memory one built from
    `config`); returns `module`."""
    return CircuitBreakerGuard(breaker, config=config).guard(module, name)


def stop_reason(error: BaseException) -> str | None:
    """Why the breaker stopped a module call (the exception it raised), or None."""
    return error.stop_reason if isinstance(error, CircuitBreakerStop) else None
