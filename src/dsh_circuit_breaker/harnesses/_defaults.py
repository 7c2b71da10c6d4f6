"""What a command-hook harness module borrows by assignment for a member of `_contract`'s
`CommandHook` it has nothing of its own for (`conflicts = _defaults.conflicts`), so every
module states every member and mypy checks them all.

The settings operations are those of a Claude Code-shaped JSON settings file
(`_settings`). The hook imports a harness module on every tool call, and this module with
it, so at its top it imports only `core.invocation`, which the hook has loaded already:
each operation imports `_settings` when install, uninstall or doctor calls it.
"""

from __future__ import annotations

from ..core.invocation import HOOK_TIMEOUT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

NOTE = None  # nothing to print after install
CLI_INSTALL = None  # its CLI comes from npm (`CLI_PACKAGE`)
CLI_TIMEOUT: float = HOOK_TIMEOUT  # its `--version` answers within the hook's own timeout
POST_EVENTS: tuple[str, ...] = ()  # no post-tool event: results are not observed
HTTP_EVENTS: tuple[str, ...] = ()  # no `install --http`
START_EVENT = ""  # (with no HTTP_EVENTS, nothing starts the guard)
EMPTY_FILE = None  # the settings file is the user's, never deleted for being empty


def conflicts(path: Path) -> list[str]:
    """Nothing keeps a hook in its settings file from running."""
    return []


def read_settings(path: Path, events: tuple[str, ...]) -> dict[str, Any]:
    from . import _settings

    return _settings.read_settings(path, events)


def our_commands(settings: dict[str, Any]) -> dict[str, list[str]]:
    from . import _settings

    return _settings.our_commands(settings)


def with_ours(settings: dict[str, Any], command: str, events: tuple[str, ...]) -> dict[str, Any]:
    from . import _settings

    return _settings.with_ours(settings, command, events)


def without_ours(settings: dict[str, Any]) -> dict[str, Any] | None:
    """None where nothing is left: the file held only our hooks (install made it)."""
    from . import _settings

    return _settings.without_ours(settings) or None


def write_settings(path: Path, settings: dict[str, Any], backup: bool = True) -> Path | None:
    from . import _settings

    return _settings.write_settings(path, settings, backup)
