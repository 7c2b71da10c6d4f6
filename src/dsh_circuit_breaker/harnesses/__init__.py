"""Harnesses: one module per harness, holding everything about it and nothing else.

A harness module translates; it never decides (that is `rules.py`). The command hook
imports the module named by `--harness` on every tool call, so a module imports only
what `parse` and `answer` need at its top, and its install and doctor helpers inside
the functions that use them.

Each kind of harness module is a Protocol of `_contract` (a command hook run from its
settings file, a framework's command hook, a plugin, the MCP relay): every member is
written there once, with its type. A module states every member of its kind, borrowing
from `_defaults` by assignment what it has nothing of its own for, and the registry below
returns each module as its kind's Protocol, so mypy checks every member of every module.
"""

from __future__ import annotations

from ..judge import Malformed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ._contract import Harness, Hook, JsonHook, Plugin, Relay, SomeCommandHook, TomlHook


# name -> its module, imported when asked for (the hook imports only its own harness).
# mypy checks each module against its kind's Protocol (and its settings' shape) here.
def _claude_code() -> JsonHook:
    from . import claude_code

    return claude_code


def _codex() -> JsonHook:
    from . import codex

    return codex


def _gemini_cli() -> JsonHook:
    from . import gemini_cli

    return gemini_cli


def _qwen_code() -> JsonHook:
    from . import qwen_code

    return qwen_code


def _droid() -> JsonHook:
    from . import droid

    return droid


def _copilot() -> JsonHook:
    from . import copilot

    return copilot


def _hermes() -> JsonHook:  # its YAML file, read as the mapping it holds
    from . import hermes

    return hermes


def _kimi_cli() -> TomlHook:
    from . import kimi_cli

    return kimi_cli


def _mistral_vibe() -> TomlHook:
    from . import mistral_vibe

    return mistral_vibe


def _openhands() -> Hook:
    from . import openhands

    return openhands


def _dsh() -> Plugin:
    from . import dsh

    return dsh


def _cline() -> Plugin:
    from . import cline

    return cline


def _pi() -> Plugin:
    from . import pi

    return pi


def _opencode() -> Plugin:
    from . import opencode

    return opencode


def _kilo() -> Plugin:
    from . import kilo

    return kilo


def _openclaw() -> Plugin:
    from . import openclaw

    return openclaw


def _mcp() -> Relay:
    from . import mcp

    return mcp


HARNESSES: dict[str, Callable[[], SomeCommandHook]] = {
    "claude-code": _claude_code,
    "codex": _codex,
    "gemini-cli": _gemini_cli,
    "qwen-code": _qwen_code,
    "droid": _droid,
    "copilot": _copilot,
    "kimi-cli": _kimi_cli,
    "mistral-vibe": _mistral_vibe,
    "hermes": _hermes,
}
# Command hooks that a framework's program puts in its own hook config: `hook --harness`.
FRAMEWORK_HOOKS: dict[str, Callable[[], Hook]] = {"openhands": _openhands}
# Plugin harnesses: install / uninstall / doctor only (no command hook).
PLUGIN_HARNESSES: dict[str, Callable[[], Plugin]] = {
    "dsh": _dsh,
    "cline": _cline,
    "pi": _pi,
    "opencode": _opencode,
    "kilo": _kilo,
    "openclaw": _openclaw,
    # MCP clients: the relay wrapped around each server of a client's config (install mcp).
    "mcp": _mcp,
}


def load(name: str) -> SomeCommandHook:
    """The module of a command-hook harness; `Malformed` for an unknown name."""
    found = HARNESSES.get(name)
    if found is None:
        raise Malformed(f"unknown harness {name!r}; known: {', '.join(HARNESSES)}")
    return found()


def hook_module(name: str) -> Hook:
    """The module whose events `hook --harness NAME` reads: a harness's or a framework's."""
    found = FRAMEWORK_HOOKS.get(name)
    if found is not None:
        return found()
    if name not in HARNESSES:
        known = ", ".join([*HARNESSES, *FRAMEWORK_HOOKS])
        raise Malformed(f"unknown harness {name!r}; known: {known}")
    return load(name)


def target_module(name: str) -> Harness:
    """The module behind `install|uninstall|doctor NAME`, command hook or plugin."""
    return (PLUGIN_HARNESSES[name] if name in PLUGIN_HARNESSES else HARNESSES[name])()


def targets() -> list[str]:
    """The TARGETs of install, uninstall and doctor, sorted as `--help` lists them."""
    return sorted([*PLUGIN_HARNESSES, *HARNESSES])


def target_label(name: str) -> str:
    """TARGET `name` as people write it (`Claude Code`, `Cline`, `pi`)."""
    return target_module(name).LABEL
