"""JSON with comments (Zed's and VS Code's settings files), read and edited in place.

`loads` reads a file with `//` and `/* */` comments and trailing commas. `replace` swaps
the values of some members of a top-level object for new ones and leaves every other
byte of the file as it was, its comments included: an install that rewrote a user's
settings file through `json.dumps` would drop them all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_DECODER = json.JSONDecoder()


def blank_comments(text: str) -> str:
    """`text` with its comments and trailing commas replaced by spaces (newlines kept), so
    every offset in it is an offset in `text`."""
    out = list(text)
    i, n = 0, len(text)
    last = -1  # offset of the last comma outside strings and comments, if nothing since
    while i < n:
        c = text[i]
        if c == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            i, last = end + 1, -1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out[i:end] = [ch if ch == "\n" else " " for ch in text[i:end]]
            i = end
        else:
            if c in "}]" and last >= 0:
                out[last] = " "  # a trailing comma
            if c == ",":
                last = i
            elif not c.isspace():
                last = -1
            i += 1
    return "".join(out)


def loads(text: str) -> Any:
    """Parse JSON with comments and trailing commas; ValueError if it is not that."""
    return json.loads(blank_comments(text))


def member_spans(text: str, key: str) -> dict[str, tuple[int, int]]:
    """For the object at top-level `key`: each member's name -> the span of its value in
    `text` (comments and all around it untouched). ValueError if there is no such object."""
    clean = blank_comments(text)
    top = _members(clean, _skip(clean, 0))
    if key not in top:
        raise ValueError(f"no top-level {key!r}")
    return _members(clean, top[key][0])


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _members(text: str, i: int) -> dict[str, tuple[int, int]]:
    if not text.startswith("{", i):
        raise ValueError("not an object")
    spans: dict[str, tuple[int, int]] = {}
    i = _skip(text, i + 1)
    while not text.startswith("}", i):
        name, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        if not text.startswith(":", i) or not isinstance(name, str):
            raise ValueError("malformed object")
        start = _skip(text, i + 1)
        _, end = _DECODER.raw_decode(text, start)
        spans[name] = (start, end)
        i = _skip(text, end)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
    return spans


def replace(text: str, key: str, values: Mapping[str, Any]) -> str:
    """`text` with the values of these members of top-level `key`'s object replaced (each
    indented as the line it starts on); nothing else changes."""
    spans = member_spans(text, key)
    for name, (start, end) in sorted(
        ((n, spans[n]) for n in values), key=lambda item: item[1][0], reverse=True
    ):
        line = text[text.rfind("\n", 0, start) + 1 : start]
        indent = line[: len(line) - len(line.lstrip())]
        dumped = json.dumps(values[name], indent=2, ensure_ascii=False)
        text = text[:start] + dumped.replace("\n", "\n" + indent) + text[end:]
    return text
