"""A scripted fake model speaking the Gemini API (generativelanguage `v1beta`), for
driving real harnesses and clients (Gemini CLI, google-genai, Google ADK). Turns are
scripted as for every fake (see `scripted_server`); a tool call becomes a
`functionCall` part (with its id, which clients echo in their `functionResponse`).

    with FakeGemini([tool_call("search", {"query": "q"}), "Done."]) as model:
        ... point the client's base URL at model.url ...
        assert model.tool_results()[0].is_error

Answers `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent` (server-
sent events with `?alt=sse`), `:countTokens`, and `GET /v1beta/models[/{model}]`. A
`functionResponse` whose `response` holds an `error` key is the API's error result (the
SDK documents `output` for a result and `error` for a failure): `ToolResult.is_error`;
its text is that error, or the one value the result is wrapped in.
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
    text_of,
    tool_call,
)

GEMINI_STOP = {"tool_use": "STOP", "end_turn": "STOP", "max_tokens": "MAX_TOKENS"}
TOKEN_LIMITS = {"inputTokenLimit": 1_048_576, "outputTokenLimit": 65_536}


def function_responses_of(body: dict[str, Any]) -> list[ToolResult]:
    """The `functionResponse` parts in one request body's contents, in order. A response
    sent without an id is named `<tool>#<n>` (its place among that tool's id-less ones)."""
    found = []
    unnamed: dict[str, int] = {}
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    parts = [p for c in contents for p in c.get("parts") or [] if isinstance(p, dict)]
    replies = [p["functionResponse"] for p in parts if isinstance(p.get("functionResponse"), dict)]
    for reply in replies:
        name = str(reply.get("name") or "")
        call_id = reply.get("id")
        if not call_id:
            unnamed[name] = unnamed.get(name, 0) + 1
            call_id = f"{name}#{unnamed[name]}"
        response = reply.get("response")
        response = response if isinstance(response, dict) else {"output": response}
        error = "error" in response
        found.append(ToolResult(str(call_id), error, _response_text(response), reply, name))
    return found


def _response_text(response: dict[str, Any]) -> str:
    """The error, or the one value a client wrapped its result in (`output`, `result`,
    ...); a response of several keys is its JSON."""
    if "error" in response or len(response) == 1:
        return text_of(response.get("error", next(iter(response.values()))))
    return json.dumps(response)


class FakeGemini(ScriptedServer):
    model_paths = (":generateContent", ":streamGenerateContent")
    results_of = staticmethod(function_responses_of)

    @property
    def url(self) -> str:
        """Base URL for `GOOGLE_GEMINI_BASE_URL` or google-genai's `http_options.base_url`
        (requests go to `{url}/v1beta/models/...`)."""
        return self.origin

    def model_info(self, name: str) -> Block:
        return {
            "name": f"models/{name}",
            "version": "001",
            "displayName": name,
            "supportedGenerationMethods": ["generateContent", "countTokens"],
            **TOKEN_LIMITS,
        }

    def chunks(self, turn: Turn, body: dict[str, Any], number: int) -> Iterator[Block]:
        """The reply as stream chunks, one part each (a function call whole, as Gemini
        sends it); the last carries the finish reason and the usage."""
        parts = [_part(block) for block in turn.blocks] or [{"text": ""}]
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            yield self.response([part], turn if last else None, body, number)

    def response(
        self, parts: list[Block], finished: Turn | None, body: dict[str, Any], number: int
    ) -> Block:
        candidate: Block = {"content": {"role": "model", "parts": parts}, "index": 0}
        answer: Block = {"candidates": [candidate], "responseId": f"fake-{number:05d}"}
        if finished is not None:
            stop = finished.resolved_stop()
            candidate["finishReason"] = GEMINI_STOP.get(stop, stop)
            tokens = rough_tokens(body)
            answer["usageMetadata"] = {
                "promptTokenCount": tokens,
                "candidatesTokenCount": 5,
                "totalTokenCount": tokens + 5,
            }
        answer["modelVersion"] = self.model
        return answer


def _part(block: Block) -> Block:
    if block["type"] == "tool_use":
        return {"functionCall": {"id": block["id"], "name": block["name"], "args": block["input"]}}
    return {"text": block["text"]}


class _Handler(ScriptedHandler):
    fake: FakeGemini

    def answer_get(self, path: str) -> None:
        fake = self.fake
        if path.endswith("/models"):
            self.send_json(200, {"models": [fake.model_info(fake.model)]})
        elif "/models/" in path:
            self.send_json(200, fake.model_info(path.rsplit("/", 1)[-1]))
        else:
            self.not_found()

    def answer_post(self, path: str, body: dict[str, Any], number: int) -> None:
        fake = self.fake
        if path.endswith(":countTokens"):
            self.send_json(200, {"totalTokens": rough_tokens(body)})
        elif path.endswith(":streamGenerateContent"):
            turn = fake.reply_for(body, number)
            self.send_events((None, c) for c in fake.chunks(turn, body, number))
        elif path.endswith(":generateContent"):
            turn = fake.reply_for(body, number)
            parts = [_part(block) for block in turn.blocks]
            self.send_json(200, fake.response(parts, turn, body, number))
        else:
            self.not_found()

    def error_payload(self, message: str) -> dict[str, Any]:
        return {"error": {"code": 500, "message": f"fake model: {message}", "status": "INTERNAL"}}


FakeGemini.handler = _Handler

__all__ = ["FakeGemini", "ToolResult", "function_responses_of", "tool_call"]
