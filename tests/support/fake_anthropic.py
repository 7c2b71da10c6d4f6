"""A scripted fake model speaking the Anthropic Messages API, for driving real harnesses.

The harness under test (DSH runtime, Claude Code CLI, Claude Agent SDK) is real; only the
model is fake. Start one on 127.0.0.1 with a script of turns, point the harness's base URL
at `server.url`, and afterwards read what the harness sent back (`requests`,
`tool_results()`).

    with FakeAnthropic([tool_use("bash", {"command": "ls"}), "All done."]) as model:
        env["ANTHROPIC_BASE_URL"] = model.url
        ...
        assert model.tool_results()[0].text == "..."

A turn is one assistant message:
- a `str`: a text block, stop reason `end_turn`;
- a `dict` block (from `text(...)` / `tool_use(...)`) or a list of them; a turn holding
  a tool_use block stops with `tool_use`, otherwise `end_turn`;
- a `Turn` (blocks plus an explicit stop reason);
- a callable `f(request_body) -> turn` (any of the above), for replies that depend on what
  the harness sent, e.g. to answer a subagent differently from its parent.

Each POST to a path ending in `/v1/messages` takes the next turn; when the script runs out,
`after` (default: the text "Done.") is the reply, so a harness that keeps asking ends
cleanly instead of hanging. Requests for which `side(request_body)` is true (title
generation, quota probes, ...) get `side_reply` and do not consume the script.
`/v1/messages/count_tokens` is answered with a rough count. Every request is logged.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Union

from support.scripted_server import ScriptedHandler, ScriptedServer

Block = dict[str, Any]
TurnLike = Union[str, Block, list[Block], "Turn", Callable[[dict[str, Any]], Any]]


def text(value: str) -> Block:
    return {"type": "text", "text": value}


_tool_ids = itertools.count(1)


def tool_use(name: str, input: dict[str, Any] | None = None, id: str | None = None) -> Block:
    """A tool_use block; the id is made unique if not given."""
    return {
        "type": "tool_use",
        "id": id or f"toolu_fake_{next(_tool_ids):05d}",
        "name": name,
        "input": input if input is not None else {},
    }


@dataclass
class Turn:
    blocks: list[Block]
    stop_reason: str | None = None  # None: "tool_use" if any tool_use block, else "end_turn"

    def resolved_stop(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if any(b["type"] == "tool_use" for b in self.blocks) else "end_turn"


@dataclass(frozen=True)
class ToolResult:
    """One tool_result block the harness sent back to the model."""

    tool_use_id: str
    is_error: bool
    text: str  # the text parts of `content`, joined with newlines
    raw: Block = field(repr=False)


def as_turn(turn: Any, request: dict[str, Any], used: set[str] | None = None) -> Turn:
    """Resolve a script item into a Turn. Tool ids already in `used` are replaced (and new
    ones added to it), so one block object scripted many times (`[call] * 10`) still
    gives the harness a distinct id per call, while an id nobody used yet is kept."""
    if callable(turn) and not isinstance(turn, Turn):
        turn = turn(request)
    if isinstance(turn, Turn):
        blocks, stop = turn.blocks, turn.stop_reason
    elif isinstance(turn, str):
        blocks, stop = [text(turn)], None
    elif isinstance(turn, dict):
        blocks, stop = [turn], None
    elif isinstance(turn, list):
        blocks, stop = turn, None
    else:
        raise TypeError(f"not a turn: {turn!r}")
    return Turn([_fresh(b, used if used is not None else set()) for b in blocks], stop)


def _fresh(block: Block, used: set[str]) -> Block:
    if block.get("type") != "tool_use":
        return dict(block)
    fresh = dict(block)
    while fresh.get("id") in used or not fresh.get("id"):
        fresh["id"] = tool_use(block["name"])["id"]
    used.add(fresh["id"])
    return fresh


def tool_results_of(request: dict[str, Any]) -> list[ToolResult]:
    """The tool_result blocks in one request body's messages, in order."""
    found = []
    for message in request.get("messages") or []:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                found.append(
                    ToolResult(
                        tool_use_id=str(block.get("tool_use_id")),
                        is_error=bool(block.get("is_error")),
                        text=_text_of(block.get("content")),
                        raw=block,
                    )
                )
    return found


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ).strip("\n")
    return "" if content is None else str(content)


class FakeAnthropic(ScriptedServer):
    """The scripted model server; see the module docstring."""

    def __init__(
        self,
        turns: Iterable[TurnLike] = (),
        *,
        after: TurnLike = "Done.",
        side: Callable[[dict[str, Any]], bool] | None = None,
        side_reply: TurnLike = "OK",
        model: str = "fake-model",
        delay: float = 0.0,
    ) -> None:
        super().__init__(turns, after)
        self.side = side
        self.side_reply = side_reply
        self.model = model
        self.delay = delay  # seconds to wait before each reply (to test timeouts)
        self.replies: list[Turn] = []  # what each scripted (non-side) request got
        self._used_ids: set[str] = set()

    @property
    def url(self) -> str:
        """Base URL without a trailing slash; requests go to `{url}/v1/messages`."""
        return f"http://127.0.0.1:{self.port}"

    # -- reading what the harness sent ----------------------------------------------
    @property
    def messages_requests(self) -> list[dict[str, Any]]:
        """Request bodies sent to /v1/messages (count_tokens and others left out)."""
        with self._lock:
            pairs = list(zip(self.paths, self.requests, strict=True))
        return [body for path, body in pairs if path.rstrip("/").endswith("/v1/messages")]

    def tool_results(self) -> list[ToolResult]:
        """Every distinct tool_result the model was sent (by tool_use_id), first-seen order.
        Each request repeats the history, so later copies of a result are dropped."""
        seen: dict[str, ToolResult] = {}
        for body in self.messages_requests:
            for result in tool_results_of(body):
                seen.setdefault(result.tool_use_id, result)
        return list(seen.values())

    def tool_uses(self) -> list[Block]:
        """Every tool_use block this server sent, in order."""
        with self._lock:
            return [b for t in self.replies for b in t.blocks if b["type"] == "tool_use"]

    # -- answering -------------------------------------------------------------------
    def _reply_for(self, body: dict[str, Any]) -> Turn:
        if self.side is not None and self.side(body):
            return as_turn(self.side_reply, body, self._used_ids)
        turn = as_turn(self._take(), body)  # a callable runs outside the lock: it may block
        with self._lock:
            turn = as_turn(turn, body, self._used_ids)
            self.replies.append(turn)
        return turn

    def _events(self, turn: Turn, body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        message_id = f"msg_fake_{len(self.requests):05d}"
        usage = {"input_tokens": _rough_tokens(body), "output_tokens": 1}
        yield (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model") or self.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage,
                },
            },
        )
        for index, block in enumerate(turn.blocks):
            if block["type"] == "tool_use":
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                yield "content_block_start", _start(index, start)
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

    def _message(self, turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"msg_fake_{len(self.requests):05d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or self.model,
            "content": turn.blocks,
            "stop_reason": turn.resolved_stop(),
            "stop_sequence": None,
            "usage": {"input_tokens": _rough_tokens(body), "output_tokens": 10},
        }


def _start(index: int, block: Block) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: Block) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _rough_tokens(body: dict[str, Any]) -> int:
    return max(1, len(json.dumps(body.get("messages", []))) // 4)


class _Handler(ScriptedHandler):
    fake: FakeAnthropic
    json_headers = (("request-id", "req_fake"),)
    event_headers = (("Cache-Control", "no-cache"), ("request-id", "req_fake"))

    def do_GET(self) -> None:
        self.fake._log(self.path, {})
        if self.path.split("?")[0].rstrip("/").endswith("/v1/models"):
            model = {"id": self.fake.model, "type": "model", "display_name": self.fake.model}
            self.send_json(200, {"data": [model], "has_more": False})
        else:
            self.send_json(404, {"type": "error", "error": {"type": "not_found_error"}})

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def answer_post(self, path: str, body: dict[str, Any], number: int) -> None:
        fake = self.fake
        if path.endswith("/count_tokens"):
            self.send_json(200, {"input_tokens": _rough_tokens(body)})
        elif path.endswith("/v1/messages"):
            turn = fake._reply_for(body)
            if fake.delay:
                time.sleep(fake.delay)
            if body.get("stream"):
                self.send_events(fake._events(turn, body))
            else:
                self.send_json(200, fake._message(turn, body))
        else:
            self.send_json(404, {"type": "error", "error": {"type": "not_found_error"}})

    def error_payload(self, message: str) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": "api_error", "message": f"fake model: {message}"},
        }


FakeAnthropic.handler = _Handler
