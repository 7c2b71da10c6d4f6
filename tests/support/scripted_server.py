"""What the scripted fake models (`fake_anthropic`, `fake_openai`) share: a threaded HTTP
server on 127.0.0.1 that answers each request from a script of turns, logs every request
it receives, and records the exceptions it met while answering.

A fake subclasses `ScriptedServer` (naming its handler class in `handler`) and
`ScriptedHandler` (answering POSTs in `answer_post`, naming its error body in
`error_payload`); the wire format of its API is all that is left to it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, TypeVar

S = TypeVar("S", bound="ScriptedServer")


class ScriptedServer:
    """Start/stop (also as a context manager), the script cursor and the request log."""

    handler: ClassVar[type[ScriptedHandler]]

    def __init__(self, turns: Iterable[Any], after: Any) -> None:
        self.script: list[Any] = list(turns)
        self.after = after  # the reply once the script has run out
        self.requests: list[dict[str, Any]] = []  # every request body, in arrival order
        self.paths: list[str] = []  # the path of each request, parallel to `requests`
        self.errors: list[str] = []  # exceptions raised while answering
        self._lock = threading.Lock()
        self._next = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------
    def start(self: S) -> S:
        handler = type("Handler", (self.handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return int(self._server.server_address[1])

    # -- the script and the log -------------------------------------------------------
    def _take(self) -> Any:
        """The next scripted turn, or `after` once the script has run out."""
        with self._lock:
            if self._next < len(self.script):
                turn = self.script[self._next]
                self._next += 1
                return turn
            return self.after

    def _log(self, path: str, body: dict[str, Any]) -> int:
        """Log one request; returns how many have been logged so far (this one included)."""
        with self._lock:
            self.paths.append(path)
            self.requests.append(body)
            return len(self.requests)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.requests) >= count:
                return True
            time.sleep(0.02)
        return False


class ScriptedHandler(BaseHTTPRequestHandler):
    """Reads and logs each POST, then answers it with `answer_post`; an exception while
    answering is recorded in `fake.errors` and answered 500 with `error_payload`."""

    protocol_version = "HTTP/1.1"
    fake: ScriptedServer
    # Extra headers (name, value) on every JSON answer, and on every event stream.
    json_headers: ClassVar[tuple[tuple[str, str], ...]] = ()
    event_headers: ClassVar[tuple[tuple[str, str], ...]] = ()

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        path = self.path.split("?")[0].rstrip("/")
        number = self.fake._log(path, body)
        try:
            self.answer_post(path, body, number)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the harness hung up (e.g. it was killed mid-run)
        except Exception as exc:
            self.fake.errors.append(f"{type(exc).__name__}: {exc}")
            self.send_json(500, self.error_payload(str(exc)))

    def answer_post(self, path: str, body: dict[str, Any], number: int) -> None:
        """Answer request `number` (1-based), sent to `path` (no query, no trailing /)."""
        raise NotImplementedError

    def error_payload(self, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def send(
        self, status: int, kind: str, data: bytes, headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        """Send `data` as the whole body (its length known up front)."""
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def send_json(self, status: int, payload: dict[str, Any]) -> None:
        self.send(status, "application/json", json.dumps(payload).encode(), self.json_headers)

    def send_events(self, events: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Server-sent events, each `event: <name>` with its JSON `data`, in one body."""
        payload = b"".join(
            f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
        )
        self.send(200, "text/event-stream", payload, self.event_headers)
