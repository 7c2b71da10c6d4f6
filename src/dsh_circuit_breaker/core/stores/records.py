"""Reading an agent's stored record in a decision. One that cannot be read (a corrupt
row, a key of another type, a newer version's format) is that agent's problem alone: it
starts afresh, with a warning, and its next write replaces the record, so the agent is
not left unguarded for good."""

from __future__ import annotations

from .._log import warn
from ..state import AgentState


def load_record(raw: bytes | str | None, agent: str, where: str) -> AgentState:
    """The state in `raw` (None: no record yet), or a fresh one if `raw` is unreadable."""
    if raw is None:
        return AgentState()
    state = AgentState.readable(raw)
    if state is None:
        unreadable(agent, where, "not a record this version can read")
        return AgentState()
    return state


def unreadable(agent: str, where: str, why: str) -> None:
    warn(
        "dsh-circuit-breaker: unreadable state record of agent %.200r in %s (%.200s); "
        "the agent starts afresh and its record is replaced",
        agent,
        where,
        why,
    )
