"""`dsh-circuit-breaker mcp`: the command line of the MCP relay, over stdio (`mcp.py`) or
Streamable HTTP (`mcp_http.py`). It sits above both, so that neither imports the other."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from ..core import _log
from ..core.config import ConfigError
from .mcp import McpGuard, StdioRelay, relay_say, server_name

USAGE = (
    "dsh-circuit-breaker mcp [--config FILE] [--state URL] [--name SERVER] [--agent-id ID] "
    "-- COMMAND [ARGS...]  |  --http [HOST:]PORT --upstream URL [--upstream-timeout SECONDS]"
)


def add_arguments(parser: Any) -> None:
    parser.usage = USAGE

    def error(message: str) -> NoReturn:  # one line, as every other failure of the relay
        relay_say(f"{message}; usage: {USAGE}")
        sys.exit(2)

    parser.error = error
    parser.add_argument("--config", metavar="FILE", help="config file (as the hook reads it)")
    parser.add_argument("--state", metavar="URL", help="state URL (default: sqlite:// file)")
    parser.add_argument(
        "--name", metavar="SERVER", help="prefix the server's tool names: SERVER/tool"
    )
    parser.add_argument(
        "--agent-id", metavar="ID", help="the agent's key when the client sends no conversation id"
    )
    http = parser.add_argument_group("Streamable HTTP (--http)")
    http.add_argument("--http", metavar="[HOST:]PORT", help="listen on HTTP (loopback by default)")
    http.add_argument("--upstream", metavar="URL", help="the MCP server's URL (with --http)")
    http.add_argument(
        "--upstream-timeout",
        metavar="SECONDS",
        help="give up on a server that sends nothing for this long (default: 300)",
    )
    http.add_argument(
        "--token",
        metavar="TOKEN",
        help="the token every request must carry (default: as `serve --http`'s)",
    )
    http.add_argument(
        "--allow-remote", action="store_true", help="allow a non-loopback address (needs TLS)"
    )
    http.add_argument("--tls-cert", metavar="FILE", help="TLS certificate chain (PEM)")
    http.add_argument("--tls-key", metavar="FILE", help="TLS private key (PEM)")
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="COMMAND", help="the MCP server to run"
    )


def run(args: Any) -> int:
    _log.sink = relay_say
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if args.http:
        if command:
            return _usage("--http relays to --upstream URL; it takes no COMMAND")
        from .mcp_http import serve  # the HTTP server's modules only for --http

        return serve(args)
    if args.upstream:
        return _usage("--upstream needs --http [HOST:]PORT")
    if not command:
        return _usage("no server command given (after --)")
    try:
        guard = McpGuard(args.config, args.state, server_name(args.name))
    except (ConfigError, ValueError) as exc:
        relay_say(str(exc))
        return 2
    relay = StdioRelay(guard, command, args.agent_id)
    try:
        return relay.run()
    except OSError as exc:  # the command cannot be started
        relay_say(f"cannot start {command[0]!r}: {exc.strerror or exc}")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    finally:
        guard.close()


def _usage(message: str) -> int:
    relay_say(f"{message}; usage: {USAGE}")
    return 2
