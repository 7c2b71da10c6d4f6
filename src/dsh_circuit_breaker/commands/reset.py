"""`dsh-circuit-breaker reset AGENT...`: forget agents' state in the hook's store, so that a
capped or tripped agent (a subagent, whose session no user prompt resets) runs again at
once rather than after `idleExpirySeconds`."""

from __future__ import annotations

import argparse

from ..display import plural, printable
from ..usage import FAILED, error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..state import AgentState
    from ..stores.base import Store

SUGGESTED = 5  # similar stored ids named for an id that is not in the store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "agents",
        nargs="+",
        metavar="AGENT",
        help="agent id as `status` lists it (a subagent: SESSION/AGENT_ID)",
    )
    parser.add_argument("--config", metavar="FILE", help="config file (as the hook reads it)")
    parser.add_argument("--state", metavar="URL", help="state URL (as the hook uses it)")


def run(args: argparse.Namespace) -> int:
    from ._state import open_state
    from .status import describe

    wanted: list[str] = list(dict.fromkeys(args.agents))
    config, url, store = open_state(args.config, args.state)
    try:
        found, similar = forget(store, wanted)
    finally:
        store.close()
    for agent in wanted:
        name = printable(agent)
        if agent not in found:
            others = ", ".join(repr(printable(other)) for other in similar[agent])
            hint = (
                f"did you mean {others}?" if others else "`dsh-circuit-breaker status` lists them"
            )
            error(f"no agent {name!r} in {url}: nothing reset ({hint})", FAILED)
            continue
        state = found[agent]
        if state is None:
            print(f"reset {name}: its unreadable record is removed")
            continue
        row = describe(agent, state, config)
        tripped = " and ".join(row["tripped"]) or "nothing"
        print(
            f"reset {name}: forgot {plural(row['calls'], 'call')} (tripped: {tripped}); "
            "its next call starts afresh"
        )
    return FAILED if len(found) < len(wanted) else 0


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
