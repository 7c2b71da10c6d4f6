"""Read `dsh --dump-config`: the composed entry tree DSH prints as YAML.

The dump is real YAML with DSH's own `!!js` tag (an expression DSH evaluates at boot),
long scalars folded (`>-`) and quoted ones, so it is read with PyYAML (the `dsh` extra),
never line by line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from . import PLUGIN_ID, plugin_path


class Expression(str):
    """A value under a tag YAML does not define (`!!js ...`): kept as its source text."""

    __slots__ = ()


def load(dump: str) -> list[dict[str, Any]]:
    """Every entry in the dump, groups' members included, in order. Raises ImportError
    without PyYAML and ValueError on output that is not DSH's entry list."""
    import yaml  # type: ignore[import-untyped,unused-ignore]

    def tagged(loader: Any, node: Any) -> Any:
        # The constructor for tags SafeLoader does not know; the value itself stays.
        if isinstance(node, yaml.ScalarNode):
            return Expression(loader.construct_scalar(node))
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_mapping(node, deep=True)

    loader: Any = type("DumpLoader", (yaml.SafeLoader,), {})
    loader.add_constructor(None, tagged)
    try:
        rows = yaml.load(dump, Loader=loader)
    except yaml.YAMLError as exc:
        raise ValueError(f"dsh --dump-config printed something that is not YAML: {exc}") from None
    if not isinstance(rows, list):
        raise ValueError("dsh --dump-config did not print a list of entries")
    return _flatten(rows)


def _flatten(rows: list[Any]) -> list[dict[str, Any]]:
    # As DSH's own composer addresses them: a group's members are entries too.
    out: list[dict[str, Any]] = []
    for row in rows:
        if isinstance(row, dict):
            out.append(row)
            if row.get("group") and isinstance(row.get("config"), list):
                out += _flatten(row["config"])
    return out


def file_of(name: Any) -> Path | None:
    """The file an entry's `name` points at (a `file://` URI or an absolute path)."""
    if not isinstance(name, str):
        return None
    if name.startswith("file://"):
        return Path(unquote(urlparse(name).path))
    path = Path(name)
    return path if path.is_absolute() else None


def find_entries(dump: str) -> list[dict[str, Any]]:
    """Our entries in `dsh --dump-config` output: those whose id is ours or whose module
    is our plugin file."""
    ours = plugin_path()
    return [e for e in load(dump) if e.get("id") == PLUGIN_ID or file_of(e.get("name")) == ours]
