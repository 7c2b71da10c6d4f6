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
- `parse(event) -> Call | Prompt | Outcome | None`: what one hook event means (None: an
  event the breaker has no business with); raises `Malformed` for an event it cannot
  judge. These types are `judge.py`'s: a harness module imports them from there, never
  from this registry, which imports the harness modules.
- `answer(decision) -> str | None`: what the hook prints for a decision, in the harness's
  own shape (None: print nothing).
- `probe_events(session) -> list`: events in its shape that a working hook allows
  silently (doctor runs them through the installed command).
- where its settings go (`SCOPES`, `settings_path`, ...): install, uninstall and doctor
  are `_command_hook`'s; optionally `POST_EVENTS`, its post-tool events (parsed to
  `Outcome`), which install adds only where the config observes results.

A framework hook module (`FRAMEWORK_HOOKS`: a command hook that a Python framework's
program configures itself, so nothing is installed and there is no CLI) has `NAME`,
`LABEL`, `EXEMPT`, `ANNOTATION_ARGS`, `parse` and `answer` alone.

A plugin harness module has `EXEMPT` and `add_arguments(parser, action)`, `install(args)`,
`uninstall(args)`, `doctor(args)`, lent by its `_plugin.PluginHarness`.

The two Protocols below say so, and mypy holds every module in the registry to them.
"""

from __future__ import annotations

from ..judge import Malformed

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any, Protocol

    from ..breaker import Decision
    from ..judge import Call, Outcome, Prompt

    class CommandHook(Protocol):
        """A command-hook harness module (install, uninstall, doctor: `_command_hook`,
        which also reads the optional members its docstring names)."""

        @property
        def NAME(self) -> str: ...
        @property
        def LABEL(self) -> str: ...
        @property
        def CLI(self) -> str: ...
        @property
        def CLI_PACKAGE(self) -> str: ...
        @property
        def EXEMPT(self) -> tuple[str, ...]: ...
        @property
        def ANNOTATION_ARGS(self) -> tuple[str, ...]: ...
        @property
        def SCOPES(self) -> tuple[str, ...]: ...
        @property
        def FILE_OPTION(self) -> str: ...
        @property
        def SETTINGS_EVENTS(self) -> tuple[str, ...]: ...

        def parse(self, event: dict[str, Any], /) -> Call | Prompt | Outcome | None: ...
        def answer(self, decision: Decision, /) -> str | None: ...
        def probe_events(self, session: str, /) -> list[dict[str, Any]]: ...
        def settings_path(self, scope: str, project: str | None = None, /) -> Path: ...

    class FrameworkHook(Protocol):
        """A command hook run by a framework's own hook config (no install, no doctor)."""

        @property
        def NAME(self) -> str: ...
        @property
        def LABEL(self) -> str: ...
        @property
        def EXEMPT(self) -> tuple[str, ...]: ...
        @property
        def ANNOTATION_ARGS(self) -> tuple[str, ...]: ...

        def parse(self, event: dict[str, Any], /) -> Call | Prompt | Outcome | None: ...
        def answer(self, decision: Decision, /) -> str | None: ...

    class Plugin(Protocol):
        """A plugin harness module: a `_plugin.PluginHarness` and the entry points it lends."""

        @property
        def EXEMPT(self) -> tuple[str, ...]: ...

        def add_arguments(self, parser: argparse.ArgumentParser, action: str, /) -> None: ...
        def install(self, args: argparse.Namespace, /) -> int: ...
        def uninstall(self, args: argparse.Namespace, /) -> int: ...
        def doctor(self, args: argparse.Namespace, /) -> int: ...


# name -> its module, imported when asked for (the hook imports only its own harness).
# mypy checks each module against its kind's Protocol here.
def _claude_code() -> CommandHook:
    from . import claude_code

    return claude_code


def _codex() -> CommandHook:
    from . import codex

    return codex


def _gemini_cli() -> CommandHook:
    from . import gemini_cli

    return gemini_cli


def _qwen_code() -> CommandHook:
    from . import qwen_code

    return qwen_code


def _droid() -> CommandHook:
    from . import droid

    return droid


def _copilot() -> CommandHook:
    from . import copilot

    return copilot


def _hermes() -> CommandHook:
    from . import hermes

    return hermes


def _kimi_cli() -> CommandHook:
    from . import kimi_cli

    return kimi_cli


def _mistral_vibe() -> CommandHook:
    from . import mistral_vibe

    return mistral_vibe


def _openhands_cli() -> CommandHook:
    from . import openhands_cli

    return openhands_cli


def _openhands() -> FrameworkHook:
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


def _mcp() -> Plugin:
    from . import mcp

    return mcp


HARNESSES: dict[str, Callable[[], CommandHook]] = {
    "claude-code": _claude_code,
    "codex": _codex,
    "gemini-cli": _gemini_cli,
    "qwen-code": _qwen_code,
    "droid": _droid,
    "copilot": _copilot,
    "kimi-cli": _kimi_cli,
    "mistral-vibe": _mistral_vibe,
    "hermes": _hermes,
    "openhands-cli": _openhands_cli,
}
# Command hooks that a framework's program puts in its own hook config: `hook --harness`.
FRAMEWORK_HOOKS: dict[str, Callable[[], FrameworkHook]] = {"openhands": _openhands}
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


def load(name: str) -> CommandHook:
    """The module of a command-hook harness; `Malformed` for an unknown name."""
    found = HARNESSES.get(name)
    if found is None:
        raise Malformed(f"unknown harness {name!r}; known: {', '.join(HARNESSES)}")
    return found()


def hook_module(name: str) -> CommandHook | FrameworkHook:
    """The module whose events `hook --harness NAME` reads: a harness's or a framework's."""
    found = FRAMEWORK_HOOKS.get(name)
    if found is not None:
        return found()
    if name not in HARNESSES:
        known = ", ".join([*HARNESSES, *FRAMEWORK_HOOKS])
        raise Malformed(f"unknown harness {name!r}; known: {known}")
    return load(name)


def target_module(name: str) -> CommandHook | Plugin:
    """The module behind `install|uninstall|doctor NAME`, command hook or plugin."""
    return (PLUGIN_HARNESSES[name] if name in PLUGIN_HARNESSES else HARNESSES[name])()


def targets() -> list[str]:
    """The TARGETs of install, uninstall and doctor, sorted as `--help` lists them."""
    return sorted([*PLUGIN_HARNESSES, *HARNESSES])


def target_label(name: str) -> str:
    """TARGET `name` as people write it (`Claude Code`, `Cline`, `pi`)."""
    module = target_module(name)
    plugin = getattr(module, "HARNESS", None)  # a plugin harness module's PluginHarness
    return str(getattr(module, "LABEL", None) or getattr(plugin, "label", name))
