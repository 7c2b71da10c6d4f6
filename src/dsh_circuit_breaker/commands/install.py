"""`dsh-circuit-breaker install TARGET`: put the breaker into a harness.

Targets are the harnesses of `harnesses`: a command-hook harness gets install / uninstall
/ doctor from `harnesses._command_hook`; a plugin harness module has its own (lent by its
`_plugin.PluginHarness`). Modules are imported to build the parser, so they import their
harness's packages lazily.
"""

from __future__ import annotations

import argparse

from ..core.config_file import check_hook
from ..harnesses import (
    HARNESSES,
    PLUGIN_HARNESSES,
    _command_hook,
    target_label,
    target_module,
    targets,
)

WHAT = {  # as cli.COMMANDS says it, for a TARGET's own --help
    "install": "put the breaker into",
    "uninstall": "take the breaker out of",
    "doctor": "prove the breaker loads in",
}


def add_target_arguments(parser: argparse.ArgumentParser, action: str) -> None:
    parser.formatter_class = _TargetsFormatter
    sub = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    for name in targets():
        described = f"{WHAT[action]} {target_label(name)}"
        _add(name, sub.add_parser(name, help=described, description=described), action)


class _TargetsFormatter(argparse.HelpFormatter):
    """argparse measures the TARGETs one indent short of where it prints them, so the
    longest (`claude-code`) went onto a line of its own: room for them, one column."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction):
            self._action_max_length += self._indent_increment


def _add(name: str, parser: argparse.ArgumentParser, action: str) -> None:
    if name in PLUGIN_HARNESSES:
        PLUGIN_HARNESSES[name]().add_arguments(parser, action)
    else:
        _command_hook.add_arguments(HARNESSES[name](), parser, action)


def run_target(args: argparse.Namespace, action: str) -> int:
    if args.target in PLUGIN_HARNESSES:
        plugin = PLUGIN_HARNESSES[args.target]()
        return {"install": plugin.install, "uninstall": plugin.uninstall, "doctor": plugin.doctor}[
            action
        ](args)

    run = {
        "install": _command_hook.install,
        "uninstall": _command_hook.uninstall,
        "doctor": _command_hook.doctor,
    }[action]
    return run(HARNESSES[args.target](), args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_arguments(parser, "install")


def run(args: argparse.Namespace) -> int:
    if hasattr(args, "config") or hasattr(args, "state"):
        check_hook_options(args)
    return run_target(args, "install")


def check_hook_options(args: argparse.Namespace) -> None:
    """`config_file.check_hook` for the installed hook of `args.target`."""
    check_hook(
        target_module(args.target), getattr(args, "config", None), getattr(args, "state", None)
    )
