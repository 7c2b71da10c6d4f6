"""The results scenario every plugin harness's end-to-end suite runs (issues 25, 32): with
`resultProgress` (on by default), a poll whose output moves runs past duplicateLimit's
copies; the same poll frozen is refused at the limit-th copy. Both polls are shell commands
that count their runs in a file (so what really ran is on disk) and print a line: the
moving one its run number, the frozen one always the same line.
"""

from __future__ import annotations

from pathlib import Path

COPIES = 10  # of each poll: past the default duplicateLimit (6) and its refusals
CONFIG = {"stopAfterDenials": 0}  # refuse only, never stop; resultProgress is the default


def poll(counter: Path, moving: bool) -> str:
    """The poll's shell command; each run adds one to `counter`."""
    line = 'echo "step $n"' if moving else 'echo "step"'
    return f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; {line}"


def runs(counter: Path) -> int:
    """How many times the poll that counts in `counter` really ran."""
    return int(counter.read_text()) if counter.exists() else 0


def refused(limit: int = 6, copies: int = COPIES) -> list[bool]:
    """Which copies of the frozen poll are refused: the `limit`-th and every one after it."""
    return [False] * (limit - 1) + [True] * (copies - limit + 1)
