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
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class FakeOpenAI:
    def __init__(self, turns: Iterable[Any] = (), *, after: Any = "Done.") -> None:
        self.script = list(turns)
        self.after = after
        self.requests: list[dict[str, Any]] = []
        self.sent: list[Item] = []  # every item this server answered with, in order
        self.errors: list[str] = []
        self._next = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> FakeOpenAI:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL for a model provider's `base_url` (requests go to `{url}/responses`)."""
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

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
        with self._lock:
            if self._next < len(self.script):
                turn = self.script[self._next]
                self._next += 1
            else:
                turn = self.after
        items = _items(turn, body)
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


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            data = json.dumps({"object": "list", "data": []}).encode()
            self._send(200, "application/json", data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"_unparsed": raw.decode("utf-8", "replace")}
            with fake._lock:
                fake.requests.append(body)
                number = len(fake.requests)
            if not self.path.rstrip("/").endswith("/responses"):
                self._send(404, "application/json", b'{"error": {"message": "not found"}}')
                return
            try:
                items = fake._reply(body)
                payload = b"".join(
                    f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()
                    for e in _events(items, number)
                )
                self._send(200, "text/event-stream", payload)
            except (BrokenPipeError, ConnectionResetError):
                pass
            except Exception as exc:
                fake.errors.append(f"{type(exc).__name__}: {exc}")
                self._send(500, "application/json", json.dumps({"error": str(exc)}).encode())

        def _send(self, status: int, kind: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


__all__ = [
    "FakeOpenAI",
    "FunctionOutput",
    "function_call",
    "message",
    "outputs_of",
]
