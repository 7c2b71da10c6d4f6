"""`dsh-circuit-breaker status`: the agents in the state store, how close each is to a
limit, and whether it is tripped (its next guarded call, or its next repeat, is denied)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..agents import describe
from ..core.display import plural, printable, utc
from ..core.files import open_regular
from ..core.incidents import record_of
from ..usage import int_in
from ._state import open_state


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="config file (as the hook reads it)")
    parser.add_argument("--state", metavar="URL", help="state URL (as the hook uses it)")
    parser.add_argument("--json", action="store_true", help="one JSON object per agent")
    parser.add_argument(
        "--limit",
        metavar="N",
        type=int_in(1, 1_000_000),
        default=50,
        help="most recent agents shown (default: 50)",
    )


def run(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    unreadable = 0
    config, url, store = open_state(args.config, args.state)
    try:
        for agent, state in store.agents():
            if state is None:
                unreadable += 1
            else:
                rows.append(describe(agent, state, config))
    finally:
        store.close()
    tools = repeated_tools(config.incident_log)
    for row in rows:  # the state keeps digests only: the tool is the one its refusal named
        row["topRepeatTool"] = tools.get(row["agent"]) if "duplicate" in row["tripped"] else None
    rows.sort(key=lambda r: r["updated"], reverse=True)
    shown = rows[: args.limit]
    skipped = (
        f"{plural(unreadable, 'unreadable agent record')} skipped "
        "(`dsh-circuit-breaker reset AGENT` clears one)"
    )
    if args.json:
        for row in shown:  # the time as the text shows it, beside the epoch seconds
            print(json.dumps({**row, "lastCallAt": utc(row["updated"])}))
        if unreadable:
            print(skipped, file=sys.stderr)
        return 0
    print(f"state: {url}  ({plural(len(rows), 'agent')})")
    if unreadable:
        print(skipped)
    if not rows:
        return 0
    width = min(max(5, *(len(printable(r["agent"])) for r in shown)), 60)
    print(f"{'AGENT':<{width}}  {'CALLS':>11}  {'TOP REPEAT':<22}  {'TRIPPED':<15}  LAST CALL AT")
    for row in shown:
        calls = f"{row['calls']}/{row['cap']}" if row["cap"] else str(row["calls"])
        repeat = f"{row['topRepeat']}/{row['duplicateLimit']}"
        if row["topRepeatTool"]:
            repeat = _fit_end(f"{repeat} {printable(row['topRepeatTool'])}", 22)
        tripped = ",".join(row["tripped"]) or "-"
        agent = _fit(printable(row["agent"]), width)
        print(f"{agent:<{width}}  {calls:>11}  {repeat:<22}  {tripped:<15}  {utc(row['updated'])}")
    if len(rows) > len(shown):
        print(f"... {len(rows) - len(shown)} more (use --limit)")
    return 0


MAX_LOG_READ = 4 * 1024 * 1024  # the end of the incident log that `status` reads


def repeated_tools(log: str | None) -> dict[str, str]:
    """agent -> the tool of its latest `duplicate` incident, from the end of the incident
    log (empty: no log). A log that cannot be read only leaves the tools unnamed."""
    found: dict[str, str] = {}
    if not log:
        return found
    try:
        with open(open_regular(os.path.expanduser(log)), "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - MAX_LOG_READ))
            lines = handle.read(MAX_LOG_READ).decode("utf-8", "replace").splitlines()
    except OSError:
        return found
    for line in lines:
        record = record_of(line)
        if record and record.get("kind") == "duplicate" and isinstance(record.get("agent"), str):
            found[record["agent"]] = str(record.get("tool", ""))
    return found


def _fit_end(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3) :]
