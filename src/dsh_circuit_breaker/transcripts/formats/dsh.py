"""DeepSeek Harness session logs: `session*.jsonl` and zstd `session.v4.jsonl.zstd`.

A header line (`{"type":"session","id":...,"createdAt":ms,"parentSession":...}`), then one
event per line. A call is a `tool/call` event (`data.name`, `data.arguments` as a JSON
string, `data.callId`); its outcome is the `tool/result` event whose tool-result part
carries `toolCallId` and `isError`. One session file is one run of one agent; a subagent
writes its own session file (header `origin: "subagent"`), so it is its own agent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..common import Pending, json_objects, new_call, parse_time
from ..head import Head
from ..model import Problems, RecordedCall, Transcript

NAME = "dsh"
HARNESS = None  # replayed with SPEC's defaults
SUFFIXES: tuple[str, ...] = ()


def is_header(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("type") == "session" and isinstance(obj.get("id"), str)


def sniff(head: Head) -> bool:
    """A session header as the first line."""
    records = head.records()
    return bool(records) and is_header(records[0])


def read(path: str, problems: Problems) -> Iterator[Transcript]:
    yield Transcript(
        source=path, format=NAME, label=_label(path), _calls=lambda t: _calls(t, problems)
    )


def _label(path: str) -> str:
    # session.v4.jsonl.zstd lives in a directory named after the session: show both.
    name = os.path.basename(path)
    if name.startswith("session.") or name == "session.jsonl":
        return os.path.join(os.path.basename(os.path.dirname(path)) or ".", name)
    return name


def _calls(t: Transcript, problems: Problems) -> Iterator[RecordedCall]:
    agent = t.source
    pending = Pending()
    for number, event in json_objects(t.source, problems):
        if number == 1 or event.get("type") == "session":
            if is_header(event):
                agent = event["id"]
                short = agent.removeprefix("session-")[:8]
                t.label = f"{_label(t.source)} ({short})"
                parent = event.get("parentSession")
                if event.get("origin") == "subagent" and isinstance(parent, str):
                    t.label += f" subagent of {parent[:8]}"
                t.saw_time(parse_time(event.get("createdAt")))
                for key in ("parentSession", "origin", "delegationDepth"):
                    if key in event:
                        t.meta[key] = event[key]
                continue
            if number == 1:
                problems.report(t.source, 1, "no DSH session header; agent named by file")
        if event.get("type") == "event" and isinstance(event.get("event"), dict):
            event = event["event"]  # the wrapped record form of the same event
        when = parse_time(event.get("time"))
        t.saw_time(when)
        kind = event.get("type")
        data = event.get("data")
        if kind == "tool/call":
            if not isinstance(data, dict) or not isinstance(data.get("name"), str):
                problems.report(t.source, number, "tool/call without a tool name")
                continue
            call_id = data.get("callId")
            call = new_call(agent, data["name"], data.get("arguments"), when, call_id)
            yield from pending.add(call)
        elif kind == "tool/result" and isinstance(data, dict):
            for call_id, failed, result in _outcomes(data):
                yield from pending.resolve(call_id, failed, result)
    yield from pending.drain()


def _outcomes(data: dict[str, Any]) -> Iterator[tuple[Any, bool, Any]]:
    """(call id, failed, result content) for each call a tool/result event answers. Two
    shapes are in use: the fixtures' `message.content[]` parts of type `tool-result`
    carrying `toolCallId` and `isError`, and DSH 0.2.1's v4 log, where the `role: "tool"`
    message itself carries `toolCallId` and `isError` (and `source.callId`)."""
    message = data.get("message")
    errored = data.get("error") is not None
    if not isinstance(message, dict):
        return
    found = False
    for part in message.get("content") or ():
        if isinstance(part, dict) and part.get("type") == "tool-result":
            found = True
            failed = bool(part.get("isError")) or errored
            yield part.get("toolCallId"), failed, part.get("content")
    if found:
        return
    call_id = message.get("toolCallId")
    source = message.get("source")
    if call_id is None and isinstance(source, dict):
        call_id = source.get("callId")
    yield call_id, bool(message.get("isError")) or errored, message.get("content")
