"""DeepSeek Harness (DSH) integration: a native plugin (js/dsh.mjs, shipped as package data)
that asks a long-lived guard process (`dsh-circuit-breaker serve --stdio`) before every
tool call; the patch row that inserts it (for `install dsh`, harnesses/dsh.py, and for the
npm package, package.py); a supervision skill (SKILL.md)."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN_ID = "circuit-breaker"  # the entry id users target with `- id: circuit-breaker`
NPM_NAME = "dsh-circuit-breaker"  # the npm package `dsh-package` writes for `dsh plugin add`


def plugin_path() -> Path:
    """Absolute path of the plugin file DSH imports."""
    return HERE.parent / "js" / "dsh.mjs"  # beside the guard client it imports


def skill_path() -> Path:
    """The supervision skill for DSH parent agents."""
    return HERE / "SKILL.md"


def insert_row(python: str) -> list[str]:
    """The patch row that inserts our entry, as lines."""
    # JSON strings are valid YAML scalars, so paths with any characters stay intact.
    return [
        "- insert:",
        f"    - id: {PLUGIN_ID}",
        f"      name: {json.dumps(str(plugin_path()))}",
        "      config:",
        f"        python: {json.dumps(python)}",
    ]
