"""The throwaway model `doctor` points a plugin harness at: an OpenAI Chat Completions
endpoint on 127.0.0.1 that answers every request with one short text reply and no tool
call, so the harness boots, loads its plugins and ends its run without touching the
network or running a tool. It answers only requests carrying its token, addressed to it.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "OK"
MODEL = "doctor"


class StubModel:
    """`with StubModel() as model:` serves on `model.url` (`.../v1`) with `model.token`."""

    def __init__(self) -> None:
        self.token = secrets.token_urlsafe(24)
        self.requests = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> StubModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(stub: StubModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _allowed(self) -> bool:
            port = stub.port
            ok = (
                self.headers.get("Host") in (f"127.0.0.1:{port}", f"localhost:{port}")
                and self.headers.get("Authorization") == f"Bearer {stub.token}"
                and self.headers.get("Origin") in (None, "null")
            )
            if not ok:
                self._send(403, "application/json", b'{"error": {"message": "forbidden"}}')
            return ok

        def do_GET(self) -> None:
            if self._allowed():
                models = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
                self._send(200, "application/json", json.dumps(models).encode())

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(length, 8 << 20))
            if not self._allowed():
                return
            stub.requests += 1
            try:
                stream = bool(json.loads(body or b"{}").get("stream"))
            except (ValueError, AttributeError):
                stream = False
            if stream:
                self._send(200, "text/event-stream", _events())
            else:
                self._send(200, "application/json", json.dumps(_completion()).encode())

        def _send(self, status: int, kind: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _envelope(kind: str) -> dict[str, Any]:
    return {"id": "chatcmpl-doctor", "object": kind, "created": int(time.time()), "model": MODEL}


def _completion() -> dict[str, Any]:
    message = {"role": "assistant", "content": REPLY}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {**_envelope("chat.completion"), "choices": [choice], "usage": usage}


def _events() -> bytes:
    deltas = [({"role": "assistant", "content": REPLY}, None), ({}, "stop")]
    chunks = [
        {
            **_envelope("chat.completion.chunk"),
            "choices": [{"index": 0, "delta": d, "finish_reason": f}],
        }
        for d, f in deltas
    ]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
