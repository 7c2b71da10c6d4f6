"""Small helpers the format readers share."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from .model import Problems, RecordedCall, Transcript
from .sources import open_text


def parse_time(value: Any) -> float | None:
    """Seconds since the epoch from an ISO 8601 string or a number (seconds or ms)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        # Harnesses write milliseconds (DSH) or seconds; no real run predates 1973 in ms.
        return float(value) / 1000.0 if value > 1e11 else float(value)
    if isinstance(value, str) and value:
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
        if parsed.tzinfo is None:  # tau2-bench writes naive local times; read them as UTC
            parsed = parsed.replace(tzinfo=timezone.utc)
        return parsed.timestamp()
    return None


def parse_arguments(raw: Any) -> Any:
    """A call's arguments as the breaker would see them: the parsed JSON when the model's
    JSON parses, else the raw string itself (SPEC: that string is the comparable value)."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def json_objects(path: str, problems: Problems) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each line of a JSON-lines file. Blank lines are passed over;
    a line that is not JSON, or not a JSON object, is reported and skipped."""
    with open_text(path) as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.report(path, number, f"not JSON ({exc.msg})")
                continue
            if not isinstance(obj, dict):
                problems.report(path, number, "not a JSON object")
                continue
            yield number, obj


def messages_of(
    t: Transcript, messages: list[Any], problems: Problems
) -> Iterator[tuple[dict[str, Any], float | None]]:
    """(message, its time) for each message of an in-memory message list, recording the
    time on `t`; an item that is not an object is reported and skipped."""
    for message in messages:
        if not isinstance(message, dict):
            problems.report(t.source, t.line, f"{t.label}: a message is not an object")
            continue
        when = parse_time(message.get("timestamp"))
        t.saw_time(when)
        yield message, when


def new_call(
    agent: str, tool: str, arguments: Any, when: float | None, call_id: Any
) -> RecordedCall:
    """A call as the breaker would have seen it: `arguments` parsed as `parse_arguments`
    does. An id that is not a string cannot be matched to a result, so it is dropped."""
    return RecordedCall(
        agent=agent,
        tool=tool,
        arguments=parse_arguments(arguments),
        time=when,
        call_id=call_id if isinstance(call_id, str) else None,
    )


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


class Pending:
    """Holds calls until their result says whether they failed, and releases them in the
    order they were made. Calls whose result never comes are released at the end, or once
    more than `limit` are waiting, so memory stays bounded on a broken transcript."""

    def __init__(self, limit: int = 1024) -> None:
        self._queue: deque[RecordedCall] = deque()
        self._open: dict[str, RecordedCall] = {}
        self._limit = limit

    def add(self, call: RecordedCall) -> Iterator[RecordedCall]:
        if call.call_id is not None and call.call_id not in self._open:
            self._open[call.call_id] = call
        else:
            call.call_id = None  # no id (or a reused one): its result cannot be matched
        self._queue.append(call)
        while len(self._queue) > self._limit:
            yield self._pop()
        yield from self.ready()

    def resolve(self, call_id: Any, failed: bool, result: Any = None) -> Iterator[RecordedCall]:
        if isinstance(call_id, str):
            call = self._open.pop(call_id, None)
            if call is not None:
                call.failed = failed
                call.result = text_of(result)
        yield from self.ready()

    def ready(self) -> Iterator[RecordedCall]:
        while self._queue and (self._queue[0].call_id is None or self._queue[0].failed is not None):
            yield self._pop()

    def drain(self) -> Iterator[RecordedCall]:
        while self._queue:
            yield self._pop()

    def _pop(self) -> RecordedCall:
        call = self._queue.popleft()
        if call.call_id is not None:
            self._open.pop(call.call_id, None)
        return call
