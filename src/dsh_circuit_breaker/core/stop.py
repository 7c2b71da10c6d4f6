"""AgentStopped: how a framework integration ends a run that the breaker stopped."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .breaker import Decision


class AgentStopped(Exception):
    """The breaker stopped an agent: its tool calls were refused `stopAfterDenials` times in
    a row, so it no longer reads the refusals. The framework integrations raise it out of
    the framework's own run call (`invoke`, `Runner.run`, `agent.run`, ...; see each
    integration's doc); the refused call did not run.

    `decision`: the refusal that stopped the agent (`decision.message` is the text the model
    was, or would have been, sent). `reason`: why it was stopped, for the person who reads
    it (`decision.stop_reason`, also the exception's text). `agent`: the id the breaker
    keyed the agent by, where the integration knows one.
    """

    decision: Decision
    reason: str
    agent: str | None

    def __init__(self, decision: Decision, agent: str | None = None) -> None:
        reason = decision.stop_reason or "Circuit breaker: this agent is being stopped."
        super().__init__(reason)
        self.decision = decision
        self.reason = reason
        self.agent = agent

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable with its fields (a process pool hands exceptions back to its parent).
        return (type(self), (self.decision, self.agent))
