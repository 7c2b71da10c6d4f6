"""Harnesses: one module per harness, holding everything about it and nothing else.

A harness module translates; it never decides (that is `rules.py`). The command hook
imports the module named by `--harness` on every tool call, so a module imports only
what `parse` and `answer` need at its top, and its install and doctor helpers inside
the functions that use them.

A command-hook harness module has:

- `NAME`, `LABEL`: the name used by `install NAME` and `hook --harness NAME`, and the
  harness's name for people.
- `EXEMPT`: its spellings of the tools the breaker ignores (added to SPEC's defaults);
  `ANNOTATION_ARGS`: argument names its model rewrites on every call (added to
  `ignoreArgs`).
- `parse(event) -> Call | Prompt | None`: what one hook event means (None: an event the
  breaker has no business with); raises `Malformed` for an event it cannot judge.
- `answer(decision) -> str | None`: what the hook prints for a decision, in the harness's
  own shape (None: print nothing).
- `probe_events(session) -> list`: events in its shape that a working hook allows
  silently (doctor runs them through the installed command).
- `add_arguments(parser, action)`, `install(args)`, `uninstall(args)`, `doctor(args)`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# name -> module. A harness is one module and one line here.
HARNESSES: dict[str, str] = {
    "claude-code": "dsh_circuit_breaker.harnesses.claude_code",
    "codex": "dsh_circuit_breaker.harnesses.codex",
    "gemini-cli": "dsh_circuit_breaker.harnesses.gemini_cli",
    "qwen-code": "dsh_circuit_breaker.harnesses.qwen_code",
    "droid": "dsh_circuit_breaker.harnesses.droid",
    "copilot": "dsh_circuit_breaker.harnesses.copilot",
}
# Plugin harnesses: install / uninstall / doctor only (no command hook).
PLUGIN_HARNESSES: dict[str, str] = {
    "dsh": "dsh_circuit_breaker.dsh.install",
    "cline": "dsh_circuit_breaker.harnesses.cline",
    "pi": "dsh_circuit_breaker.harnesses.pi",
    "opencode": "dsh_circuit_breaker.harnesses.opencode",
    "kilo": "dsh_circuit_breaker.harnesses.kilo",
    # MCP clients: the relay wrapped around each server of a client's config (install mcp).
    "mcp": "dsh_circuit_breaker.harnesses.mcp",
}
DEFAULT = "claude-code"  # `hook` without --harness: what every install before it wrote


class Malformed(ValueError):
    """An event the hook cannot judge: allowed, with one line on stderr."""


class Call:
    """A tool call to judge: `agent` (the store key), `tool`, `arguments`."""

    __slots__ = ("agent", "arguments", "tool")

    def __init__(self, agent: str, tool: str, arguments: Any) -> None:
        self.agent = agent
        self.tool = tool
        self.arguments = arguments


class Prompt:
    """A new user prompt: `agent` (the main agent) starts afresh with resetOnUserPrompt."""

    __slots__ = ("agent",)

    def __init__(self, agent: str) -> None:
        self.agent = agent


def subagent_key(parent: str, sub: str) -> str:
    """`parent/sub`, each part with `%` and `/` escaped: session `a/b` must not be taken
    for subagent `b` of session `a` (ids without either, UUIDs, stay as they are)."""
    return f"{escaped_id(parent)}/{escaped_id(sub)}"


def escaped_id(part: str) -> str:
    if "/" not in part and "%" not in part:
        return part
    return part.replace("%", "%25").replace("/", "%2F")


def load(name: str) -> Any:
    """The module of a command-hook harness; `Malformed` for an unknown name."""
    module_name = HARNESSES.get(name)
    if module_name is None:
        raise Malformed(f"unknown harness {name!r}; known: {', '.join(HARNESSES)}")
    # __import__ rather than importlib: one import fewer on every tool call.
    __import__(module_name)
    import sys

    return sys.modules[module_name]


def target_module(name: str) -> Any:
    """The module behind `install|uninstall|doctor NAME`, command hook or plugin."""
    import importlib

    return importlib.import_module({**HARNESSES, **PLUGIN_HARNESSES}[name])


def targets() -> list[str]:
    return [*PLUGIN_HARNESSES, *HARNESSES]
