"""A scripted fake model speaking the Anthropic Messages API, for driving real harnesses.

The harness under test (DSH runtime, Claude Code CLI, Claude Agent SDK, a framework's
Anthropic client) is real; only the model is fake. Start one on 127.0.0.1 with a script
of turns (see `scripted_server` for how turns are written), point the harness's base URL
at `server.url`, and afterwards read what the harness sent back (`requests`,
`tool_results()`, `result_in_next_request(call_id)`).

    with FakeAnthropic([tool_use("bash", {"command": "ls"}), "All done."]) as model:
        env["ANTHROPIC_BASE_URL"] = model.url
        ...
        assert model.tool_results()[0].text == "..."

Each POST to a path ending in `/v1/messages` takes the next turn, streamed when the
request asks for it. `/v1/messages/count_tokens` is answered with a rough count and
`GET /v1/models` with the one model. A tool result's `is_error` is Anthropic's own flag.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from support.scripted_server import (
    Block,
    ScriptedHandler,
    ScriptedServer,
    ToolResult,
    Turn,
    rough_tokens,
    text,
    text_of,
    tool_call,
)

tool_use = tool_call  # the Anthropic name for a scripted tool call


def tool_results_of(body: dict[str, Any]) -> list[ToolResult]:
    """The tool_result blocks in one request body's messages, in order."""
    found = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                found.append(
                    ToolResult(
                        call_id=str(block.get("tool_use_id")),
                        is_error=bool(block.get("is_error")),
                        text=text_of(block.get("content")),
                        raw=block,
                    )
                )
    return found


class FakeAnthropic(ScriptedServer):
    """The scripted model server; see the module docstring."""

    model_paths = ("/v1/messages",)
    results_of = staticmethod(tool_results_of)

    @property
    def url(self) -> str:
        """Base URL without a trailing slash; requests go to `{url}/v1/messages`."""
        return self.origin

    def message(self, turn: Turn, body: dict[str, Any], number: int) -> dict[str, Any]:
        return {
            "id": f"msg_fake_{number:05d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or self.model,
            "content": turn.blocks,
            "stop_reason": turn.resolved_stop(),
            "stop_sequence": None,
            "usage": {"input_tokens": rough_tokens(body), "output_tokens": 10},
        }

    def events(
        self, turn: Turn, body: dict[str, Any], number: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        start = self.message(Turn([]), body, number)
        start.update(stop_reason=None, usage=dict(start["usage"], output_tokens=1))
        yield "message_start", {"type": "message_start", "message": start}
        for index, block in enumerate(turn.blocks):
            if block["type"] == "tool_use":
                opening = dict(block, input={})
                yield "content_block_start", _start(index, opening)
                raw = json.dumps(block["input"])
                # Two fragments, as real streams split tool input across deltas.
                cut = len(raw) // 2
                for piece in (raw[:cut], raw[cut:]):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    yield "content_block_delta", _delta(index, delta)
            elif block["type"] == "text":
                yield "content_block_start", _start(index, {"type": "text", "text": ""})
                delta = {"type": "text_delta", "text": block["text"]}
                yield "content_block_delta", _delta(index, delta)
            else:
                yield "content_block_start", _start(index, block)
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": turn.resolved_stop(), "stop_sequence": None},
                "usage": {"output_tokens": 10},
            },
        )
        yield "message_stop", {"type": "message_stop"}


def _start(index: int, block: Block) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: Block) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


class _Handler(ScriptedHandler):
    fake: FakeAnthropic
    json_headers = (("request-id", "req_fake"),)
    event_headers = (("Cache-Control", "no-cache"), ("request-id", "req_fake"))

    def answer_get(self, path: str) -> None:
        if path.endswith("/v1/models"):
            model = {"id": self.fake.model, "type": "model", "display_name": self.fake.model}
            self.send_json(200, {"data": [model], "has_more": False})
        else:
            self.not_found()

    def answer_post(self, path: str, body: dict[str, Any], number: int) -> None:
        fake = self.fake
        if path.endswith("/count_tokens"):
            self.send_json(200, {"input_tokens": rough_tokens(body)})
        elif fake.is_model_path(path):
            turn = fake.reply_for(body, number)
            if body.get("stream"):
                self.send_events(fake.events(turn, body, number))
            else:
                self.send_json(200, fake.message(turn, body, number))
        else:
            self.not_found()

    def error_payload(self, message: str) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": "api_error", "message": f"fake model: {message}"},
        }


FakeAnthropic.handler = _Handler

__all__ = ["FakeAnthropic", "ToolResult", "Turn", "text", "tool_results_of", "tool_use"]
