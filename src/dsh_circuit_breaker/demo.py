"""`dsh-circuit-breaker demo`: the original plugin's probe, replayed through the breaker
(in this process; with `--http`, through the HTTP guard as a harness posts it: demo_http)."""

from __future__ import annotations

import argparse
import os
import tempfile

from .core.breaker import CircuitBreaker
from .core.config import Config
from .core.display import plural
from .demo_http import run_http
from .usage import error, int_in

PROBE_CALLS = 10
MAX_CALLS = 1000  # past the default cap (300), more calls show nothing new


def probe_calls(n: int = PROBE_CALLS) -> list[dict[str, str]]:
    """An agent told to run `echo cbprobe4` n times, whose bash tool rewrites its
    `description` on every call: the case the original plugin's first version missed."""
    return [
        {"command": "echo cbprobe4", "description": f"Run probe step {i}"} for i in range(1, n + 1)
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--calls",
        metavar="N",
        type=int_in(1, MAX_CALLS),
        default=PROBE_CALLS,
        help=f"how many probe calls (default: {PROBE_CALLS})",
    )
    parser.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        help="start the HTTP guard there (its state in a scratch directory), post the probe "
        "to it as Claude Code's HTTP hook would, and print the live page's address",
    )
    parser.add_argument(
        "--serve-for",
        metavar="N",
        type=int_in(1, MAX_SERVE_SECONDS),
        help="--http: seconds the page stays up after the probe (default: until Ctrl-C)",
    )


MAX_SERVE_SECONDS = 86400


def run(args: argparse.Namespace) -> int:
    if args.http is not None:
        return run_http(args.http, probe_calls(args.calls), args.serve_for)
    if args.serve_for is not None:
        return error("demo: --serve-for is for --http")
    with tempfile.TemporaryDirectory() as tmp:
        log_path = os.path.join(tmp, "incidents.jsonl")
        breaker = CircuitBreaker(Config(incident_log=log_path), export=False)
        print(f"Defaults: {_describe(breaker.config)}\n")
        denial = stop = None
        for i, arguments in enumerate(probe_calls(args.calls), start=1):
            decision = breaker.check("demo-agent", "bash", arguments)
            verdict = "allowed" if decision.allowed else f"DENIED ({decision.kind})"
            if decision.stop:
                verdict += ", stop the agent"
            print(f"call {i:2}: bash {arguments}  ->  {verdict}")
            denial = denial or decision.message
            if decision.stop and stop is None:
                stop = (i, decision.stop_reason)
        if denial:
            print(f"\nWhat the model receives instead of the tool's output:\n  {denial}")
        if stop:
            print(f"\nFrom call {stop[0]} on, the harness is told to stop the agent:\n  {stop[1]}")
        lines = []
        if os.path.exists(log_path):  # written at the first denial only
            with open(log_path, encoding="utf-8") as log:
                lines = log.read().splitlines()
        print(f"\nIncident log ({plural(len(lines), 'line')}):")
        for line in lines:
            print(f"  {line}")
    return 0


def _describe(config: Config) -> str:
    return (
        f"duplicateLimit={config.duplicate_limit}, window={config.window}, "
        f"resetOnNewCall={str(config.reset_on_new_call).lower()}, "
        f"maxCallsPerAgent={config.max_calls_per_agent}, "
        f"stopAfterDenials={config.stop_after_denials}, ignoreArgs={list(config.ignore_args)}"
    )
