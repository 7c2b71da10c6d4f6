"""`dsh-circuit-breaker reset AGENT...`: forget agents' state in the hook's store, so that a
capped or tripped agent (a subagent, whose session no user prompt resets) runs again at
once rather than after `idleExpirySeconds`."""

from __future__ import annotations

import argparse

from ..agents import describe, forget
from ..core.display import plural, printable
from ..usage import FAILED, error
from ._state import open_state


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
