"""tau-bench results (`--format tau-bench`), and plain OpenAI chat message lists.

Accepted documents: a tau-bench results list (`[{task_id, reward, info, traj, trial}]`, one
run per record), one such record, a bare list of messages, or `{"messages": [...]}`.
A call is one entry of an assistant message's `tool_calls`: tool = `function.name`,
arguments = `function.arguments` parsed as JSON (the raw string when it does not parse).
Its outcome is the `role: "tool"` message with the same `tool_call_id`; tau-bench's tools
report a failure as a result text starting with "Error", so that counts as failed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..common import Pending, messages_of, new_call, text_of
from ..head import NO_ITEM, Head
from ..jsonstream import JsonStream, JsonStreamError
from ..model import Problems, RecordedCall, Transcript
from ..sources import open_text

NAME = "tau-bench"
HARNESS = None
SUFFIXES: tuple[str, ...] = ()


def is_message(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("role"), str)


def is_record(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("traj"), list)


def sniff(head: Head) -> bool:
    """A list of tau-bench records or of messages, or a record or `{"messages": [...]}`."""
    first = head.first_item()
    if first is not NO_ITEM:
        return is_record(first) or is_message(first)
    return bool(head.keys() & {"traj", "messages"})


def read(path: str, problems: Problems) -> Iterator[Transcript]:
    base = os.path.basename(path)
    with open_text(path) as fh:
        stream = JsonStream(fh)
        try:
            first = stream.peek()
            if first == "[":
                messages: list[Any] = []
                for index, _ in enumerate(stream.items()):
                    line = stream.line
                    item = stream.value()
                    if is_record(item):
                        yield _record(path, base, index, line, item, problems)
                    elif is_message(item):
                        messages.append(item)  # a bare message list is one run
                    else:
                        problems.report(path, line, f"list item {index} is not a run or a message")
                if messages:
                    yield _transcript(path, base, 1, base, messages, {}, problems)
            elif first == "{":
                line = stream.line
                obj = stream.value()
                if is_record(obj):
                    yield _record(path, base, 0, line, obj, problems)
                elif isinstance(obj, dict) and isinstance(obj.get("messages"), list):
                    yield _transcript(path, base, line, base, obj["messages"], {}, problems)
                else:
                    problems.report(path, line, "no tau-bench run or message list found")
            else:
                problems.report(path, stream.line, "not a JSON list or object")
            stream.end()
        except JsonStreamError as exc:
            problems.report(path, exc.line, f"invalid JSON ({exc}); rest of file skipped")


def _record(
    path: str, base: str, index: int, line: int, record: dict[str, Any], problems: Problems
) -> Transcript:
    task, trial = record.get("task_id"), record.get("trial")
    label = f"{base} task {task}" + (f" trial {trial}" if trial is not None else "")
    if task is None:
        label = f"{base} #{index}"
    meta: dict[str, Any] = {k: record[k] for k in ("task_id", "trial", "reward") if k in record}
    return _transcript(path, label, line, f"{base}#{index}", record["traj"], meta, problems)


def _transcript(
    path: str,
    label: str,
    line: int,
    agent: str,
    messages: list[Any],
    meta: dict[str, Any],
    problems: Problems,
) -> Transcript:
    def produce(t: Transcript) -> Iterator[RecordedCall]:
        return calls_from_messages(t, agent, messages, problems)

    return Transcript(source=path, format=NAME, label=label, line=line, meta=meta, _calls=produce)


def calls_from_messages(
    t: Transcript, agent: str, messages: list[Any], problems: Problems
) -> Iterator[RecordedCall]:
    pending = Pending()
    for message, when in messages_of(t, messages, problems):
        role = message.get("role")
        if role == "assistant":
            for tc in message.get("tool_calls") or ():
                function = tc.get("function") if isinstance(tc, dict) else None
                if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                    problems.report(t.source, t.line, f"{t.label}: a tool call without a name")
                    continue
                call = new_call(
                    agent, function["name"], function.get("arguments"), when, tc.get("id")
                )
                yield from pending.add(call)
        elif role == "tool":
            result = text_of(message.get("content"))
            failed = result.lstrip().startswith("Error")
            yield from pending.resolve(message.get("tool_call_id"), failed, result)
    yield from pending.drain()
