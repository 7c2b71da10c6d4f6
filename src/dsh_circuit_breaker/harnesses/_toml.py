"""Our hook entries in a harness's TOML file, as an array of tables (`[[hooks]]`: Kimi
CLI's config.toml), edited as text: the core has no TOML writer, and a user's file keeps
its comments, order and formatting only if nothing else in it is rewritten.

Ours are appended at the end, one table each, and removed by their lines (a table runs
from its `[[NAME]]` header to the next header). Every edit is checked by parsing the result:
it must hold exactly the old data with our tables added or removed, else the file is left as
it was and the user is told to make the change by hand. Reading needs Python 3.11's
tomllib, or the tomli package on 3.10.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.files import read_regular
from ..core.invocation import is_ours as our_command
from ._settings import MAX_SETTINGS_BYTES, SettingsError, write_text

_HEADER = re.compile(r"\s*\[")


class TomlFile:
    """A TOML file's text and what it parses to; equal when the texts are."""

    __slots__ = ("data", "path", "text")

    def __init__(self, path: Path, text: str, data: dict[str, Any]) -> None:
        self.path = path
        self.text = text
        self.data = data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TomlFile) and other.text == self.text

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dicts it stands beside


def loads(text: str, where: Path | str) -> dict[str, Any]:
    toml = _parser()
    if toml is None:
        raise SettingsError(f"reading {where} needs Python 3.11+ or the tomli package")
    try:
        data: dict[str, Any] = toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise SettingsError(f"{where} is not valid TOML ({exc}); not changing it") from None
    return data


def _parser() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    try:  # Python 3.10
        import tomli  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return tomli


def read(path: Path, array: str) -> TomlFile:
    """The file (empty when missing), its `array` checked to be an array of tables."""
    if not path.exists():
        return TomlFile(path, "", {})

    try:  # never a FIFO (it would block) or a directory
        text = read_regular(str(path), MAX_SETTINGS_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise SettingsError(f"{path} is not UTF-8 text; not changing it") from None
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror or exc}") from None
    data = loads(text, path)
    found = data.get(array)
    if found is not None and not (
        isinstance(found, list) and all(isinstance(t, dict) for t in found)
    ):
        raise SettingsError(f"{path}: `{array}` is not an array of tables; not changing it")
    return TomlFile(path, text, data)


def tables(file: TomlFile, array: str) -> list[dict[str, Any]]:
    found = file.data.get(array)
    return list(found) if isinstance(found, list) else []


def is_ours(table: dict[str, Any]) -> bool:
    """A hook table whose command is our hook's."""
    return our_command(table.get("command"))


def our_commands(file: TomlFile, array: str, event: str) -> dict[str, list[str]]:
    """Our tables' commands by the event their `event` key names (`event` in Kimi CLI's
    tables, `type` in Mistral Vibe's)."""
    found: dict[str, list[str]] = {}
    for entry in tables(file, array):
        if is_ours(entry) and isinstance(entry.get(event), str):
            found.setdefault(entry[event], []).append(entry["command"])
    return found


def without_ours(file: TomlFile, array: str) -> TomlFile | None:
    """The file without our tables; None when nothing else was in it (install made it)."""
    cleaned = without(file, array, is_ours)
    return cleaned if cleaned.text.strip() else None


def without(file: TomlFile, array: str, ours: Callable[[dict[str, Any]], bool]) -> TomlFile:
    """The file with the tables of `array` that `ours` accepts taken out, line by line."""
    lines = file.text.splitlines(keepends=True)
    header = re.compile(rf"\s*\[\[\s*{re.escape(array)}\s*\]\]\s*(#.*)?$")
    kept: list[str] = []
    i = 0
    while i < len(lines):
        if not header.match(lines[i]):
            kept.append(lines[i])
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not _HEADER.match(lines[end]):
            end += 1
        block = "".join(lines[i:end])
        if not _is_ours(block, array, ours):
            kept.extend(lines[i:end])
        i = end
    text = "".join(kept)
    if text != file.text:
        text = text.rstrip() + "\n" if text.strip() else ""
    rest = [t for t in tables(file, array) if not ours(t)]
    return _checked(file.path, text, _with_array(file.data, array, rest), array)


def with_tables(
    file: TomlFile,
    array: str,
    entries: list[dict[str, Any]],
    ours: Callable[[dict[str, Any]], bool],
) -> TomlFile:
    """The file with ours replaced by `entries`, appended as tables at its end."""
    cleaned = without(file, array, ours)
    text = cleaned.text
    if text and not text.endswith("\n"):
        text += "\n"
    for entry in entries:
        text += ("\n" if text else "") + table(array, entry)
    wanted = _with_array(cleaned.data, array, [*tables(cleaned, array), *entries])
    return _checked(file.path, text, wanted, array)


def table(array: str, entry: dict[str, Any]) -> str:
    """`[[array]]` and one `key = value` line per entry (strings, integers, booleans)."""
    lines = [f"[[{array}]]"]
    for key, value in entry.items():
        lines.append(f"{key} = {_value(value)}")
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    # JSON's string escapes are TOML's basic string escapes, less DEL, which TOML wants
    # escaped and JSON leaves alone (ensure_ascii=False: no surrogate pairs).
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")


def _is_ours(block: str, array: str, ours: Callable[[dict[str, Any]], bool]) -> bool:
    try:
        parsed = loads(block, "a table")
    except SettingsError:
        return False
    found = parsed.get(array)
    return isinstance(found, list) and len(found) == 1 and ours(found[0])


def _with_array(data: dict[str, Any], array: str, rest: list[dict[str, Any]]) -> dict[str, Any]:
    result = {k: v for k, v in data.items() if k != array}
    if rest:
        result[array] = rest
    return result


def _checked(path: Path, text: str, wanted: dict[str, Any], array: str) -> TomlFile:
    try:
        data = loads(text, path)
    except SettingsError:
        data = None
    if data != wanted:
        raise SettingsError(
            f"{path}: our hook tables cannot be changed there without rewriting other lines "
            f"(an inline `{array} = [...]`, or a table in an unusual layout); not changing it: "
            "make the change by hand"
        )
    return TomlFile(path, text, data)


def write(path: Path, file: TomlFile, backup: bool = True) -> Path | None:
    """`file`'s text into `path` (install's `--config-file` may name another file)."""
    return write_text(path, file.text, backup)
