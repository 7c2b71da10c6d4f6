"""Our command hook in a harness's JSON settings file: recognising our entry, merging it
in or out, and writing the file (atomically, after a backup).

The entry shape is Claude Code's, which Codex and others copied:

    {"hooks": {"PreToolUse": [{"hooks": [
        {"type": "command", "command": "...", "timeout": 30}]}], "UserPromptSubmit": [...]}}

Our entries are recognised by their command (this package's entry point, then `hook`),
so install replaces them in place of adding twice, uninstall removes only them, and
every other key and hook in the file is left exactly as it was.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..core.config_file import ENV_TOKEN
from ..core.files import read_regular
from ..core.invocation import HOOK_TIMEOUT, is_ours
from ..usage import FAILED, USAGE


class SettingsError(Exception):
    """A settings file we must not change (not JSON, an unexpected shape): a failed check,
    said with exit status `code`."""

    code = FAILED


class Unreadable(SettingsError):
    """A path given as a file that cannot be read as one (missing where one must exist, a
    directory, a FIFO, no permission): bad input, as every command says it."""

    code = USAGE


def is_our_http(handler: Any) -> bool:
    """Our HTTP hook (`install ... --http`): a URL on /hook/, our token variable allowed."""
    if not isinstance(handler, dict) or handler.get("type") != "http":
        return False
    url, allowed = handler.get("url"), handler.get("allowedEnvVars")
    if not isinstance(url, str) or not isinstance(allowed, list):
        return False

    return urlsplit(url).path.startswith("/hook/") and ENV_TOKEN in allowed


MAX_SETTINGS_BYTES = 16 * 1024 * 1024  # a settings file, not a disk image


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file ({} when missing or blank); `SettingsError` for anything else."""
    if not path.exists():
        return {}

    try:  # never a FIFO (it would block) or a directory
        text = read_regular(str(path), MAX_SETTINGS_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise SettingsError(f"{path} is not UTF-8 text; not changing it") from None
    except OSError as exc:
        raise Unreadable(f"cannot read {path}: {exc.strerror or exc}") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SettingsError(f"{path} is not valid JSON ({exc}); not changing it") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path} does not hold a JSON object; not changing it")
    return data


def read_settings(path: Path, events: tuple[str, ...]) -> dict[str, Any]:
    data = read_json(path)
    hooks = data.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise SettingsError(f"{path}: `hooks` is not an object; not changing it")
    for event in events:
        groups = (hooks or {}).get(event)
        if groups is not None and not isinstance(groups, list):
            raise SettingsError(f"{path}: `hooks.{event}` is not a list; not changing it")
    return data


def our_commands(settings: dict[str, Any], verb: str = "hook") -> dict[str, list[str]]:
    """event -> our hook commands in it (or our commands running `verb`, see is_ours)."""
    found: dict[str, list[str]] = {}
    for event, groups in (settings.get("hooks") or {}).items():
        for group in groups if isinstance(groups, list) else []:
            for handler in handlers(group):
                if handler.get("type") == "command" and is_ours(handler.get("command"), verb):
                    found.setdefault(event, []).append(handler["command"])
    return found


def handlers(group: Any) -> list[dict[str, Any]]:
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return []
    return [h for h in group["hooks"] if isinstance(h, dict)]


def without_ours(settings: dict[str, Any]) -> dict[str, Any]:
    """A copy with our handlers removed (command or HTTP), and the groups and events that
    held only ours, and the token an HTTP install put into `env`."""
    result = dict(settings)
    env = settings.get("env")
    if isinstance(env, dict) and ENV_TOKEN in env:
        rest = {k: v for k, v in env.items() if k != ENV_TOKEN}
        if rest:
            result["env"] = rest
        else:
            result.pop("env")
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return result
    new_hooks: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            new_hooks[event] = groups
            continue
        kept = []
        for group in groups:
            found = handlers(group)
            if found and any(_is_our_handler(h) for h in found):
                others = [h for h in group["hooks"] if not _is_our_handler(h)]
                if not others:
                    continue  # the group held only our hook
                group = {**group, "hooks": others}
            kept.append(group)
        if kept or not groups:  # an event left empty by us goes; one empty before stays
            new_hooks[event] = kept
    if new_hooks or not hooks:
        result["hooks"] = new_hooks
    else:
        result.pop("hooks")
    return result


def _is_our_handler(handler: Any) -> bool:
    if is_our_http(handler):
        return True
    command = handler.get("command") if isinstance(handler, dict) else None
    return is_ours(command) or is_ours(command, "serve")


def with_ours(
    settings: dict[str, Any],
    command: str,
    events: tuple[str, ...],
    handler: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A copy with exactly one group per event running `command` (ours replaced). No
    matcher: every tool (Codex's matchers are regular expressions, where `*` is invalid).
    `handler`: the fields of our handler besides its type and command (default: Claude
    Code's `timeout` in seconds; a harness that counts in other units, or names its
    hooks, passes its own)."""
    result = without_ours(settings)
    hooks = dict(result.get("hooks") or {})
    fields = {"timeout": HOOK_TIMEOUT} if handler is None else handler
    for event in events:
        group = {"hooks": [{"type": "command", "command": command, **fields}]}
        hooks[event] = [*(hooks.get(event) or []), group]
    result["hooks"] = hooks
    return result


def backup_name(path: Path) -> Path:
    """`NAME.bak-<UTC time>` beside `path` (with `-N` when taken): one clock everywhere."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    saved = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while saved.exists():
        saved = path.with_name(f"{path.name}.bak-{stamp}-{n}")
        n += 1
    return saved


MAX_BACKUPS_READ = 50  # the newest backups `restored_text` compares, most recent first


def restored_text(
    path: Path, data: dict[str, Any], loads: Callable[[str], Any] = json.loads
) -> str | None:
    """The text of the newest backup of `path` that holds exactly `data` (read with
    `loads`): the bytes the user had, where our entries were the only change since (None:
    no such backup)."""
    backups = sorted(path.parent.glob(f"{glob.escape(path.name)}.bak-*"), key=_made, reverse=True)
    for backup in backups[:MAX_BACKUPS_READ]:
        try:
            text = read_regular(str(backup), MAX_SETTINGS_BYTES).decode("utf-8")
            if loads(text) == data:
                return text
        except (OSError, ValueError):  # not ours to judge: look at the next one
            continue
    return None


def _made(backup: Path) -> tuple[str, int]:
    """When `backup_name` made it: its stamp, then its `-N` (`-10` after `-9`)."""
    stamp, _, n = backup.name.rpartition(".bak-")[2].partition("-")
    return stamp, int(n) if n.isdigit() else 0


def write_text(path: Path, text: str, backup: bool = True) -> Path | None:
    """Replace `path` with `text` atomically, keeping its mode (new files: owner-only);
    returns the backup made of the old file, if one was (before every change)."""
    saved = None
    if path.exists() and backup:
        saved = backup_name(path)
        shutil.copy2(path, saved)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = (path.stat().st_mode & 0o777) if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return saved


def remove_file(path: Path, backup: bool = True) -> Path | None:
    """Delete `path`; returns the backup made of it, if any."""
    saved = None
    if backup:
        saved = backup_name(path)
        shutil.copy2(path, saved)
    path.unlink()
    return saved


def write_settings(path: Path, data: dict[str, Any], backup: bool = True) -> Path | None:
    """Write `data` to `path`: as the user's own text where a backup holds exactly it
    (an uninstall gives back the file as it was, not merely equal JSON), else indented."""
    text = restored_text(path, data)
    if text is None:
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return write_text(path, text, backup)


def backup_note(saved: Path | None, backup: bool) -> str:
    """What the command says of its backup: its name, or why there is none."""
    if saved is not None:
        return f" (backup: {saved})"
    return " (no backup: --no-backup)" if not backup else ""
