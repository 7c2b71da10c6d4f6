"""What every transcript reader produces: transcripts of tool calls, and the problems met."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class RecordedCall:
    """One tool call as the harness ran it.

    `arguments` is what the breaker would have been given: usually the parsed JSON object,
    or the raw string when the model's JSON did not parse. `failed` is None where the
    transcript does not say (the call's result was never recorded); `result` is then None
    too, and otherwise the result's text, which replay hands to `CircuitBreaker.observe`.
    """

    agent: str
    tool: str
    arguments: Any
    time: float | None = None  # seconds since the epoch
    failed: bool | None = None
    call_id: str | None = None
    result: str | None = None
    digest: bytes | None = None  # the result's, once replay has made it (results.py)


@dataclass
class Transcript:
    """One recorded run: a session file, a simulation, a trajectory.

    `calls()` streams the calls in the order they were made; it can be iterated once.
    Several agents may share a transcript (a Claude Code session with subagents): each
    call names its agent, and every agent is judged on its own. `start` and `end` are
    filled in as the calls are read (timestamps of any event, not only of calls).
    """

    source: str
    format: str
    label: str
    line: int = 1
    meta: dict[str, Any] = field(default_factory=dict)
    start: float | None = None
    end: float | None = None
    times: int = 0  # how many timestamps were seen: a duration needs two
    _calls: Callable[[Transcript], Iterator[RecordedCall]] | None = field(default=None, repr=False)

    def calls(self) -> Iterator[RecordedCall]:
        if self._calls is None:
            return iter(())
        produce, self._calls = self._calls, None  # streamed: a second pass would re-read
        return produce(self)

    def saw_time(self, when: float | None) -> None:
        if when is None:
            return
        self.times += 1
        if self.start is None or when < self.start:
            self.start = when
        if self.end is None or when > self.end:
            self.end = when

    @property
    def duration(self) -> float | None:
        if self.start is None or self.end is None or self.times < 2:
            return None
        return self.end - self.start


@dataclass(frozen=True)
class Problem:
    """A line or file that could not be read; it was skipped, the report goes on."""

    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


class Writer(Protocol):
    """Where problems are printed: a text stream, or a `Progress` in front of one."""

    def write(self, text: str, /) -> int: ...


class Problems:
    """Collects what was skipped. Prints each problem to `stream` as it happens (so a long
    run shows them early), keeps the first `keep` for the JSON report, and counts all."""

    def __init__(self, stream: Writer | None = sys.stderr, keep: int = 200) -> None:
        self.stream = stream
        self.keep = keep
        self.items: list[Problem] = []
        self.count = 0
        self.notes: set[str] = set()  # one-time hints, such as a missing optional package

    def report(self, path: str, line: int | None, message: str) -> None:
        problem = Problem(path, line, message)
        self.count += 1
        if len(self.items) < self.keep:
            self.items.append(problem)
        if self.stream is not None and self.count <= self.keep:
            print(f"skipped: {problem}", file=self.stream)
            if self.count == self.keep:
                print("skipped: (further problems are counted, not printed)", file=self.stream)

    def note(self, text: str) -> None:
        if text in self.notes:
            return
        self.notes.add(text)
        if self.stream is not None:
            print(text, file=self.stream)

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "shown": [{"path": p.path, "line": p.line, "message": p.message} for p in self.items],
            "notes": sorted(self.notes),
        }
