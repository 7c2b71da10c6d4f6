"""The fenced code blocks of README.md and docs/*.md, with the marker comment before each.

A block is run by tests/test_docs.py unless an HTML comment on the line(s) just before its
fence says otherwise:

    <!-- excerpt: examples/langchain_agent.py -->   part of that program, which a test runs
    <!-- not-run: why it cannot run offline -->     shown only; the reason is required

Any other comment directly before a fence, or a marker that is not directly before one,
is an error, so a misspelt marker cannot silently turn a test off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKERS = ("excerpt", "not-run")

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARKER = re.compile(r"<!--\s*(?P<kind>[\w-]+)\s*:\s*(?P<arg>.*?)\s*(?:-->|$)", re.DOTALL)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str  # first word of the info string, lower case ("" when there is none)
    text: str  # the content, the fence's indentation removed
    marker: str | None = None  # "excerpt" or "not-run"
    arg: str = ""  # the marker's argument: the example's path, or the reason

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


class MarkerError(ValueError):
    pass


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    attached: set[int] = set()  # lines of the marker comments that belong to a block
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m["indent"], m["fence"]
        end = i + 1
        while end < len(lines) and not _closes(lines[end], fence):
            end += 1
        body = [
            line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : end]
        ]
        marker, arg, where = _marker_before(lines, i, path)
        attached.update(where)
        info = m["info"].strip().split()
        found.append(
            Block(path, i + 1, info[0].lower() if info else "", "\n".join(body) + "\n", marker, arg)
        )
        i = end + 1
    for number, line in enumerate(lines):
        m = _MARKER.match(line.strip())
        if m and m["kind"] in MARKERS and number not in attached:
            raise MarkerError(f"{path.name}:{number + 1}: a marker must be directly before a fence")
    return found


def all_blocks() -> list[Block]:
    return [block for path in DOCS for block in blocks(path)]


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence) and set(stripped) == {fence[0]}


def _marker_before(lines: list[str], fence: int, path: Path) -> tuple[str | None, str, range]:
    """The marker comment ending on the last non-blank line before the fence, if any."""
    last = fence - 1
    while last >= 0 and not lines[last].strip():
        last -= 1
    if last < 0 or not lines[last].rstrip().endswith("-->"):
        return None, "", range(0)
    first = last
    while first > 0 and "<!--" not in lines[first]:
        first -= 1
    comment = "\n".join(lines[first : last + 1])
    m = _MARKER.fullmatch(comment.strip())
    if not m or m["kind"] not in MARKERS:
        raise MarkerError(
            f"{path.name}:{first + 1}: the comment before a fence must be one of "
            f"{', '.join(f'<!-- {k}: ... -->' for k in MARKERS)}"
        )
    return m["kind"], " ".join(m["arg"].split()), range(first, last + 1)
