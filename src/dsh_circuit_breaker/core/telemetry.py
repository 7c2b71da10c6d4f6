"""OpenTelemetry export, for an operator who already runs a collector
(docs/observability.md): every refusal and stop is one `gen_ai.guardrail.result` event,
and a resident process (HTTP guard, MCP relay, framework integration) also exports its
decision metrics.

Off unless the operator turns it on the standard way: an OTLP endpoint in
`OTEL_EXPORTER_OTLP_ENDPOINT` (or the per-signal `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` /
`_METRICS_ENDPOINT`), not undone by `OTEL_SDK_DISABLED=true` or `OTEL_LOGS_EXPORTER=none`
(`OTEL_METRICS_EXPORTER=none`). This module needs only `os`: the SDK (the `otel` extra,
`_otel.py`) is imported when there is something to export, so a command hook's allowed
call never loads it.

The event follows the OpenTelemetry GenAI semantic conventions' guardrail text
(open-telemetry/semantic-conventions-genai, docs/gen-ai/gen-ai-guardrails.md at commit
f5e3733b, unreleased, status Development): a dedicated in-process guardrail emits
`gen_ai.guardrail.result` events without a span. Argument and result contents are never
exported (the conventions' `gen_ai.guardrail.content.*` are opt-in; we never opt in).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    from .breaker import Decision
    from .config import Config

    class Meters(Protocol):
        """A resident process's decision metrics (`_otel.Meters`)."""

        def clock(self) -> float: ...
        def track_agents(self, count: Callable[[], int | None]) -> None: ...
        def decided(self, harness: str, decision: Decision, started: float) -> None: ...


# The config key behind each kind of refusal: the rule an operator would change.
RULES = {
    "duplicate": "duplicateLimit",
    "cap": "maxCallsPerAgent",
    "budget": "toolLimits",
    "unavailable": "failClosed",
}
# Low-cardinality and free of any call's content, as the conventions ask of a reason.
REASONS = {
    "duplicate": "repeated call with nothing new in between",
    "cap": "calls per agent capped",
    "budget": "tool budget spent",
    "unavailable": "state store unreachable (failClosed)",
}
MAX_TEXT = 256  # characters of a name or id an event carries
# The longest export a decision may wait for: the store's own bound, and never long.
MAX_EXPORT_SECONDS = 0.5


def enabled(signal: str) -> bool:
    """Whether the operator asked for `signal` ("LOGS" or "METRICS") over OTLP."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get(f"OTEL_{signal}_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def export_seconds(config: Config) -> float:
    return min(config.store_timeout, MAX_EXPORT_SECONDS)


def refused(
    harness: str,
    agent: Any,
    tool: str,
    call_id: str | None,
    decision: Decision,
    denials: int,
    config: Config,
) -> None:
    """Export one refusal (a stop when `decision.stop`); never raises, never waits on the
    collector (a command hook waits, bounded, in `flush` before it exits)."""
    if not enabled("LOGS"):
        return
    sdk = _sdk()
    if sdk is None:
        return
    try:
        events = sdk.events(export_seconds(config))
        events.emit(attributes(harness, agent, tool, call_id, decision, denials, config))
    except Exception:
        from ._log import warn

        warn("dsh-circuit-breaker: OpenTelemetry event not exported", exc_info=True)


def attributes(
    harness: str,
    agent: Any,
    tool: str,
    call_id: str | None,
    decision: Decision,
    denials: int,
    config: Config,
) -> dict[str, str | int]:
    """The event's attributes: who, which tool, which rule, how far. Nothing of the call's
    arguments or results."""
    from .._version import COMPONENT
    from .identity import agent_id

    kind = decision.kind or ""
    found: dict[str, str | int] = {
        "gen_ai.guardrail.component.name": COMPONENT,
        "gen_ai.guardrail.source": "tool_input",
        "gen_ai.guardrail.result.type": "decision",
        "gen_ai.guardrail.result.value": "stop" if decision.stop else "deny",
        "gen_ai.guardrail.result.reason": REASONS.get(kind, kind),
        "gen_ai.guardrail.policy.id": kind,
        "gen_ai.guardrail.policy.rule.id": RULES.get(kind, kind),
        "gen_ai.tool.name": tool,
        "dsh_circuit_breaker.harness": harness,
        "dsh_circuit_breaker.kind": kind,
        "dsh_circuit_breaker.count": decision.count,
        "dsh_circuit_breaker.limit": decision.limit,
        "dsh_circuit_breaker.denials": denials,
        "dsh_circuit_breaker.stop_after_denials": config.stop_after_denials,
    }
    if isinstance(call_id, str) and call_id:
        found["gen_ai.tool.call.id"] = call_id
    who = agent_id(agent)
    if who is not None:
        # A hook's agent key is its session, or session/subagent inside a subagent.
        found["gen_ai.agent.id"] = who
        found["gen_ai.conversation.id"] = who.partition("/")[0]
    # Names and ids come from harnesses and plugins: none may make an event large.
    return {k: v[:MAX_TEXT] if isinstance(v, str) else v for k, v in found.items()}


def meters() -> Meters | None:
    """A resident process's decision metrics, when the operator asked for them."""
    if not enabled("METRICS"):
        return None
    sdk = _sdk()
    if sdk is None:
        return None
    try:
        found: Meters = sdk.meters(MAX_EXPORT_SECONDS)
        return found
    except Exception:
        from ._log import warn

        warn("dsh-circuit-breaker: OpenTelemetry metrics not exported", exc_info=True)
        return None


_missing: list[str] = []


def _sdk() -> Any:
    """`_otel`, or None (said once) where the `otel` extra is not installed."""
    try:
        from . import _otel
    except ImportError as exc:
        if not _missing:
            _missing.append(str(exc))
            from ._log import warn

            warn(
                "dsh-circuit-breaker: OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is"
                " not installed (%s); nothing exported",
                exc,
            )
        return None
    return _otel
