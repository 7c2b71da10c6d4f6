"""What a supervisor reads and does about the agents in a state store: each one's standing
against the limits (`status`, the live page) and forgetting some (`reset`, the page's
reset button). Below both the commands and the guard, which share it."""

from __future__ import annotations

from typing import Any

from .core.config import Config
from .core.state import AgentState
from .core.stores.base import Store

SUGGESTED = 5  # similar stored ids named for an id that is not in the store


def describe(agent: str, state: Any, config: Config) -> dict[str, Any]:
    """One agent's standing: calls against the cap, its most repeated call against the
    duplicate limit (counted as the rules count it), its budgets, its refusals in a row
    against stopAfterDenials, and what has tripped (`stop`: its next refusal stops it)."""
    copies = state.since if config.reset_on_new_call else state.counts
    top = max(copies.values(), default=0)
    cap = config.max_calls_per_agent
    tripped = []
    if cap and state.calls >= cap:
        tripped.append("cap")
    if top + 1 >= config.duplicate_limit:  # its next copy is the limit-th: refused
        tripped.append("duplicate")
    budgets = {
        pattern: {"spent": state.spent.get(pattern, 0), "limit": limit}
        for pattern, limit in config.tool_limits.items()
    }
    if any(b["spent"] >= b["limit"] for b in budgets.values()):
        tripped.append("budget")
    stop = config.stop_after_denials
    if stop and state.denials >= stop:
        tripped.append("stop")
    return {
        "agent": agent,
        "calls": state.calls,
        "cap": cap,
        "topRepeat": top,
        "duplicateLimit": config.duplicate_limit,
        "budgets": budgets,
        "denialsInARow": state.denials,
        "stopAfterDenials": stop,
        "tripped": tripped,
        "reported": sorted(state.reported),
        "updated": state.updated,
    }


def forget(
    store: Store, wanted: list[str]
) -> tuple[dict[str, AgentState | None], dict[str, list[str]]]:
    """Reset each wanted agent that `store` holds. Returns the state each one had (None:
    an unreadable record, removed as well) and, for each wanted id, stored ids that
    resemble it (for one that is not in the store)."""
    found: dict[str, AgentState | None] = {}
    similar: dict[str, list[str]] = {agent: [] for agent in wanted}
    for agent, state in store.agents():
        if agent in similar:
            found[agent] = state
        else:
            _note_similar(agent, similar)
    for agent in found:
        store.reset(agent)
    return found, similar


def _note_similar(stored: str, similar: dict[str, list[str]]) -> None:
    """Remember `stored` for each wanted id it resembles: it contains that id, or ends in
    the same subagent id (`SESSION/AGENT_ID` given as `AGENT_ID`, or under another session)."""
    for agent, names in similar.items():
        tail = agent.rsplit("/", 1)[-1]
        if len(names) < SUGGESTED and (agent in stored or stored.endswith("/" + tail)):
            names.append(stored)
