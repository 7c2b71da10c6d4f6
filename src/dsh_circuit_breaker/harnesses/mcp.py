"""MCP: any MCP client (Claude Desktop, Zed, Continue, Cherry Studio, LM Studio, ...) through
the relay `dsh-circuit-breaker mcp` (`guard/mcp.py`, `guard/mcp_http.py`), which stands
in front of one MCP server and judges each `tools/call` before the server sees it.

This module holds what the relay shares with the command hooks: the spellings the
config is loaded with (`config_file.hook_config(path, this module)`), and `answer`, the
refusal's text (the relay wraps it in the negotiated version's `CallToolResult`). An
MCP server's tools are its own, so nothing is exempt by name and no argument is known
to be rewritten on every call: a user names them in the config file (`exempt`,
`ignoreArgs`, with the `--name` prefix when one is given).

A stop cannot end an MCP client's agent (the protocol has no way for a server to end
the conversation): every call past the stop point stays refused, with the same text.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

    from ..core.breaker import Decision
    from ._contract import Harness

NAME = "mcp"
LABEL = "MCP"
EXEMPT: tuple[str, ...] = ()
ANNOTATION_ARGS: tuple[str, ...] = ()


def answer(decision: Decision) -> str | None:
    """The text the model gets as the refused call's result (None: allowed). A stop
    changes nothing: the client cannot be told to end its agent."""
    return None if decision.allowed else decision.message


# -- install / uninstall / doctor: the relay around each server of a client's config -------


def add_arguments(parser: argparse.ArgumentParser, action: str) -> None:
    from ._mcp_clients import add_arguments as add

    add(parser, action)


def install(args: argparse.Namespace) -> int:
    from ._mcp_clients import install as run

    return run(args, _this())


def uninstall(args: argparse.Namespace) -> int:
    from ._mcp_clients import uninstall as run

    return run(args)


def doctor(args: argparse.Namespace) -> int:
    from ._mcp_clients import doctor as run

    return run(args, _this())


def _this() -> Harness:
    """This module, for `_mcp_clients` to load the config as the relay does: it is handed
    over rather than imported there, so that imports between the two go one way."""
    from typing import cast

    return cast("Harness", sys.modules[__name__])
