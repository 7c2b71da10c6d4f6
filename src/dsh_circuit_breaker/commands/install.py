"""`dsh-circuit-breaker install TARGET`: put the breaker into a harness.

Each target is a module with `add_arguments(parser)` and `install(args)`,
`uninstall(args)`, `doctor(args)` (each returning an exit code). Target modules are
imported to build the parser, so they must import their harness's packages lazily.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

# target name -> module. Add a line per harness.
TARGETS: dict[str, str] = {
    "dsh": "dsh_circuit_breaker.dsh.install",
    "claude-code": "dsh_circuit_breaker.commands.claude_code",
    "codex": "dsh_circuit_breaker.commands.codex",
}


def add_target_arguments(parser: argparse.ArgumentParser, action: str) -> None:
    sub = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    for name, module_name in TARGETS.items():
        target = sub.add_parser(name, help=f"{action} for {name}")
        _module(module_name).add_arguments(target)


def run_target(args: argparse.Namespace, action: str) -> int:
    function = getattr(_module(TARGETS[args.target]), action)
    code: int = function(args)
    return code


def _module(name: str) -> Any:
    return importlib.import_module(name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_arguments(parser, "install")


def run(args: argparse.Namespace) -> int:
    return run_target(args, "install")
