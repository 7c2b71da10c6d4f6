"""`dsh-circuit-breaker incidents [--follow]`: the incident log, one readable line per
tripped agent (the first denial of each kind), as a supervisor would watch it."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="config file (as the hook reads it)")
    parser.add_argument("--log", metavar="FILE", help="incident log (default: from the config)")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new lines")
    parser.add_argument("--json", action="store_true", help="print the raw JSON lines")


def readable(line: str) -> str:
    try:
        record: Any = json.loads(line)
    except ValueError:
        return f"(unreadable line) {line.strip()[:200]}"
    if not isinstance(record, dict):
        return f"(unreadable line) {line.strip()[:200]}"
    who = record.get("agent")
    if who is None and "agentKeys" in record:
        who = "object with fields " + ",".join(map(str, record["agentKeys"]))
    return (
        f"{record.get('time', '?')}  {record.get('kind', '?'):<9}  "
        f"{record.get('tool', '?')}  {record.get('count', '?')}/{record.get('limit', '?')}  "
        f"agent {who}"
    )


def run(args: argparse.Namespace) -> int:
    path = args.log
    if not path:
        from ..config import ConfigError
        from ..config_file import hook_config

        try:
            config, _ = hook_config(args.config)
        except ConfigError as exc:
            print(f"error: {exc}")
            return 1
        if not config.incident_log:
            print("the incident log is off (incidentLog is empty in the config)")
            return 1
        path = config.incident_log
    path = os.path.expanduser(path)
    show = (lambda line: line.rstrip("\n")) if args.json else readable
    offset = 0
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as log:
            for line in log:
                print(show(line))
            offset = log.tell()
    elif not args.follow:
        print(f"no incidents yet ({path} does not exist)")
        return 0
    if not args.follow:
        return 0
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how one stops following
        _follow(path, offset, show)
    return 0


def _follow(path: str, offset: int, show: Any) -> None:
    partial = ""
    while True:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        if size < offset:  # truncated or replaced: start again from its top
            offset, partial = 0, ""
        if size > offset:
            with open(path, encoding="utf-8", errors="replace") as log:
                log.seek(offset)
                chunk = log.read()
                offset = log.tell()
            lines = (partial + chunk).split("\n")
            partial = lines.pop()  # a line still being written waits for its newline
            for line in lines:
                if line:
                    print(show(line))
            sys.stdout.flush()
        time.sleep(0.25)
