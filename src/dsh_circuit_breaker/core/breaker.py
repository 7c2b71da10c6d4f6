"""CircuitBreaker: the one entry point every integration calls before a tool runs."""

from __future__ import annotations

import _thread

from ._log import warn
from .config import Config
from .keys import call_key
from .rules import Refusal, decide, observe
from .stores import StoreUnavailable, store_from_url

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .identity import ObjectKeys
    from .rules import Verdict
    from .state import AgentState
    from .stores.base import Store
    from .telemetry import Meters


class Decision:
    """The breaker's answer for one call. When denied, `message` is the model's tool result.

    `kind`: None, "duplicate", "cap" or "budget" ("unavailable" only with failClosed).
    `count`: copies of this call counted (duplicate), calls made (cap) or calls made under
    the budget (budget); `limit`: the limit hit. `stop`: the agent has been refused
    `stopAfterDenials` calls in a row, so the harness should end it (always False when
    allowed); `stop_reason` then says why, for the person who reads it.
    """

    __slots__ = ("allowed", "count", "kind", "limit", "message", "stop", "stop_reason")

    allowed: bool
    kind: str | None
    message: str | None
    count: int
    limit: int
    stop: bool
    stop_reason: str | None

    def __init__(
        self,
        allowed: bool,
        kind: str | None = None,
        message: str | None = None,
        count: int = 0,
        limit: int = 0,
        stop: bool = False,
        stop_reason: str | None = None,
    ) -> None:
        values = (allowed, count, kind, limit, message, stop, stop_reason)
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Decision is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        # Immutable slots defeat pickle's default; AgentStopped carries one across processes.
        args = (self.allowed, self.kind, self.message, self.count, self.limit, self.stop)
        return (Decision, (*args, self.stop_reason))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Decision):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, n) for n in self.__slots__))

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"Decision({fields})"


ALLOW = Decision(True)
_FIRST_OBJECT = _thread.allocate_lock()


class CircuitBreaker:
    """Decides allow or deny for each tool call of each agent, per SPEC.

    `state` is a Store or a state URL (`memory://` by default). `check` never raises:
    an internal error allows the call and logs a warning.
    """

    def __init__(
        self,
        config: Config | None = None,
        state: Store | str | None = None,
        *,
        harness: str = "python",
        export: bool = True,
        metrics: bool = True,
    ) -> None:
        """`harness` names the transport in exported telemetry; `export`: refusals and
        stops go to OpenTelemetry when the operator set it up (telemetry.py); `metrics`:
        this process also exports decision metrics (a resident one: not a command hook,
        which would export one call's worth and exit)."""
        self.config = config or Config()
        self.harness = harness
        self._export = export
        # Only a breaker that exports looks: the command hook (metrics=False) imports nothing.
        self._meters: Meters | None = None
        if export and metrics:
            from .telemetry import meters

            self._meters = meters()
        if state is None:
            from .stores.memory import MemoryStore  # not at the top: a hook never uses it

            state = MemoryStore()
        elif isinstance(state, str):
            state = store_from_url(state, self.config)
        self.store: Store = state
        self._ignore = frozenset(self.config.ignore_args)
        # None without toolLimits: the common case then skips the budget lookup entirely.
        self._budgets = self.config.budgets if self.config.tool_limits else None
        self._objects: ObjectKeys | None = None  # built on the first agent object
        # Allowed decisions differ only in their count: build the common ones once, not
        # per call (and not per possible count: start-up must not grow with the limit).
        limit = self.config.duplicate_limit
        self._allowed = [Decision(True, None, None, n, limit) for n in range(min(limit, 64) + 1)]

    def check(self, agent: Any, tool: str, arguments: Any, call_id: str | None = None) -> Decision:
        """Allow or deny one call of `tool` with `arguments` by `agent` (an object or an id);
        `call_id`, the harness's id for the call, only labels exported telemetry."""
        if self._meters is None:
            return self._check(agent, tool, arguments, call_id)
        started = self._meters.clock()
        decision = self._check(agent, tool, arguments, call_id)
        self._meters.decided(self.harness, decision, started)
        return decision

    def _check(self, agent: Any, tool: str, arguments: Any, call_id: str | None) -> Decision:
        config = self.config
        try:
            if not config.enabled or not isinstance(tool, str) or not config.guards(tool):
                return ALLOW  # a tool name that is not a string: malformed, never judged
            key = call_key(tool, arguments, self._ignore)
            if key is None:
                return ALLOW
            budgets = self._budgets(tool) if self._budgets is not None else ()

            def step(state: AgentState) -> Verdict:
                return decide(state, key, config, budgets)

            # A plain ASCII id, the common case, is its own state key: no call for it.
            state_key = agent if type(agent) is str and agent.isascii() else self._state_key(agent)
            verdict = self.store.transact(state_key, step)
            if verdict.kind is None:
                if verdict.seen < len(self._allowed):
                    return self._allowed[verdict.seen]
                return Decision(True, None, None, verdict.seen, verdict.limit)
            assert isinstance(verdict, Refusal)
            if (verdict.first_of_kind or verdict.first_stop) and config.incident_log:
                self._report(agent, tool, verdict, config.incident_log)
            decision = self._denial(tool, verdict.kind, verdict.seen, verdict.limit, verdict)
            return self._refused(agent, tool, call_id, decision, verdict.denials)
        except StoreUnavailable as exc:
            warn("dsh-circuit-breaker: state store unavailable (%s)", exc)
            if config.fail_closed:
                return self._refused(agent, tool, call_id, self._denial(tool, "unavailable", 0, 0))
            return ALLOW
        except Exception:
            warn("dsh-circuit-breaker: internal error, call allowed", exc_info=True)
            return ALLOW

    def _refused(
        self, agent: Any, tool: str, call_id: str | None, decision: Decision, denials: int = 0
    ) -> Decision:
        if self._export:
            # Every transport's refusals pass here, and only refusals: an allowed call
            # never imports the exporter.
            from .telemetry import refused

            refused(self.harness, agent, tool, call_id, decision, denials, self.config)
        return decision

    def observe(self, agent: Any, tool: str, arguments: Any, result: Any) -> None:
        """Report what an allowed call of `tool` with `arguments` returned (text, or any
        JSON value), where the harness says. Only its normalized digest is kept, and only
        with `resultProgress` or `sameResultLimit` set. Never raises."""
        if not self.config.observes_results:
            return
        try:
            from .results import result_digest  # only where results are observed

            digest = result_digest(result)
        except Exception:
            warn("dsh-circuit-breaker: internal error, result not recorded", exc_info=True)
            return
        self.observe_digest(agent, tool, arguments, digest)

    def observe_digest(self, agent: Any, tool: str, arguments: Any, digest: bytes) -> None:
        """`observe` with the result already digested (`results.result_digest`): replay
        digests each recorded result once for all the configs it compares."""
        config = self.config
        try:
            if not config.observes_results or not config.enabled:
                return
            if not isinstance(tool, str) or not config.guards(tool):
                return
            key = call_key(tool, arguments, self._ignore)
            if key is None:
                return

            def step(state: AgentState) -> None:
                observe(state, key, digest, config)

            self.store.transact(self._state_key(agent), step)
        except StoreUnavailable as exc:
            warn("dsh-circuit-breaker: state store unavailable (%s)", exc)
        except Exception:
            warn("dsh-circuit-breaker: internal error, result not recorded", exc_info=True)

    def reset(self, agent: Any) -> None:
        """Forget one agent's state: a fresh window and call count."""
        self.store.reset(self._state_key(agent))

    def close(self) -> None:
        self.store.close()

    def _state_key(self, agent: Any) -> str:
        key = agent if isinstance(agent, str) else self._object_key(agent)
        return key if key.isascii() else _by_bytes(key)

    def _object_key(self, agent: Any) -> str:
        if self._objects is None:
            # Only agent objects need identity tracking, so a hook (string ids) skips
            # importing it; the lock keeps two first calls from building two maps.
            with _FIRST_OBJECT:
                if self._objects is None:
                    from .identity import ObjectKeys

                    self._objects = ObjectKeys(self._forget_key)
        return self._objects.key(agent)

    def _forget_key(self, state_key: str) -> None:
        try:
            self.store.reset(state_key)
        except Exception:  # runs from a finalizer: must not raise
            warn("dsh-circuit-breaker: could not drop state of %s", state_key, exc_info=True)

    def _denial(
        self, tool: str, kind: str, count: int, limit: int, verdict: Refusal | None = None
    ) -> Decision:
        from .messages import render  # only a denial renders: a hook's allowed call skips it

        config = self.config
        if verdict is not None and verdict.cycle:
            template = config.message_template("cycle")
            text = render(template, tool, kind, count, limit, verdict.cycle)
        else:
            text = render(config.message_template(kind), tool, kind, count, limit)
        if verdict is None or not verdict.stop:
            return Decision(False, kind, text, count, limit)
        template = config.message_template("stop")
        reason = render(template, tool, kind, verdict.denials, config.stop_after_denials)
        return Decision(False, kind, text, count, limit, True, reason)

    def _report(self, agent: Any, tool: str, verdict: Refusal, path: str) -> None:
        assert verdict.kind is not None
        from .identity import agent_label
        from .incidents import append_incident, incident_line

        who = agent_label(agent)
        if self.harness != "python":  # the live page names a command hook's agents by it
            who = {**who, "harness": self.harness}
        if verdict.first_of_kind:
            line = incident_line(verdict.kind, tool, verdict.seen, verdict.limit, who)
            append_incident(path, line)
        if verdict.first_stop:
            limit = self.config.stop_after_denials
            append_incident(path, incident_line("stop", tool, verdict.denials, limit, who))


def _by_bytes(key: str) -> str:
    """`key` as a store can hold it: one with a lone surrogate (malformed UTF-16 from a
    harness's JSON) is judged by its bytes, each one a surrogate stands for written out."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return key.encode("utf-8", "surrogatepass").decode("utf-8", "backslashreplace")
    return key
