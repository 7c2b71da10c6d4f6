"""How a harness runs us: the commands `install` writes into its settings, parsed where they
run and read back by `doctor`, in one place so the three never drift apart.

- the command hook, `PYTHON -c PROGRAM hook [--harness NAME] [--config FILE] [--state URL]`,
  which a harness starts for every tool call (`hook.py` parses its options with
  `parse_hook`);
- the HTTP guard's start command, `PYTHON -c PROGRAM serve --http ADDRESS [--config FILE]
  [--state URL] --ensure`, which an HTTP install runs once per session.

The command hook imports this module on every tool call: it imports nothing at its top
that a Python start has not loaded already.
"""

from __future__ import annotations

import os
import sys

DEFAULT_HARNESS = "claude-code"  # `hook` without --harness: what every install before it wrote
# The hook runs this interpreter on a one-line program rather than the console script:
# pip's script wrapper imports `re` first, a few milliseconds paid on every tool call.
# `-c` puts the working directory (the user's project) first on sys.path, so a project
# with a `keyword.py` or `operator.py` would have its file imported in place of the
# standard module (and run) on every tool call: the program takes that entry out first
# (`-P` would, but only from Python 3.11; `-I` would also drop the user's site-packages).
# `main()`'s status is the process's (`-c` drops a return value): a `serve --ensure` that
# failed must not tell the harness that started it that it succeeded.
HOOK_PROGRAM = (
    "import sys; sys.path[:] = [p for p in sys.path if p]; "
    "from dsh_circuit_breaker.cli import main; sys.exit(main())"
)
# What installs before the line above wrote: still ours, for doctor, install and uninstall.
OLD_HOOK_PROGRAM = "from dsh_circuit_breaker.cli import main; main()"
# Words that, followed by `hook`, make a command ours (older installs used the script).
ENTRY_NAMES = (
    "dsh-circuit-breaker",
    "dsh_circuit_breaker.cli",
    "dsh_circuit_breaker.hook",
    HOOK_PROGRAM,
    OLD_HOOK_PROGRAM,
)
# Where our own arguments end in an installed command (e.g. Gemini CLI's `|| true`).
SHELL_OPERATORS = ("||", "&&", ";", "|")
HOOK_OPTIONS = ("--harness", "--config", "--state")
# The seconds a harness gives the command hook (its settings entry's `timeout`): the hook
# answers in milliseconds, its lock wait is 2 s.
HOOK_TIMEOUT = 30
HOOK_USAGE = "usage: dsh-circuit-breaker hook [--harness NAME] [--config FILE] [--state URL]"


class UsageError(ValueError):
    """Hook arguments that are not ours; the hook allows the call and says so."""


class HookOptions:
    """The command hook's options."""

    __slots__ = ("config", "harness", "state")

    def __init__(
        self, harness: str = DEFAULT_HARNESS, config: str | None = None, state: str | None = None
    ) -> None:
        self.harness = harness
        self.config = config
        self.state = state


def parse_hook(argv: list[str]) -> HookOptions:
    """`--harness NAME`, `--config FILE` and `--state URL` (also as `--name=value`), by
    hand: argparse costs a hook process more than its decision, and a usage error there
    must allow (exit 0), not exit 2."""
    options = HookOptions()
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name not in HOOK_OPTIONS:
            raise UsageError(f"unknown argument {arg!r}; {HOOK_USAGE}")
        if not eq:
            i += 1
            if i >= len(argv):
                raise UsageError(f"{name} needs a value; {HOOK_USAGE}")
            value = argv[i]
        if not value.strip():  # would mean "the default" without a word
            raise UsageError(f"{name}: an empty value; {HOOK_USAGE}")
        setattr(options, name[2:], value)
        i += 1
    return options


def entry_point() -> list[str]:
    """The absolute command that runs this interpreter's `dsh-circuit-breaker` main."""
    return [os.path.abspath(sys.executable), "-c", HOOK_PROGRAM]


def hook_command(
    config: str | None = None, state: str | None = None, harness: str | None = None
) -> str:
    """The shell command the harness runs (through a shell, so every part is quoted)."""
    import shlex

    parts = [*entry_point(), "hook"]
    if harness and harness != DEFAULT_HARNESS:
        parts += ["--harness", harness]
    return shlex.join(parts + _file_options(config, state))


def serve_command(address: str, config: str | None, state: str | None) -> list[str]:
    """The command that runs the HTTP guard on `address`."""
    return [*entry_point(), "serve", "--http", address, *_file_options(config, state)]


def ensure_command(address: str, config: str | None, state: str | None) -> str:
    """The start command of an HTTP install: starts the guard unless it answers."""
    import shlex

    return shlex.join([*serve_command(address, config, state), "--ensure"])


def _file_options(config: str | None, state: str | None) -> list[str]:
    parts = []
    if config:
        parts += ["--config", os.path.abspath(os.path.expanduser(config))]
    if state:
        parts += ["--state", state]
    return parts


def _ours(command: object, verb: str) -> list[str] | None:
    """The arguments after `verb` if `command` runs this package's `verb`, else None."""
    import shlex

    if not isinstance(command, str):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, word in enumerate(words[:-1]):
        if os.path.basename(word) in ENTRY_NAMES and words[i + 1] == verb:
            rest = words[i + 2 :]
            end = next((j for j, w in enumerate(rest) if w in SHELL_OPERATORS), len(rest))
            return rest[:end]
    return None


def is_ours(command: object, verb: str = "hook") -> bool:
    """`command` runs this package's `hook` (or `serve`: the start command of an HTTP
    install, `serve --http ... --ensure`)."""
    args = _ours(command, verb)
    return args is not None and (verb != "serve" or "--ensure" in args)


def options_of(command: str) -> tuple[str | None, str | None]:
    """The `--config` and `--state` written into one of our commands (the hook's or the
    start command); (None, None), the defaults, for a command not in our shape."""
    args = _ours(command, "hook")
    if args is not None:
        try:
            options = parse_hook(args)
        except UsageError:
            return None, None
        return options.config, options.state
    from itertools import pairwise

    args = _ours(command, "serve") or []
    found = {flag: value for flag, value in pairwise(args) if flag in HOOK_OPTIONS}
    return found.get("--config"), found.get("--state")
