"""Claude Code session JSONL (`~/.claude/projects/<project>/<session>.jsonl`).

One JSON entry per line. Calls are `tool_use` blocks in `assistant` entries (`name`,
`input`, `id`); outcomes are `tool_result` blocks in `user` entries (`tool_use_id`,
`is_error`). Subagent work is its own agent: entries with `isSidechain: true` carry the
subagent's `agentId` (in the session file itself, or in `subagents/agent-<id>.jsonl`), and
are judged as agent `<sessionId>/agent-<agentId>`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..common import Pending, json_objects, new_call, parse_time
from ..head import Head
from ..model import Problems, RecordedCall, Transcript

NAME = "claude-code"
HARNESS = "claude-code"  # replayed with the exempt spellings of the Claude Code hook
SUFFIXES: tuple[str, ...] = ()
ENTRY_TYPES = frozenset({"user", "assistant"})


def is_entry(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and obj.get("type") in ENTRY_TYPES
        and isinstance(obj.get("message"), dict)
        and ("sessionId" in obj or "uuid" in obj)
    )


def sniff(head: Head) -> bool:
    """A `user` or `assistant` entry among the first lines."""
    return any(is_entry(record) for record in head.records())


def read(path: str, problems: Problems) -> Iterator[Transcript]:
    label = os.path.basename(path)
    yield Transcript(source=path, format=NAME, label=label, _calls=lambda t: _calls(t, problems))


def agent_of(entry: dict[str, Any], fallback: str) -> str:
    session = entry.get("sessionId")
    base = session if isinstance(session, str) and session else fallback
    if entry.get("isSidechain"):
        sub = entry.get("agentId")
        return f"{base}/agent-{sub}" if isinstance(sub, str) and sub else f"{base}/sidechain"
    return base


def _calls(t: Transcript, problems: Problems) -> Iterator[RecordedCall]:
    fallback = os.path.basename(t.source).split(".")[0]
    pending = Pending()
    seen: set[str] = set()  # a resumed or re-streamed message repeats its tool_use blocks
    agents: set[str] = set()
    for number, entry in json_objects(t.source, problems):
        when = parse_time(entry.get("timestamp"))
        t.saw_time(when)
        message = entry.get("message")
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if not isinstance(content, list):
            continue
        kind = entry.get("type")
        if kind == "assistant":
            agent = agent_of(entry, fallback)
            for block in content:
                if not isinstance(block, dict) or block.get("type") != "tool_use":
                    continue
                name, call_id = block.get("name"), block.get("id")
                if not isinstance(name, str):
                    problems.report(t.source, number, "tool_use without a tool name")
                    continue
                if isinstance(call_id, str):
                    if call_id in seen:
                        continue
                    seen.add(call_id)
                agents.add(agent)
                call = new_call(agent, name, block.get("input"), when, call_id)
                yield from pending.add(call)
        elif kind == "user":
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    failed = bool(block.get("is_error"))
                    result = block.get("content")
                    yield from pending.resolve(block.get("tool_use_id"), failed, result)
    yield from pending.drain()
    t.meta["agents"] = len(agents)
