"""The docs quote the denial texts literally; they must not drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsh_circuit_breaker.messages import DEFAULT_MESSAGES

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
START = "Circuit breaker: this "


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{(?:tool|count|limit|kind)\}", template)
    return re.compile(r"[^\s.]+".join(re.escape(p) for p in parts))


PATTERNS = {kind: _pattern(text) for kind, text in DEFAULT_MESSAGES.items()}


def quoted_denials(path: Path) -> list[str]:
    # Blockquotes wrap the text over lines: drop the markers, then collapse whitespace.
    text = re.sub(r"(?m)^\s*>\s?", "", path.read_text(encoding="utf-8"))
    text = " ".join(text.split())
    return [text[m.start() :] for m in re.finditer(re.escape(START), text)]


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_every_quoted_denial_is_a_default_text(path: Path) -> None:
    for quoted in quoted_denials(path):
        matched = [kind for kind, p in PATTERNS.items() if p.match(quoted)]
        assert matched, f"{path.name} quotes a denial text the code does not send:\n{quoted[:300]}"


def test_readme_and_every_integration_doc_show_both_texts() -> None:
    for path in DOCS:
        if path.name == "transcripts.md":
            continue  # replay reports denials; it does not send them to a model
        kinds = {k for q in quoted_denials(path) for k, p in PATTERNS.items() if p.match(q)}
        assert {"duplicate", "cap"} <= kinds, f"{path.name} lacks a literal denial text"


def test_pattern_rejects_a_changed_text() -> None:
    changed = DEFAULT_MESSAGES["duplicate"].replace("NOT run", "not run")
    assert not PATTERNS["duplicate"].match(changed.format(tool="t", count=1, limit=2, kind="x"))
