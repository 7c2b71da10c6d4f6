"""A scripted fake model speaking the OpenAI Responses API (streaming), for driving the
real Codex CLI. The harness is real; only the model is fake (as `fake_anthropic` is for
Anthropic-API harnesses).

    with FakeOpenAI([function_call("exec_command", {"cmd": "ls"}), "Done."]) as model:
        ... point Codex's model provider at model.url (wire_api = "responses") ...
        assert model.function_outputs()[0].output == "..."

A turn is one response: a `str` (an assistant message), a `dict` item (from
`function_call(...)`/`message(...)`), a list of items, or a callable `f(request_body)`
returning one of those. Each POST to `.../responses` takes the next turn; when the script
runs out, `after` is the reply. Every request body is logged in `requests`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from support.scripted_server import ScriptedHandler, ScriptedServer

Item = dict[str, Any]
_ids = itertools.count(1)


def message(text: str) -> Item:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def function_call(name: str, arguments: dict[str, Any]) -> Item:
    """A function call item; ids are filled in fresh each time it is sent."""
    return {"type": "function_call", "name": name, "arguments": json.dumps(arguments)}


@dataclass(frozen=True)
class FunctionOutput:
    """One `function_call_output` the harness sent back to the model."""

    call_id: str
    output: str


def _items(turn: Any, body: dict[str, Any]) -> list[Item]:
    if callable(turn):
        turn = turn(body)
    if isinstance(turn, str):
        turn = message(turn)
    items = [turn] if isinstance(turn, dict) else list(turn)
    fresh = []
    for item in items:
        item = dict(item)
        n = next(_ids)
        item["id"] = f"{'fc' if item['type'] == 'function_call' else 'msg'}_fake_{n:05d}"
        if item["type"] == "function_call":
            item["call_id"] = f"call_fake_{n:05d}"
        item.setdefault("status", "completed")
        fresh.append(item)
    return fresh


def outputs_of(body: dict[str, Any]) -> list[FunctionOutput]:
    found = []
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if not isinstance(output, str):
                output = json.dumps(output)
            found.append(FunctionOutput(str(item.get("call_id")), output))
    return found


class FakeOpenAI(ScriptedServer):
    def __init__(self, turns: Iterable[Any] = (), *, after: Any = "Done.") -> None:
        super().__init__(turns, after)
        self.sent: list[Item] = []  # every item this server answered with, in order

    @property
    def url(self) -> str:
        """Base URL for a model provider's `base_url` (requests go to `{url}/responses`)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def function_calls(self) -> list[Item]:
        with self._lock:
            return [i for i in self.sent if i["type"] == "function_call"]

    def function_outputs(self) -> list[FunctionOutput]:
        """Each call's output as the model was sent it (by call_id, first seen)."""
        seen: dict[str, FunctionOutput] = {}
        with self._lock:
            bodies = list(self.requests)
        for body in bodies:
            for out in outputs_of(body):
                seen.setdefault(out.call_id, out)
        return list(seen.values())

    def _reply(self, body: dict[str, Any]) -> list[Item]:
        items = _items(self._take(), body)
        with self._lock:
            self.sent.extend(items)
        return items


def _events(items: list[Item], number: int) -> list[dict[str, Any]]:
    rid = f"resp_fake_{number:05d}"
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}
    ]
    for index, item in enumerate(items):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append(
        {
            "type": "response.completed",
            "response": {"id": rid, "status": "completed", "output": items, "usage": usage},
        }
    )
    return events


class _Handler(ScriptedHandler):
    fake: FakeOpenAI

    def do_GET(self) -> None:
        self.send_json(200, {"object": "list", "data": []})

    def answer_post(self, path: str, body: dict[str, Any], number: int) -> None:
        if not self.path.rstrip("/").endswith("/responses"):
            self.send_json(404, {"error": {"message": "not found"}})
            return
        items = self.fake._reply(body)
        self.send_events((e["type"], e) for e in _events(items, number))

    def error_payload(self, message: str) -> dict[str, Any]:
        return {"error": message}


FakeOpenAI.handler = _Handler


__all__ = [
    "FakeOpenAI",
    "FunctionOutput",
    "function_call",
    "message",
    "outputs_of",
]
