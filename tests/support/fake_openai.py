"""A scripted fake model speaking the OpenAI API, for driving real harnesses and real
OpenAI clients: the Responses API (`POST .../responses`, what Codex and the Agents SDK
use) and Chat Completions (`POST /v1/chat/completions` or `/chat/completions`, what most
OpenAI-compatible clients use), each streamed when the request asks for it, plus
`GET .../models`. Turns are scripted as for every fake (see `scripted_server`).

    with FakeOpenAI([function_call("exec_command", {"cmd": "ls"}), "Done."]) as model:
        ... point the client's base URL at model.url ...
        assert model.tool_results()[0].text == "..."

Neither API has an error flag on a tool result: `ToolResult.is_error` is always False,
and a refusal is told apart by its text only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from support.scripted_server import (
    Block,
    ScriptedHandler,
    ScriptedServer,
    ToolResult,
    Turn,
    rough_tokens,
    text_of,
    tool_call,
)

function_call = tool_call  # the OpenAI name for a scripted tool call
CHAT_STOP = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length"}


def outputs_of(body: dict[str, Any]) -> list[ToolResult]:
    """The tool results in one request body, of either API, in order: Responses
    `function_call_output` items, or Chat Completions `tool` messages."""
    if "input" in body:
        items = [i for i in body.get("input") or [] if isinstance(i, dict)]
        names = {i.get("call_id"): i.get("name") for i in items if i.get("type") == "function_call"}
        outputs = [i for i in items if i.get("type") == "function_call_output"]
        return [_result(i, str(i.get("call_id")), i.get("output"), names) for i in outputs]
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    names = {
        c.get("id"): (c.get("function") or {}).get("name")
        for m in messages
        for c in m.get("tool_calls") or []
    }
    tools = [m for m in messages if m.get("role") == "tool"]
    return [_result(m, str(m.get("tool_call_id")), m.get("content"), names) for m in tools]


def _result(raw: Block, call_id: str, content: Any, names: dict[Any, Any]) -> ToolResult:
    return ToolResult(call_id, False, text_of(content), raw, str(names.get(call_id) or ""))


class FakeOpenAI(ScriptedServer):
    model_paths = ("/responses", "/chat/completions")
    results_of = staticmethod(outputs_of)

    @property
    def url(self) -> str:
        """Base URL for a client's `base_url` (requests go to `{url}/responses`,
        `{url}/chat/completions`)."""
        return f"{self.origin}/v1"

    # -- the Responses API -----------------------------------------------------------
    def items(self, turn: Turn, number: int) -> list[Block]:
        items: list[Block] = []
        for index, block in enumerate(turn.blocks):
            suffix = f"{number:05d}_{index}"
            if block["type"] == "tool_use":
                items.append(
                    {
                        "type": "function_call",
                        "id": f"fc_fake_{suffix}",
                        "call_id": block["id"],
                        "name": block["name"],
                        "arguments": json.dumps(block["input"]),
                        "status": "completed",
                    }
                )
            elif block["type"] == "text":
                part = {"type": "output_text", "text": block["text"], "annotations": []}
                items.append(
                    {
                        "type": "message",
                        "id": f"msg_fake_{suffix}",
                        "role": "assistant",
                        "status": "completed",
                        "content": [part],
                    }
                )
        return items

    def response(self, turn: Turn, body: dict[str, Any], number: int) -> dict[str, Any]:
        tokens = rough_tokens(body)
        return {
            "id": f"resp_fake_{number:05d}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body.get("model") or self.model,
            "output": self.items(turn, number),
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "usage": {
                "input_tokens": tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": tokens + 5,
            },
        }

    def response_events(self, turn: Turn, body: dict[str, Any], number: int) -> Iterator[Block]:
        done = self.response(turn, body, number)
        started = dict(done, status="in_progress", output=[], usage=None)
        yield {"type": "response.created", "response": started}
        for index, item in enumerate(done["output"]):
            yield {"type": "response.output_item.added", "output_index": index, "item": item}
            yield {"type": "response.output_item.done", "output_index": index, "item": item}
        yield {"type": "response.completed", "response": done}

    # -- Chat Completions ------------------------------------------------------------
    def completion(self, turn: Turn, body: dict[str, Any], number: int) -> dict[str, Any]:
        message: Block = {"role": "assistant", "content": "".join(turn.texts) or None}
        if turn.calls:
            message["tool_calls"] = [_chat_call(call) for call in turn.calls]
        choice = {"index": 0, "message": message, "finish_reason": _chat_stop(turn)}
        envelope = self._chat_envelope(body, number, "chat.completion")
        return dict(envelope, choices=[choice], usage=_chat_usage(body))

    def completion_chunks(self, turn: Turn, body: dict[str, Any], number: int) -> Iterator[Block]:
        envelope = self._chat_envelope(body, number, "chat.completion.chunk")

        def chunk(delta: Block, finish: str | None = None) -> Block:
            return dict(envelope, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])

        yield chunk({"role": "assistant", "content": ""})
        for piece in turn.texts:
            yield chunk({"content": piece})
        for index, call in enumerate(turn.calls):
            opening = dict(_chat_call(call), index=index)
            opening["function"] = dict(opening["function"], arguments="")
            yield chunk({"tool_calls": [opening]})
            raw = json.dumps(call["input"])
            cut = len(raw) // 2  # two fragments, as real streams split arguments
            for fragment in (raw[:cut], raw[cut:]):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        yield chunk({}, _chat_stop(turn))
        if (body.get("stream_options") or {}).get("include_usage"):
            yield dict(envelope, choices=[], usage=_chat_usage(body))

    def _chat_envelope(self, body: dict[str, Any], number: int, kind: str) -> Block:
        return {
            "id": f"chatcmpl-fake-{number:05d}",
            "object": kind,
            "created": int(time.time()),
            "model": body.get("model") or self.model,
        }


def _chat_usage(body: dict[str, Any]) -> Block:
    tokens = rough_tokens(body)
    return {"prompt_tokens": tokens, "completion_tokens": 5, "total_tokens": tokens + 5}


def _chat_call(call: Block) -> Block:
    function = {"name": call["name"], "arguments": json.dumps(call["input"])}
    return {"id": call["id"], "type": "function", "function": function}


def _chat_stop(turn: Turn) -> str:
    stop = turn.resolved_stop()
    return CHAT_STOP.get(stop, stop)


class _Handler(ScriptedHandler):
    fake: FakeOpenAI

    def answer_get(self, path: str) -> None:
        model = {"id": self.fake.model, "object": "model", "created": 0, "owned_by": "fake"}
        if path.endswith("/models"):
            self.send_json(200, {"object": "list", "data": [model]})
        elif "/models/" in path:
            self.send_json(200, dict(model, id=path.rsplit("/", 1)[-1]))
        else:
            self.not_found()

    def answer_post(self, path: str, body: dict[str, Any], number: int) -> None:
        fake = self.fake
        if not fake.is_model_path(path):
            self.not_found()
            return
        turn = fake.reply_for(body, number)
        stream = bool(body.get("stream"))
        if path.endswith("/responses") and stream:
            self.send_events((e["type"], e) for e in fake.response_events(turn, body, number))
        elif path.endswith("/responses"):
            self.send_json(200, fake.response(turn, body, number))
        elif stream:
            chunks = fake.completion_chunks(turn, body, number)
            self.send_events([*((None, c) for c in chunks), (None, "[DONE]")])
        else:
            self.send_json(200, fake.completion(turn, body, number))

    def error_payload(self, message: str) -> dict[str, Any]:
        return {"error": {"message": f"fake model: {message}", "type": "server_error"}}


FakeOpenAI.handler = _Handler

__all__ = ["FakeOpenAI", "ToolResult", "function_call", "outputs_of"]
