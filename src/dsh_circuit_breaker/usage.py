"""How every command says that something is wrong: one line on stderr that starts with
`dsh-circuit-breaker: `, and one of two exit codes, the same in every subcommand.

USAGE (2, argparse's own) is for what the person gave: an option value, a config file or
state URL that does not load, a path the command will not use. FAILED (1) is for a
check that ran and failed: doctor found a problem, reset found no such agent, the store
did not answer. The hook is the exception: it fails open and only warns.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

PREFIX = "dsh-circuit-breaker: "
USAGE = 2
FAILED = 1


def one_line(message: object) -> str:
    """`message` on one line: a parser's multi-line error would otherwise spread over
    the terminal, with the line that names the problem lost among the others."""
    return " ".join(str(message).split())


def error(message: object, code: int = USAGE) -> int:
    """Say `message` the one way and return `code`, for `return error(...)`."""
    print(PREFIX + one_line(message), file=sys.stderr, flush=True)
    return code


def os_error(exc: OSError) -> str:
    """An OSError as a person reads it: the file, then what is wrong with it."""
    reason = exc.strerror or str(exc)
    return f"{exc.filename}: {reason}" if exc.filename else reason


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse `type` for a whole number from `low` to `high`, so that a zero, a
    negative or a huge value is a usage error naming the option, not a traceback later."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not from {low} to {high}")
        return value

    parse.__name__ = "number"  # argparse names the type in its message
    return parse


def directory(text: str) -> str:
    """An argparse `type` for a directory that must exist (`--project`): one that does
    not would otherwise be ignored by a scope that does not use it, or fail later."""
    if not os.path.isdir(os.path.expanduser(text)):
        what = "is not a directory" if os.path.exists(text) else "does not exist"
        raise argparse.ArgumentTypeError(f"{text} {what}")
    return text


def program(text: str) -> str:
    """An argparse `type` for an interpreter to write into a loader (`--python`): a
    missing one would be installed, and every tool call after would run unguarded."""
    path = os.path.expanduser(text)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise argparse.ArgumentTypeError(f"{text} is not an executable file")
    return text
