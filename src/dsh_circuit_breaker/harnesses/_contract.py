"""What a harness module is, one Protocol per kind: the members and their types, written
once. A module is checked against its kind where the registry (`harnesses/__init__.py`)
returns it as that Protocol, so mypy holds every module to every member; a module with
nothing of its own for an optional member borrows the default from `_defaults` by
assignment (`NOTE = _defaults.NOTE`), as pre-commit's languages borrow from `lang_base`.

The hook imports no `typing`, so a module on its path (a command-hook harness's, the
registry) names these under `if TYPE_CHECKING:`; install, doctor and the guard import them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..core.breaker import Decision
from ..core.config_file import Spellings
from ..judge import Call, Outcome, Prompt
from ._toml import TomlFile

# A harness's settings as its `read_settings` reads them: a JSON object, or a `TomlFile`.
S = TypeVar("S")


class Harness(Spellings, Protocol):
    """Every harness module: `EXEMPT` and `ANNOTATION_ARGS`, what `config_file.hook_config`
    adds to SPEC's defaults (the core's to declare), and the names install, doctor and
    `--help` print."""

    @property
    def NAME(self) -> str: ...  # `install NAME`, `hook --harness NAME`
    @property
    def LABEL(self) -> str: ...  # the harness's name for people


class Answers(Harness, Protocol):
    """A harness whose refusals we word (`judge.judge`)."""

    # What is printed (or sent) for a decision, in the harness's shape; None: nothing.
    def answer(self, decision: Decision, /) -> str | None: ...


class Hook(Answers, Protocol):
    """A command hook (`hook --harness NAME`); alone, a framework's (`FRAMEWORK_HOOKS`: the
    framework's program puts our command in its own hook config, so nothing is installed)."""

    # What one hook event means (None: none of our business); `Malformed` if unjudgeable.
    def parse(self, event: dict[str, Any], /) -> Call | Prompt | Outcome | None: ...


class CommandHook(Hook, Protocol[S]):
    """A harness that runs our command hook from its settings file: install, uninstall and
    doctor are `_command_hook`'s, over these members."""

    @property
    def CLI(self) -> str: ...  # its executable, for doctor
    @property
    def CLI_PACKAGE(self) -> str: ...  # the package that installs it (npm, else PyPI)
    @property
    def CLI_INSTALL(self) -> str | None: ...  # the command that installs a CLI not from npm
    @property
    def CLI_TIMEOUT(self) -> float: ...  # seconds doctor gives `CLI --version`
    @property
    def NOTE(self) -> str | None: ...  # printed after install and by doctor
    @property
    def SCOPES(self) -> tuple[str, ...]: ...  # its settings files; the first is the default
    @property
    def FILE_OPTION(self) -> str: ...  # the option naming a settings file of one's own
    @property
    def SETTINGS_EVENTS(self) -> tuple[str, ...]: ...  # the events our hook goes into
    # Its post-tool events (parsed to `Outcome`): install adds our hook to them only while
    # the config observes results, so a user without them pays no second process per call.
    @property
    def POST_EVENTS(self) -> tuple[str, ...]: ...
    # `install --http` (`_http_hook`): the events posted to the resident guard (empty: no
    # HTTP hooks), and the once-a-session event whose command starts the guard.
    @property
    def HTTP_EVENTS(self) -> tuple[str, ...]: ...
    @property
    def START_EVENT(self) -> str: ...
    # A settings file that is ours alone: what is left of it without our hook (uninstall
    # then deletes it). None: the file is the user's.
    @property
    def EMPTY_FILE(self) -> S | None: ...

    # Events in its shape that a working hook allows silently (doctor runs them).
    def probe_events(self, session: str, /) -> list[dict[str, Any]]: ...
    def settings_path(self, scope: str, project: str | None = None, /) -> Path: ...
    # Why a hook in that settings file would not run (install refuses, doctor reports).
    def conflicts(self, path: Path, /) -> list[str]: ...

    # The settings file: read (`events`: the ones ours go into, checked to be lists where
    # the shape has one list per event), our commands by event, with exactly ours, without
    # ours (None: nothing is left of a file install made), written.
    def read_settings(self, path: Path, events: tuple[str, ...], /) -> S: ...
    def our_commands(self, settings: S, /) -> dict[str, list[str]]: ...
    def with_ours(self, settings: S, command: str, events: tuple[str, ...], /) -> S: ...
    def without_ours(self, settings: S, /) -> S | None: ...
    def write_settings(self, path: Path, settings: S, /, backup: bool = True) -> Path | None: ...


# The settings' shapes a command hook's file has (the registry checks each module's): a
# JSON object (`_defaults`' operations, or the module's own), or TOML tables (`_toml`).
JsonHook = CommandHook[dict[str, Any]]
TomlHook = CommandHook[TomlFile]
# A command hook whatever its settings' shape (`_command_hook`, `_http_hook`: only the
# module's own operations look inside its settings).
SomeCommandHook = CommandHook[Any]


class Plugin(Harness, Protocol):
    """A plugin harness: its own install, uninstall and doctor (lent by its
    `_plugin.PluginHarness`, `HARNESS.entry_points()`)."""

    def add_arguments(self, parser: argparse.ArgumentParser, action: str, /) -> None: ...
    def install(self, args: argparse.Namespace, /) -> int: ...
    def uninstall(self, args: argparse.Namespace, /) -> int: ...
    def doctor(self, args: argparse.Namespace, /) -> int: ...


class Relay(Plugin, Answers, Protocol):
    """MCP: installed around a client's MCP servers like a plugin, and its refusals are
    ours to word (the relay, `guard/mcp.py`)."""
