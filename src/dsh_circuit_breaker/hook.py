"""`dsh-circuit-breaker hook [--harness NAME]`: the command hook every command-hook
harness runs before a tool executes.

The harness starts this as a new process for every tool call and writes one event as
JSON on stdin. The harness module (`harnesses/NAME.py`, default `claude-code`) says what
the event means and how the decision is written back; this module only reads, judges and
prints:

- a tool call: judged by the breaker; the harness module's answer is printed (nothing, or
  its deny shape). The exit status is always 0.
- a new user prompt: with `resetOnUserPrompt` (the default), the session's main agent
  starts afresh: a person typing a prompt is new intent.
- anything malformed, any error of our own, and an interrupt (Ctrl-C): allow, one line
  on stderr, exit 0. The hook must never block or break the host agent.

State lives in a store that outlives the process (`sqlite://` in the user's state
directory by default), since every call is a new process. This module imports only
what a decision needs: a Python start is most of the hook's cost already.
"""

from __future__ import annotations

import os
import sys

from .core.invocation import DEFAULT_HARNESS, UsageError, parse_hook
from .harnesses import hook_module
from .judge import MAX_EVENT_BYTES, Malformed, event_of, judge

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any


def say(message: str) -> None:
    """One line on stderr: what the harness shows in its hook log, never a traceback."""
    prefix = "dsh-circuit-breaker: hook: "  # every command's one prefix (usage.py)
    message = message.removeprefix("dsh-circuit-breaker: ")  # the breaker's own warnings
    try:
        sys.stderr.write(prefix + " ".join(message.split()) + "\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not turn into a failure either
        pass


def handle(
    event: dict[str, Any],
    config_path: str | None,
    state: str | None,
    harness_name: str = DEFAULT_HARNESS,
) -> str | None:
    """Judge one event; returns what to print on stdout (None: print nothing)."""
    harness = hook_module(harness_name)
    what = harness.parse(event)
    if what is None:
        return None
    from .core.assembly import Assembly

    assembly = Assembly.of(harness_name, harness, config_path, state)

    def open_breaker() -> Any:
        if assembly.url is not None and assembly.url.startswith("memory:"):
            raise Malformed(
                f"state {assembly.url}: each hook is a new process, nothing would be counted"
            )
        _close_opened()  # one open at a time, however often `handle` is called in-process
        # No metrics: one call's worth, from a process about to exit.
        breaker = assembly.breaker(metrics=False)
        _opened.append(breaker)
        return breaker

    return judge(harness, what, assembly.config, open_breaker)[0]


# Breakers opened while handling the event; `main` closes them, unless the process is
# about to end anyway (see `main`).
_opened: list[Any] = []


def _close_opened() -> None:
    while _opened:
        try:
            _opened.pop().close()
        except Exception as exc:
            say(f"cannot close the state store: {exc}")


def main(argv: list[str] | None = None, *, exit_process: bool = False) -> int:
    """Entry point; `argv` are the arguments after `hook`. Always returns 0.

    With `exit_process` (a real hook process, from the command line), the process ends
    here with `os._exit` once its output is flushed: every decision is committed by then,
    and skipping the interpreter's teardown and SQLite's close-time WAL checkpoint
    (which SQLite's autocheckpoint does later, in some commit) saves a few milliseconds
    on every tool call.
    """
    try:
        code = _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C while the hook waits (a person trying it by hand) or decides. Exit 0, as
        # for every problem of ours: a harness reads any other status as a verdict
        # (2 blocks the call in Claude Code, Codex and droid, 3 aborts droid's agent),
        # and interrupting the hook is no reason to refuse the call.
        say("interrupted before a decision; call allowed")
        code = 0
    # A refusal exported an event: send it before the process ends, waiting a bounded time.
    # Looked up, not imported: an allowed call never loads telemetry.
    exporter = sys.modules.get(f"{__package__}.core._otel")
    if exporter is not None:
        exporter.flush()
    if exit_process:
        for stream in (sys.stdout, sys.stderr):
            try:  # noqa: SIM105 - contextlib would be one more import per tool call
                stream.flush()
            except Exception:
                pass
        os._exit(code)
    _close_opened()
    return code


def _main(argv: list[str] | None) -> int:
    from .core import _log

    _log.sink = say
    try:
        options = parse_hook(sys.argv[1:] if argv is None else argv)
        if sys.stdin is None or sys.stdin.isatty():
            raise Malformed("expects a hook event as JSON on stdin")
        event = event_of(sys.stdin.buffer.read(MAX_EVENT_BYTES + 1))
        out = handle(event, options.config, options.state, options.harness)
    except (Malformed, UsageError) as exc:
        say(str(exc))
        return 0
    except Exception as exc:  # config errors, store errors, our own bugs: never block
        # A config error names its file and key; only a bug needs its class named.
        kind = "" if isinstance(exc, ValueError) else f"{type(exc).__name__}: "
        say(f"{kind}{exc}; call allowed")
        return 0
    if out is not None:
        try:
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
        except Exception as exc:  # the harness stopped listening: nothing left to do
            say(f"cannot write the decision: {exc}")
    return 0


# -- as a `dsh-circuit-breaker` subcommand (see cli.COMMANDS) ---------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .harnesses import FRAMEWORK_HOOKS, HARNESSES

    parser.add_argument(
        "--harness",
        choices=[*HARNESSES, *FRAMEWORK_HOOKS],
        default=DEFAULT_HARNESS,
        help="the harness (or framework) running it",
    )
    parser.add_argument("--config", metavar="FILE", help="config file (TOML, JSON or YAML)")
    parser.add_argument("--state", metavar="URL", help="state URL (default: sqlite:// file)")


def run(args: argparse.Namespace) -> int:
    argv = ["--harness", args.harness]
    if args.config:
        argv += ["--config", args.config]
    if args.state:
        argv += ["--state", args.state]
    return main(argv)


if __name__ == "__main__":
    main(exit_process=True)
