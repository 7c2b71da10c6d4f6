"""`dsh-circuit-breaker incidents [--follow]`: the incident log, one readable line per
tripped agent (the first denial of each kind), as a supervisor would watch it."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ..core.config_file import hook_config
from ..core.display import plural, printable
from ..core.files import open_regular
from ..core.incidents import record_of
from ..usage import error


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="config file (as the hook reads it)")
    parser.add_argument("--log", metavar="FILE", help="incident log (default: from the config)")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new lines")
    parser.add_argument("--json", action="store_true", help="print the raw JSON lines")


FIELDS = ("time", "kind", "tool", "count", "limit")


def readable(record: dict[str, Any]) -> str:
    """One line for a person; text from the log (tool and agent names come from the
    harness) has its control characters escaped."""
    who = record.get("agent")
    if who is None and "agentKeys" in record:
        who = "object with fields " + ",".join(record["agentKeys"])
    text = (
        f"{record.get('time', '?')}  {record.get('kind', '?'):<9}  {record.get('tool', '?')}  "
        f"{record.get('count', '?')}/{record.get('limit', '?')}  agent {who}"
    )
    return printable(text)


def raw(record: dict[str, Any]) -> str:
    """The line as JSON again: identical to what the breaker wrote, and never a control
    character, whatever else was in the file."""
    return json.dumps(record, separators=(",", ":"))


def run(args: argparse.Namespace) -> int:
    path = args.log
    if not path:
        config, _ = hook_config(args.config)
        if not config.incident_log:
            return error("the incident log is off (incidentLog is empty in the config)")
        path = config.incident_log
    path = os.path.expanduser(path)
    show = raw if args.json else readable
    offset = 0
    if os.path.exists(path):
        skipped = 0
        # As the hook does: a directory or FIFO is refused, not read (a FIFO would block).
        with open(open_regular(path), encoding="utf-8", errors="replace") as log:
            for line in log:
                record = record_of(line)
                if record is None:
                    skipped += 1
                else:
                    print(show(record))
            offset = log.tell()
        if skipped:
            print(f"{plural(skipped, 'unreadable line')} skipped in {path}", file=sys.stderr)
    elif args.log and not args.follow:  # a log named by hand that is not there: a typo?
        return error(f"--log {path}: no such file")
    elif not args.follow:
        print(f"no incidents yet ({path} does not exist)")
        return 0
    if not args.follow:
        return 0
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how one stops following
        _follow(path, offset, show)
    return 0


def _follow(path: str, offset: int, show: Callable[[dict[str, Any]], str]) -> None:
    partial = ""
    skipped = 0
    while True:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        if size < offset:  # truncated or replaced: start again from its top
            offset, partial = 0, ""
        if size > offset:
            with open(open_regular(path), encoding="utf-8", errors="replace") as log:
                log.seek(offset)
                chunk = log.read()
                offset = log.tell()
            lines = (partial + chunk).split("\n")
            partial = lines.pop()  # a line still being written waits for its newline
            for line in lines:
                if not line:
                    continue
                record = record_of(line)
                if record is None:
                    skipped += 1
                    print(f"{plural(skipped, 'unreadable line')} skipped so far", file=sys.stderr)
                else:
                    print(show(record))
            sys.stdout.flush()
        time.sleep(0.25)
