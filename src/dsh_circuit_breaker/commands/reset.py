"""`dsh-circuit-breaker reset AGENT...`: forget agents' state in the hook's store, so that a
capped or tripped agent (a subagent, whose session no user prompt resets) runs again at
once rather than after `idleExpirySeconds`."""

from __future__ import annotations

import argparse

from ..agents import forget
from ..display import plural, printable


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
    from ..agents import describe
    from ..config import ConfigError
    from ..stores import StoreUnavailable
    from ._state import open_state

    wanted: list[str] = list(dict.fromkeys(args.agents))
    try:
        config, url, store = open_state(args.config, args.state)
        try:
            found, similar = forget(store, wanted)
        finally:
            store.close()
    except (ConfigError, StoreUnavailable) as exc:
        print(f"error: {exc}")
        return 1
    for agent in wanted:
        name = printable(agent)
        if agent not in found:
            print(f"no agent {name!r} in {url}: nothing reset")
            for other in similar[agent]:
                print(f"  did you mean {printable(other)!r}?")
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
    if len(found) < len(wanted):
        print("(`dsh-circuit-breaker status` lists the agents in the store)")
        return 1
    return 0
