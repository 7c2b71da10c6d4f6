"""What every framework adapter shares: building the breaker, checking off the event loop,
reading a tool call's arguments the way the model sent them, reporting an allowed call's
result, and holding a stop until the agent's next model request."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from ..core._log import warn
from ..core.breaker import CircuitBreaker, Decision
from ..core.config import Config
from ..core.stores import MemoryStore, StoreUnavailable

T = TypeVar("T")
CheckedCall = tuple[Any, str, Any]  # (agent, tool, arguments), as the check was asked
# Allowed calls whose result a post-tool hook has not reported yet; past this many, the
# oldest (a result that never came: a crash, a cancel) is forgotten.
KEEP_CALLS = 1024
_UNREADABLE = object()


def make_breaker(
    breaker: CircuitBreaker | None, config: Config | None, module: str = "python"
) -> CircuitBreaker:
    """The breaker an adapter uses: the one given, or a new in-memory one with `config`,
    named in exported telemetry after the adapter's `module` (`__name__`)."""
    if breaker is not None:
        if config is not None:
            raise TypeError("pass either breaker= or config=, not both")
        return breaker
    return CircuitBreaker(config, harness=module.rpartition(".")[2].replace("_", "-"))


async def acheck(breaker: CircuitBreaker, agent: Any, tool: str, arguments: Any) -> Decision:
    """`breaker.check` for async hooks. The memory store answers in microseconds, so it runs
    inline; a persistent store may wait up to `store_timeout` on I/O, so it runs in a worker
    thread rather than stall every other task on the event loop."""
    if isinstance(breaker.store, MemoryStore):
        return breaker.check(agent, tool, arguments)
    return await asyncio.to_thread(breaker.check, agent, tool, arguments)


async def areset(breaker: CircuitBreaker, agent: Any) -> None:
    """`safe_reset` for async hooks, off the event loop for a persistent store."""
    if isinstance(breaker.store, MemoryStore):
        safe_reset(breaker, agent)
    else:
        await asyncio.to_thread(safe_reset, breaker, agent)


async def aobserve(
    breaker: CircuitBreaker, agent: Any, tool: str, arguments: Any, result: Any
) -> None:
    """`breaker.observe` for async hooks, off the event loop for a persistent store (as
    `acheck`); nothing at all unless the config observes results."""
    if not breaker.config.observes_results:
        return
    if isinstance(breaker.store, MemoryStore):
        breaker.observe(agent, tool, arguments, result)
    else:
        await asyncio.to_thread(breaker.observe, agent, tool, arguments, result)


def error_text(error: BaseException) -> str:
    """A tool's raised error as the result it becomes: its text, else its type's name."""
    return str(error) or type(error).__name__


def _result(result_of: Callable[[T], Any], value: T) -> Any:
    try:
        return result_of(value)
    except Exception:
        warn("dsh-circuit-breaker: unreadable tool result, not recorded", exc_info=True)
        return _UNREADABLE


def run_observed(
    breaker: CircuitBreaker,
    call: CheckedCall,
    run: Callable[[], T],
    result_of: Callable[[T], Any] = lambda value: value,
) -> T:
    """For a wrapper around an allowed call: `run()` it and observe `result_of` its value
    (or a raised error's text, which the framework makes the result) against `call`, the
    check's (agent, tool, arguments). Returns or raises what `run` did."""
    if not breaker.config.observes_results:
        return run()
    try:
        value = run()
    except Exception as exc:
        breaker.observe(*call, error_text(exc))
        raise
    result = _result(result_of, value)
    if result is not _UNREADABLE:
        breaker.observe(*call, result)
    return value


async def arun_observed(
    breaker: CircuitBreaker,
    call: CheckedCall,
    run: Awaitable[T],
    result_of: Callable[[T], Any] = lambda value: value,
) -> T:
    """`run_observed` for async wrappers: awaits `run`."""
    if not breaker.config.observes_results:
        return await run
    try:
        value = await run
    except Exception as exc:
        await aobserve(breaker, *call, error_text(exc))
        raise
    result = _result(result_of, value)
    if result is not _UNREADABLE:
        await aobserve(breaker, *call, result)
    return value


class RanCalls:
    """For frameworks whose result arrives in a hook of its own: the calls the pre-tool
    hook let through, by the framework's call id, until the post-tool hook reports their
    result. The result is observed against exactly the check's agent, tool and arguments,
    and a refused call, never added, is never observed."""

    def __init__(self, breaker: CircuitBreaker, keep: int = KEEP_CALLS) -> None:
        self.breaker = breaker
        self.keep = keep
        self._calls: OrderedDict[Hashable, CheckedCall] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, call_id: Hashable, call: CheckedCall, decision: Decision) -> None:
        """After the check: remember an allowed `call` (agent, tool, arguments)."""
        if not decision.allowed or not self.breaker.config.observes_results:
            return
        with self._lock:
            self._calls[call_id] = call
            if len(self._calls) > self.keep:
                self._calls.popitem(last=False)

    async def observe(self, call_id: Hashable, result: Any) -> None:
        """In the post-tool hook: observe `result` for the call `add`ed under `call_id`."""
        call = self._take(call_id)
        if call is not None:
            await aobserve(self.breaker, *call, result)

    def observe_sync(self, call_id: Hashable, result: Any) -> None:
        """`observe` for a framework whose post-tool hook is not a coroutine."""
        call = self._take(call_id)
        if call is not None:
            self.breaker.observe(*call, result)

    def _take(self, call_id: Hashable) -> CheckedCall | None:
        if not self._calls:  # off, or no allowed call outstanding: no lock
            return None
        with self._lock:
            return self._calls.pop(call_id, None)


def refusal_text(decision: Decision) -> str:
    """What the model gets for a refused call: the breaker's text (never empty, as a
    framework may take an empty result for success)."""
    return decision.message or "Circuit breaker: NOT run."


def warn_allowed(where: str) -> None:
    """An adapter's own step failed (a user's agent_id function, odd harness input): the
    call goes ahead, as SPEC's fail-open rule asks, and the error is logged once."""
    warn("dsh-circuit-breaker: %s failed, call allowed", where, exc_info=True)


def safe_reset(breaker: CircuitBreaker, agent: Any) -> None:
    """`breaker.reset` that never raises into the host (fail open)."""
    try:
        breaker.reset(agent)
    except StoreUnavailable as exc:  # an outage, not a bug: one line, no traceback
        warn("dsh-circuit-breaker: could not reset agent state: state store unavailable (%s)", exc)
    except Exception:
        warn("dsh-circuit-breaker: could not reset agent state", exc_info=True)


def model_arguments(raw: Any) -> Any:
    """A call's arguments as the model sent them: a JSON string is parsed; one that does not
    parse stays the raw string, which SPEC makes the comparable value; None means no arguments."""
    if raw is None:
        return {}
    if isinstance(raw, (str, bytes)):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if not text.strip():
            return {}
        try:
            return json.loads(text)
        except ValueError:
            return text
    return raw


class PendingStops:
    """Stops decided at a tool call, acted on before the agent's next model request.

    The refused call is answered first (its refusal lands in the history like any other),
    so a stopped run leaves a complete transcript that a later run can continue; and no
    model request follows it, which is what a stop saves. A run's end calls `take` too, to
    drop a stop it left (a run can end between a tool call and the next model request).
    """

    def __init__(self) -> None:
        self._stops: dict[Any, Decision] = {}
        self._lock = threading.Lock()

    def add(self, agent: Any, decision: Decision) -> None:
        if decision.stop:
            with self._lock:
                self._stops[agent] = decision

    def take(self, agent: Any) -> Decision | None:
        if not self._stops:  # the common case, without a lock
            return None
        with self._lock:
            return self._stops.pop(agent, None)


class RecentAgents:
    """The per-run agent ids an adapter made, for frameworks with no hook at a run's end.

    Each new run (a new user prompt) gets a new id, so a finished run's state would stay in
    the store for the process's life; past `keep` ids, `touch` hands back the least
    recently active one for the adapter to reset (a finished run, in practice).
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def touch(self, agent: str) -> str | None:
        with self._lock:
            self._ids[agent] = None
            self._ids.move_to_end(agent)
            return self._ids.popitem(last=False)[0] if len(self._ids) > self.keep else None
