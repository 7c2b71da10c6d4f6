"""`dsh-circuit-breaker doctor TARGET`: prove the breaker really loads in a harness."""

from __future__ import annotations

import argparse

from .install import add_target_arguments, run_target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_arguments(parser, "doctor")


def run(args: argparse.Namespace) -> int:
    return run_target(args, "doctor")
