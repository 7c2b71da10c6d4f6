"""Writing reports: a streamed JSON document, or a plain table printed row by row, so
that a report over a huge directory never holds every row in memory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO


class JsonReport:
    """`{"command": ..., <head>, "runs": [...], <tail>}`, with runs written as they come."""

    def __init__(self, out: TextIO, command: str, head: dict[str, Any]) -> None:
        self.out = out
        self.first = True
        start = {"command": command, **head}
        body = json.dumps(start, ensure_ascii=False)
        out.write(body[:-1] + (', "runs": [' if len(start) else '"runs": ['))

    def run(self, row: dict[str, Any]) -> None:
        self.out.write(("\n  " if self.first else ",\n  ") + json.dumps(row, ensure_ascii=False))
        self.first = False

    def close(self, tail: dict[str, Any]) -> None:
        rest = json.dumps(tail, ensure_ascii=False, indent=1)
        self.out.write("\n]" + (", " + rest[1:] if tail else "}") + "\n")


class Table:
    """Fixed-width columns; the last column takes what is left of the line."""

    def __init__(self, out: TextIO, columns: Sequence[tuple[str, int, str]]) -> None:
        self.out = out
        self.columns = columns  # (title, width, align '<' or '>')
        self.row([title for title, _, _ in columns])

    def row(self, cells: Sequence[str]) -> None:
        parts = []
        last = len(self.columns) - 1
        for i, ((_, width, align), cell) in enumerate(zip(self.columns, cells, strict=False)):
            if len(cell) > width > 1:
                if i < last:  # run labels differ at the end (task 10, task 15): keep both ends
                    head = (width - 1) // 2
                    cell = cell[:head] + "…" + cell[len(cell) - (width - 1 - head) :]
                else:
                    cell = cell[: width - 1] + "…"
            parts.append(f"{cell:{align}{width}}")
        self.out.write("  ".join(parts).rstrip() + "\n")
