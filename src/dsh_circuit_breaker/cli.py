"""The `dsh-circuit-breaker` command. Subcommands import their module only when run, so
that a hook process pays for nothing it does not use."""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn

# name -> (module, one-line help). Each module has add_arguments(parser) and run(args) -> int.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("dsh_circuit_breaker.demo", "replay the cbprobe4 probe through the breaker"),
    "serve": (
        "dsh_circuit_breaker.guard.cli",
        "the resident guard: JSON lines on stdio for the plugins, or HTTP hooks and the live page",
    ),
    "install": ("dsh_circuit_breaker.commands.install", "put the breaker into a harness"),
    "uninstall": ("dsh_circuit_breaker.commands.uninstall", "take the breaker out of a harness"),
    "doctor": ("dsh_circuit_breaker.commands.doctor", "prove the breaker loads in a harness"),
    "dsh-package": (
        "dsh_circuit_breaker.dsh.package",
        "write the DSH plugin as an npm package for `dsh plugin add`",
    ),
    "analyze": (
        "dsh_circuit_breaker.transcripts.cmd_analyze",
        "tabulate tool calls in transcripts",
    ),
    "replay": (
        "dsh_circuit_breaker.transcripts.cmd_replay",
        "what the breaker would have done to transcripts",
    ),
    "calibrate": (
        "dsh_circuit_breaker.transcripts.cmd_calibrate",
        "choose limits from your own transcripts",
    ),
    "hook": ("dsh_circuit_breaker.hook", "the command hook a harness runs before each tool call"),
    "mcp": (
        "dsh_circuit_breaker.guard.mcp_command",
        "the breaker in front of an MCP server (a relay)",
    ),
    "status": ("dsh_circuit_breaker.commands.status", "agents in the state store, and limits"),
    "reset": (
        "dsh_circuit_breaker.commands.reset",
        "forget agents' state, so that a tripped or capped agent runs again",
    ),
    "incidents": ("dsh_circuit_breaker.commands.incidents", "the incident log, readable"),
}


def main(argv: Sequence[str] | None = None) -> int:
    process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["hook"] and "-h" not in argv and "--help" not in argv:
        # A harness runs the hook once per tool call: importing argparse would cost
        # more than the decision, so the hook parses its two options itself (and, as a
        # process of its own, ends without the interpreter's teardown).
        if process:
            import gc

            # It lives for milliseconds and ends with os._exit: collecting cycles would
            # only cost time (about 0.4 ms of collections while its modules load).
            gc.disable()
        from .hook import main as hook_main

        return hook_main(argv[1:], exit_process=process)
    import importlib

    from ._version import __version__

    parser = _parser_class()(prog="dsh-circuit-breaker", description="A loop guard for LLM agents.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module_name, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(command)
            command.set_defaults(_run=module.run, _parser=command)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # under the command's own usage, not the top-level one
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 2
    empty = _empty_value(args._parser, args)
    if empty:
        empty[0].error(f"{empty[1]}: an empty value")
    return _run(args)


def _empty_value(parser: Any, args: Any) -> tuple[Any, str] | None:
    """The (sub)parser and option (or argument) given an empty string, if any: a
    `--config ""` would otherwise mean "no config file" and `--state ""` "the default
    store", silently."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(str(getattr(args, action.dest, "")))
            found = _empty_value(chosen, args) if chosen is not None else None
            if found:
                return found
            continue
        value = getattr(args, action.dest, None)
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            return parser, "/".join(action.option_strings) or str(action.metavar or action.dest)
    return None


def _parser_class() -> type:
    """argparse's parser, saying a usage error the one way (`usage.error`): one line
    that names the command and the problem, where argparse prints its usage first."""
    import argparse

    from . import usage

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            usage.error(
                f"{self.prog.removeprefix('dsh-circuit-breaker ')}: {message} "
                f"(see {self.prog} --help)"
            )
            sys.exit(usage.USAGE)

    return Parser


def _run(args: Any) -> int:
    """Run the chosen command. What a person got wrong (a config that does not load, a
    file it cannot use) or a store that does not answer ends in one line; anything else
    is a bug, said in one line too, with the traceback only under DSH_CIRCUIT_BREAKER_DEBUG."""
    import os

    from . import usage
    from .core.config import ConfigError
    from .core.stores.unavailable import StoreUnavailable

    try:
        code: int = args._run(args)
    except ConfigError as exc:
        return usage.error(exc)
    except OSError as exc:  # files.Unsafe among them: a path the command will not use
        return usage.error(usage.os_error(exc))
    except StoreUnavailable as exc:
        return usage.error(exc, usage.FAILED)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("DSH_CIRCUIT_BREAKER_DEBUG"):
            raise
        return usage.error(
            f"internal error (a bug; DSH_CIRCUIT_BREAKER_DEBUG=1 shows where): "
            f"{type(exc).__name__}: {exc}",
            usage.FAILED,
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
