"""The `dsh-circuit-breaker` command. Subcommands import their module only when run, so
that a hook process pays for nothing it does not use."""

from __future__ import annotations

import sys

from ._version import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

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
    "mcp": ("dsh_circuit_breaker.guard.mcp", "the breaker in front of an MCP server (a relay)"),
    "status": ("dsh_circuit_breaker.commands.status", "agents in the state store, and limits"),
    "reset": ("dsh_circuit_breaker.commands.reset", "forget agents' state (a capped subagent)"),
    "incidents": ("dsh_circuit_breaker.commands.incidents", "the incident log, readable"),
}


def main(argv: Sequence[str] | None = None) -> int:
    process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["hook"] and "-h" not in argv and "--help" not in argv:
        # A harness runs the hook once per tool call: importing argparse would cost
        # more than the decision, so the hook parses its two options itself (and, as a
        # process of its own, ends without the interpreter's teardown).
        from .hook import main as hook_main

        return hook_main(argv[1:], exit_process=process)
    import argparse
    import importlib

    parser = argparse.ArgumentParser(
        prog="dsh-circuit-breaker", description="A loop guard for LLM agents."
    )
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
    code: int = args._run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
