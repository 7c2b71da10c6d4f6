"""`dsh-circuit-breaker hook`: the PreToolUse command hook for Claude Code and Codex.

The harness starts this as a new process for every tool call and writes one event as
JSON on stdin. Claude Code, Codex and the DSH Claude Code bridge share the shape:
`session_id`, `transcript_path`, `cwd`, `hook_event_name`, `tool_name`, `tool_input`,
`tool_use_id`, plus `agent_id`/`agent_type` inside a Claude Code subagent, `prompt` on
UserPromptSubmit, and `turn_id`/`model`/`permission_mode` from Codex.

- PreToolUse: deny by printing `{"hookSpecificOutput": {"hookEventName": "PreToolUse",
  "permissionDecision": "deny", "permissionDecisionReason": <text>}}`; allow by printing
  nothing. The exit status is always 0: exit 2 would block with stderr as the reason.
- UserPromptSubmit: with `resetOnUserPrompt` (the default), the session's main agent
  starts afresh: a person typing a prompt is new intent.
- Anything malformed, and any error of our own: allow, one line on stderr, exit 0. The
  hook must never block or break the host agent.

State lives in a store that outlives the process (`sqlite://` in the user's state
directory by default), since every call is a new process. This module imports only
what a decision needs: a Python start is most of the hook's cost already.
"""

from __future__ import annotations

import os
import sys

from .cjson import canonical, loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from .config import Config

ENV_STATE = "DSH_CIRCUIT_BREAKER_STATE"
# A hook event is a few kilobytes; a Write of a large file can reach megabytes. Past this
# the event is not judged (allowed), rather than letting one call eat memory and time.
MAX_EVENT_BYTES = 16 * 1024 * 1024
USAGE = "usage: dsh-circuit-breaker hook [--config FILE] [--state URL]"


class Malformed(ValueError):
    """An event the hook cannot judge: allowed, with one line on stderr."""


def say(message: str) -> None:
    """One line on stderr: what the harness shows in its hook log, never a traceback."""
    prefix = "dsh-circuit-breaker hook: "
    message = message.removeprefix("dsh-circuit-breaker: ")  # the breaker's own warnings
    try:
        sys.stderr.write(prefix + " ".join(message.split()) + "\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not turn into a failure either
        pass


def agent_key(event: dict[str, Any]) -> str:
    """The agent a call belongs to: its session, plus its subagent id inside a subagent
    (a Claude Code subagent shares its parent's `session_id`)."""
    session = event.get("session_id")
    if not isinstance(session, str) or not session:
        raise Malformed("event has no session_id")
    sub = event.get("agent_id")
    if isinstance(sub, str) and sub:
        return f"{session}/{sub}"
    return session


def hook_config(config_path: str | None = None) -> tuple[Config, str | None]:
    """The hook's configuration and the state URL its config file names (if any).

    Over SPEC's defaults the hook adds Claude Code's exempt spellings and turns the
    incident log on in the state directory, since a supervisor has no other way to see
    a tripped hook agent. A config file's own `exempt` or `incidentLog` replaces these.
    """
    from .config import CLAUDE_CODE_EXEMPT, DEFAULT_EXEMPT, Config
    from .paths import default_incident_log

    base = Config(exempt=DEFAULT_EXEMPT + CLAUDE_CODE_EXEMPT, incident_log=default_incident_log())
    from .config_file import load

    loaded = load(config_path, base=base)
    return loaded.config, loaded.state


def state_url(explicit: str | None, from_file: str | None) -> str:
    """`--state`, else `$DSH_CIRCUIT_BREAKER_STATE`, else the config file's `state`,
    else the default SQLite file in the user's state directory."""
    if explicit:
        return explicit
    env = os.environ.get(ENV_STATE)
    if env:
        return env
    if from_file:
        return from_file
    from .paths import default_state_url

    return default_state_url()


def read_event(stream: Any) -> dict[str, Any]:
    raw = stream.read(MAX_EVENT_BYTES + 1)
    if len(raw) > MAX_EVENT_BYTES:
        raise Malformed(f"event larger than {MAX_EVENT_BYTES} bytes, not judged")
    try:
        event = loads(raw)
    except (ValueError, RecursionError):
        raise Malformed("stdin is not a JSON hook event") from None
    if not isinstance(event, dict):
        raise Malformed(f"hook event must be a JSON object, got {type(event).__name__}")
    return event


def handle(event: dict[str, Any], config_path: str | None, state: str | None) -> str | None:
    """Judge one event; returns what to print on stdout (None: print nothing)."""
    name = event.get("hook_event_name")
    if name == "PreToolUse":
        tool = event.get("tool_name")
        if not isinstance(tool, str) or not tool:
            raise Malformed("PreToolUse event has no tool_name")
        if "tool_input" not in event:
            raise Malformed("PreToolUse event has no tool_input")
        agent = agent_key(event)
        config, file_state = hook_config(config_path)
        if not config.enabled or not config.guards(tool):
            return None  # an unguarded call: no store is even opened
        if config.incident_log:
            _ensure_parent(config.incident_log)
        breaker = _breaker(config, state_url(state, file_state))
        decision = breaker.check(agent, tool, event["tool_input"])
        if decision.allowed:
            return None
        return canonical(
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": decision.message,
                }
            }
        )
    if name == "UserPromptSubmit":
        session = event.get("session_id")
        if not isinstance(session, str) or not session:
            raise Malformed("UserPromptSubmit event has no session_id")
        config, file_state = hook_config(config_path)
        if config.reset_on_user_prompt:
            # The main agent only: a subagent's work is not what the person just typed.
            _breaker(config, state_url(state, file_state)).reset(session)
        return None
    raise Malformed(f"unknown hook event {name!r}, allowed")


def _ensure_parent(path: str) -> None:
    # The default incident log sits in the state directory, which a non-default state
    # URL never creates; a denial must still reach the log.
    directory = os.path.dirname(os.path.expanduser(path))
    if directory and not os.path.isdir(directory):
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as exc:  # the append reports it too; the decision stands
            say(f"cannot create {directory}: {exc}")


# Breakers opened while handling the event; `main` closes them, unless the process is
# about to end anyway (see `main`).
_opened: list[Any] = []


def _breaker(config: Config, url: str) -> Any:
    from .breaker import CircuitBreaker

    _close_opened()  # one open at a time, however often `handle` is called in-process
    breaker = CircuitBreaker(config, state=url)
    _opened.append(breaker)
    return breaker


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
    code = _main(argv)
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
    from . import _log

    _log.sink = say
    try:
        config_path, state = parse_args(sys.argv[1:] if argv is None else argv)
        if sys.stdin is None or sys.stdin.isatty():
            raise Malformed("expects a hook event as JSON on stdin")
        event = read_event(sys.stdin.buffer)
        out = handle(event, config_path, state)
    except Malformed as exc:
        say(str(exc))
        return 0
    except Exception as exc:  # config errors, store errors, our own bugs: never block
        say(f"{type(exc).__name__}: {exc}; call allowed")
        return 0
    if out is not None:
        try:
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
        except Exception as exc:  # the harness stopped listening: nothing left to do
            say(f"cannot write the decision: {exc}")
    return 0


def parse_args(argv: list[str]) -> tuple[str | None, str | None]:
    """`--config FILE` and `--state URL`, by hand: argparse costs a hook process more
    than its decision, and a usage error here must allow (exit 0), not exit 2."""
    config_path = state = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in ("--config", "--state"):
            if not eq:
                i += 1
                if i >= len(argv):
                    raise Malformed(f"{name} needs a value; {USAGE}")
                value = argv[i]
            if name == "--config":
                config_path = value
            else:
                state = value
        else:
            raise Malformed(f"unknown argument {arg!r}; {USAGE}")
        i += 1
    return config_path, state


# -- as a `dsh-circuit-breaker` subcommand (see cli.COMMANDS) ---------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="config file (TOML, JSON or YAML)")
    parser.add_argument("--state", metavar="URL", help="state URL (default: sqlite:// file)")


def run(args: argparse.Namespace) -> int:
    argv = []
    if args.config:
        argv += ["--config", args.config]
    if args.state:
        argv += ["--state", args.state]
    return main(argv)


if __name__ == "__main__":
    main(exit_process=True)
