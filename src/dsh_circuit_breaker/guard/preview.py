"""What an agent repeated, for the live page: "`echo cbprobe4` x6 ran, x4 refused".

The store holds digests only; the resident HTTP guard sees each call's arguments, so it
can keep a short preview of the call an agent is repeating. That preview lives in this
process's memory only (never in the store, a log or a file), is cut to PREVIEW_CHARS,
has secret-looking values masked, and is off with `previewArguments = false`.
"""

from __future__ import annotations

import json
import re
from typing import Any

PREVIEW_CHARS = 80
MASK = "***"
# An argument whose name says it holds a secret is masked whole.
SECRET_NAME = re.compile(r"pass(word|wd)?|secret|token|api[-_]?key|auth|credential|cookie", re.I)
# Values that look like secrets wherever they appear: key=value pairs with such a name,
# bearer tokens, well-known key prefixes, and long runs of base64 or hex.
SECRET_VALUE = re.compile(
    r"(?i)((?:pass(?:word|wd)?|secret|token|api[-_]?key|auth)\w*\s*[=:]\s*)(?:bearer\s+)?\S+"
    r"|(?i:bearer\s+)\S+"
    r"|\b(?:sk|pk|ghp|gho|ghs|xox[abp]|AKIA)[-_A-Za-z0-9]{8,}"
    r"|\b(?P<run>[A-Za-z0-9+]{24,}={0,2})"
)


def masked(text: str) -> str:
    return SECRET_VALUE.sub(_mask, text)


def _mask(found: re.Match[str]) -> str:
    run = found.group("run")
    if run is not None and not _random_looking(run):
        return run  # a long word or number, not a key
    return (found.group(1) or "") + MASK


def _random_looking(text: str) -> bool:
    """A long run with both letters and digits (hex, base64): a key more often than not."""
    return any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


def preview(arguments: Any, ignored: tuple[str, ...] = ()) -> str:
    """One line: a call's only argument as itself (`echo cbprobe4`), else `name=value`
    pairs; annotation arguments (`ignored`, which the breaker drops too) left out."""
    if isinstance(arguments, dict):
        kept = {k: v for k, v in arguments.items() if k not in ignored}
        if len(kept) == 1 and isinstance(next(iter(kept.values())), str):
            ((name, value),) = kept.items()
            text = MASK if SECRET_NAME.search(str(name)) else masked(value)
        else:
            text = " ".join(f"{k}={_value(k, v)}" for k, v in kept.items())
    else:
        text = masked(_json(arguments))
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _value(name: object, value: Any) -> str:
    if SECRET_NAME.search(str(name)):
        return MASK
    return masked(value if isinstance(value, str) else _json(value))


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)[: PREVIEW_CHARS * 4]
    except (ValueError, RecursionError):
        return "?"


class Repeat:
    """The call an agent made last, and how often in a row it ran and was refused."""

    __slots__ = ("ran", "refused", "text", "tool")

    def __init__(self) -> None:
        self.tool = self.text = ""
        self.ran = self.refused = 0

    def saw(self, tool: str, text: str, allowed: bool) -> None:
        if (tool, text) != (self.tool, self.text):
            self.tool, self.text, self.ran, self.refused = tool, text, 0, 0
        if allowed:
            self.ran += 1
        else:
            self.refused += 1

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "preview": self.text, "ran": self.ran, "refused": self.refused}
