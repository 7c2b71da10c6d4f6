"""What an end-to-end run of a real harness left behind: the lines its commands appended to
a side-effect file, and the incident log's entries."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any


def side_lines(path: Path) -> list[str]:
    """The lines commands appended to `path` (none: the file was never written)."""
    return path.read_text().splitlines() if path.exists() else []


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The entries of a JSON-lines file such as the incident log ([] when missing)."""
    return [json.loads(line) for line in side_lines(path)]


# The healthy edit-and-test cycle's project: `python3 check.py` logs the value in app.py.
CHECK_SCRIPT = """import pathlib
value = pathlib.Path("app.py").read_text().strip()
with open("test-runs.log", "a") as log:
    log.write(value + "\\n")
"""


def edit_test_project(work: Path) -> Path:
    """app.py (`value = 0`) and its check.py in `work`; returns app.py's path."""
    (work / "check.py").write_text(CHECK_SCRIPT)
    app = work / "app.py"
    app.write_text("value = 0\n")
    return app


def run_json_lines(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 300
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run a harness CLI headless (no stdin) and read the JSON objects it printed, one per
    line (its `--json` / `--output-format json` stream)."""
    done = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done, events
