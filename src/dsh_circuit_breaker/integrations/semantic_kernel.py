"""Semantic Kernel: the breaker as an auto function invocation filter, keyed per agent run.

    from dsh_circuit_breaker.integrations.semantic_kernel import guard, stop_reason

    agent = ChatCompletionAgent(service=..., name="researcher", plugins=[...])
    guard(agent)  # or guard(kernel), guard([agent, other]), guard(AgentGroupChat(...))
    response = await agent.get_response(messages="...")

Semantic Kernel runs every function call the model asks for through the kernel's
`AUTO_FUNCTION_INVOCATION` filters; the breaker's filter is asked first (outermost). A
refused call never reaches `next`: the filter sets `context.function_result` to a
`FunctionResult` holding the breaker's text, which the kernel sends as that call's result.
An allowed call's result (its value, or the text Semantic Kernel makes of a raised error)
is reported to the breaker as its result (docs/results.md).

When the breaker stops the agent, the filter sets the same result and `context.terminate
= True`, Semantic Kernel's own way to end the function-calling loop: no model request
follows, and the call's answer comes back as the response (a `tool` message), the stop
reason in its function result's metadata, which `stop_reason(response)` reads.

Which agent a call belongs to: the agent (by the name it was guarded under) in one run.
Semantic Kernel hands each agent invocation (`get_response`, `invoke`, a group chat turn)
a chat history of its own: each is a run, its state dropped when that history goes. A
chat history a program keeps and calls the chat service with turn after turn starts a new
run at each new user message.
"""

from __future__ import annotations

import secrets
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from semantic_kernel import Kernel
from semantic_kernel.contents.utils.author_role import AuthorRole
from semantic_kernel.filters import AutoFunctionInvocationContext, FilterTypes
from semantic_kernel.functions import FunctionResult

from ..core.breaker import CircuitBreaker, Decision
from ..core.config import Config
from ._common import (
    acheck,
    arun_observed,
    make_breaker,
    model_arguments,
    refusal_text,
    safe_reset,
    warn_allowed,
)

STOP_KEY = "circuit_breaker_stop"  # in a stopped call's FunctionResult(Content).metadata
AUTO = FilterTypes.AUTO_FUNCTION_INVOCATION
Next = Callable[[AutoFunctionInvocationContext], Awaitable[None]]


class SemanticKernelCircuitBreaker:
    """The breaker, and the runs it has seen, that the guarded kernels' filters share.
    `breaker`: share one breaker (and its store); default a new in-memory breaker built
    from `config`."""

    def __init__(self, breaker: CircuitBreaker | None = None, *, config: Config | None = None):
        self.breaker = make_breaker(breaker, config, __name__)
        self._runs: dict[int, tuple[int, str]] = {}  # id(history) -> (user messages, key)
        self._lock = threading.Lock()

    def add_to(self, kernel: Kernel, name: str = "kernel") -> SemanticKernelCircuitBreaker:
        """Put the breaker's filter on `kernel`, its calls counted as agent `name`'s. A
        kernel this breaker already guards is left as it is."""
        filters = kernel.auto_function_invocation_filters
        if any(isinstance(f, CircuitBreakerFilter) and f.guard is self for _, f in filters):
            return self
        kernel.add_filter(AUTO, CircuitBreakerFilter(self, name))
        # add_filter puts it first in the list, which makes it the innermost filter: the
        # last in the list is called first, so no other filter runs a refused call.
        filters.append(filters.pop(0))
        return self

    def agent_id(self, name: str, history: Any) -> str:
        """One agent = `name` in one chat history, from its latest user message on (or,
        with `reset_on_user_prompt=False` or no history, `name` for the breaker's life)."""
        if history is None or not self.breaker.config.reset_on_user_prompt:
            return f"semantic-kernel:{name}"
        users = sum(1 for m in history.messages if m.role == AuthorRole.USER)
        with self._lock:
            seen = self._runs.get(id(history))
            if seen is not None and seen[0] == users:
                return seen[1]
            key = f"semantic-kernel:{name}:run:{secrets.token_hex(8)}"
            self._runs[id(history)] = (users, key)
        if seen is None:
            weakref.finalize(history, self._ended, id(history))
        else:  # a new user message: the history's previous run is over
            safe_reset(self.breaker, seen[1])
        return key

    def _ended(self, history_id: int) -> None:
        """The history of a run is gone (an agent invocation returned): so is its state."""
        with self._lock:
            seen = self._runs.pop(history_id, None)
        if seen is not None:
            safe_reset(self.breaker, seen[1])


class CircuitBreakerFilter:
    """The `AUTO_FUNCTION_INVOCATION` filter: refuses a function call once its agent loops,
    as the breaker decides (see SPEC)."""

    def __init__(self, guard: SemanticKernelCircuitBreaker, name: str) -> None:
        self.guard = guard
        self.name = name

    def __deepcopy__(self, memo: dict[int, Any]) -> CircuitBreakerFilter:
        # Kernel.clone() deep-copies its filters (an orchestration clones each agent's
        # kernel): the clone is the same agent, so it shares this breaker, not a copy.
        return self

    async def __call__(self, context: AutoFunctionInvocationContext, next: Next) -> None:
        breaker = self.guard.breaker
        try:
            agent = self.guard.agent_id(self.name, context.chat_history)
            tool = str(context.function.name)
            arguments = _arguments(context)
        except Exception:
            warn_allowed("semantic-kernel auto function invocation filter")
            await next(context)
            return
        decision = await acheck(breaker, agent, tool, arguments)
        if decision.allowed:
            call = (agent, tool, arguments)
            await arun_observed(breaker, call, next(context), lambda _: _value(context))
            return
        context.function_result = _refusal(context, decision)
        if decision.stop:
            context.terminate = True


def _refusal(context: AutoFunctionInvocationContext, decision: Decision) -> FunctionResult:
    metadata = {STOP_KEY: decision.stop_reason} if decision.stop else {}
    return FunctionResult(
        function=context.function.metadata, value=refusal_text(decision), metadata=metadata
    )


def _arguments(context: AutoFunctionInvocationContext) -> Any:
    """The arguments as the model sent them: the call's own (a JSON string, or a mapping),
    not the kernel arguments they were merged into."""
    call = context.function_call_content
    if call is not None:
        return model_arguments(call.arguments)
    return model_arguments(dict(context.arguments or {}))


def _value(context: AutoFunctionInvocationContext) -> Any:
    """A function's result as the model reads it: Semantic Kernel sends `str(value)`."""
    value = context.function_result.value if context.function_result is not None else None
    return value if isinstance(value, str) else str(value)


def guard(
    target: Any, guard: SemanticKernelCircuitBreaker | None = None, *, name: str | None = None
) -> SemanticKernelCircuitBreaker:
    """Put the breaker on a `Kernel`, on an agent's kernel (`ChatCompletionAgent`, ...), on
    every agent of an `AgentGroupChat`, or on each of a list of these. An agent's calls count
    as its `name`'s; a bare kernel's as `name` (default "kernel"). Returns the shared
    `SemanticKernelCircuitBreaker` (default a new one)."""
    guard = guard or SemanticKernelCircuitBreaker()
    for item in _targets(target):
        if isinstance(item, Kernel):
            guard.add_to(item, name or "kernel")
        else:
            guard.add_to(item.kernel, name or str(getattr(item, "name", None) or "agent"))
    return guard


def _targets(target: Any) -> Iterable[Any]:
    if isinstance(target, (list, tuple)):
        for item in target:
            yield from _targets(item)
    elif not isinstance(target, Kernel) and isinstance(getattr(target, "agents", None), list):
        yield from _targets(target.agents)
    else:
        yield target


def stop_reason(response: Any) -> str | None:
    """Why the breaker stopped this run, or None: `response` an agent's response
    (`AgentResponseItem`), a `ChatMessageContent`, or a list of them (what a chat service's
    `get_chat_message_contents` returns)."""
    if isinstance(response, (list, tuple)):
        return next((r for r in map(stop_reason, response) if r is not None), None)
    message = getattr(response, "message", response)
    for item in getattr(message, "items", None) or []:
        reason = (getattr(item, "metadata", None) or {}).get(STOP_KEY)
        if isinstance(reason, str):
            return reason
    return None
