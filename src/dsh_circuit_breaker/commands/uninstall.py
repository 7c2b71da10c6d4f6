"""`dsh-circuit-breaker uninstall TARGET`: take the breaker out of a harness (ours only)."""

from __future__ import annotations

import argparse

from .install import add_target_arguments, run_target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_arguments(parser, "uninstall")


def run(args: argparse.Namespace) -> int:
    return run_target(args, "uninstall")
