"""What the scripted fake models (`fake_anthropic`, `fake_openai`, `fake_gemini`) share: a
threaded HTTP server on 127.0.0.1 that answers each model request from a script of turns,
logs every request it receives, reads the tool results a harness sends back, and records
the exceptions it met while answering.

One way of scripting, whatever the API. A turn is one assistant reply:
- a `str`: a text reply;
- a block (`text(...)` or `tool_call(...)`), or a list of them: a reply holding a tool
  call asks the harness to run it;
- a `Turn` (blocks plus an explicit stop reason, in Anthropic's names: `end_turn`,
  `tool_use`, `max_tokens`; each API translates it);
- a callable `f(request_body) -> turn` (any of the above), for replies that depend on what
  the harness sent, e.g. to answer a subagent differently from its parent.

Blocks are written as Anthropic content blocks (`{"type": "tool_use", "id", "name",
"input"}`), the richest of the formats; each API module renders them in its own wire
format and parses its own tool results back into `ToolResult`s. A call whose id was
already sent gets a fresh one, so `[call] * 10` is ten distinct calls.

When the script runs out, `after` is the reply, so a harness that keeps asking ends
cleanly instead of hanging. Requests for which `side(request_body)` is true (title
generation, next-speaker checks, ...) get `side_reply` and do not consume the script.

A fake subclasses `ScriptedServer` (naming its handler class in `handler`, the paths of
its model requests in `model_paths`, and reading its tool results in `results_of`) and
`ScriptedHandler` (answering POSTs in `answer_post`, GETs in `answer_get`, naming its error
body in `error_payload`); the wire format of its API is all that is left to it.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, TypeVar, Union

S = TypeVar("S", bound="ScriptedServer")
Block = dict[str, Any]
TurnLike = Union[str, Block, list[Block], "Turn", Callable[[dict[str, Any]], Any]]

_ids = itertools.count(1)


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def tool_call(name: str, input: dict[str, Any] | None = None, id: str | None = None) -> Block:
    """A tool call block, its id unique if not given (a test may key on it before it is
    sent)."""
    return {
        "type": "tool_use",
        "id": id or _fresh_id(),
        "name": name,
        "input": input if input is not None else {},
    }


def _fresh_id() -> str:
    return f"call_fake_{next(_ids):05d}"


@dataclass
class Turn:
    blocks: list[Block]
    stop_reason: str | None = None  # None: "tool_use" if any tool call, else "end_turn"

    @property
    def calls(self) -> list[Block]:
        return [b for b in self.blocks if b["type"] == "tool_use"]

    @property
    def texts(self) -> list[str]:
        return [str(b["text"]) for b in self.blocks if b["type"] == "text"]

    def resolved_stop(self) -> str:
        return self.stop_reason or ("tool_use" if self.calls else "end_turn")


@dataclass(frozen=True)
class ToolResult:
    """One tool result the harness sent back to the model, in any API."""

    call_id: str
    is_error: bool  # the API's error flag (False where the API has none)
    text: str  # the result's text parts, joined with newlines
    raw: Block = field(repr=False)
    name: str = ""  # the tool's name, where the API sends it back


def as_turn(turn: Any, request: dict[str, Any], used: set[str]) -> Turn:
    """Resolve a script item into a Turn. Call ids already in `used` (or missing) are
    replaced by fresh ones, and new ones added to `used`."""
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
    return Turn([_fresh(b, used) for b in blocks], stop)


def _fresh(block: Block, used: set[str]) -> Block:
    fresh = dict(block)
    if block.get("type") != "tool_use":
        return fresh
    while not fresh.get("id") or fresh["id"] in used:
        fresh["id"] = _fresh_id()
    used.add(fresh["id"])
    return fresh


def text_of(content: Any) -> str:
    """The text of a result's content: a string, or a list of parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ).strip("\n")
    return "" if content is None else json.dumps(content)


def rough_tokens(body: dict[str, Any]) -> int:
    return max(1, len(json.dumps(body)) // 4)


class ScriptedServer:
    """Start/stop (also as a context manager), the script cursor, the request log and the
    tool results read from it."""

    handler: ClassVar[type[ScriptedHandler]]
    model_paths: ClassVar[tuple[str, ...]]  # path endings of the requests that take a turn

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
        self.script: list[Any] = list(turns)
        self.after = after
        self.side = side
        self.side_reply = side_reply
        self.model = model
        self.delay = delay  # seconds to wait before each reply (to test timeouts)
        self.requests: list[dict[str, Any]] = []  # every request body, in arrival order
        self.paths: list[str] = []  # the path of each request, parallel to `requests`
        self.errors: list[str] = []  # exceptions raised while answering
        self.replies: list[Turn] = []  # what each scripted (non-side) request got
        self._issued: dict[str, int] = {}  # call id -> the request its reply answered
        self._side_requests: set[int] = set()
        self._used_ids: set[str] = set()
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

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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

    def reply_for(self, body: dict[str, Any], number: int) -> Turn:
        """The turn that answers model request `number` (1-based, as logged)."""
        if self.side is not None and self.side(body):
            with self._lock:
                self._side_requests.add(number - 1)
                turn = as_turn(self.side_reply, body, self._used_ids)
        else:
            # A callable runs outside the lock: it may block (e.g. wait for another run).
            turn = as_turn(self._take(), body, set())
            with self._lock:
                turn = as_turn(turn, body, self._used_ids)
                self.replies.append(turn)
                self._issued.update((c["id"], number - 1) for c in turn.calls)
        if self.delay:
            time.sleep(self.delay)
        return turn

    # -- reading what the harness sent ----------------------------------------------
    @classmethod
    def is_model_path(cls, path: str) -> bool:
        return path.rstrip("/").endswith(cls.model_paths)

    @staticmethod
    def results_of(body: dict[str, Any]) -> list[ToolResult]:
        """The tool results in one model request body, in order."""
        raise NotImplementedError

    def _model_log(self) -> list[tuple[int, dict[str, Any]]]:
        with self._lock:
            pairs = list(enumerate(zip(self.paths, self.requests, strict=True)))
        return [(i, body) for i, (path, body) in pairs if self.is_model_path(path)]

    @property
    def model_requests(self) -> list[dict[str, Any]]:
        """The bodies of the requests that asked for a turn (token counts etc. left out)."""
        return [body for _, body in self._model_log()]

    def tool_results(self) -> list[ToolResult]:
        """Every distinct tool result the model was sent (by call id), first-seen order.
        Each request repeats the history, so later copies of a result are dropped."""
        seen: dict[str, ToolResult] = {}
        for body in self.model_requests:
            for result in self.results_of(body):
                seen.setdefault(result.call_id, result)
        return list(seen.values())

    def tool_uses(self) -> list[Block]:
        """Every tool call block this server sent (ids filled in), in order."""
        with self._lock:
            return [call for turn in self.replies for call in turn.calls]

    def next_request(self, call_id: str) -> dict[str, Any]:
        """The model request that followed the reply carrying call `call_id`: the one in
        which the harness reports what became of that call (side requests skipped)."""
        issued = self._issued.get(call_id)
        assert issued is not None, f"this server never sent a call with id {call_id!r}"
        later = [
            body for i, body in self._model_log() if i > issued and i not in self._side_requests
        ]
        assert later, f"no model request came after the call {call_id!r}"
        return later[0]

    def result_in_next_request(self, call_id: str) -> ToolResult:
        """The result of call `call_id` as the next model request carried it."""
        body = self.next_request(call_id)
        found = [r for r in self.results_of(body) if r.call_id == call_id]
        assert found, f"the request after call {call_id!r} carries no result for it: {body}"
        return found[0]


class ScriptedHandler(BaseHTTPRequestHandler):
    """Reads and logs each request, then answers a POST with `answer_post` and a GET with
    `answer_get`; an exception while answering is recorded in `fake.errors` and answered
    500 with `error_payload`."""

    protocol_version = "HTTP/1.1"
    fake: ScriptedServer
    # Extra headers (name, value) on every JSON answer, and on every event stream.
    json_headers: ClassVar[tuple[tuple[str, str], ...]] = ()
    event_headers: ClassVar[tuple[tuple[str, str], ...]] = (("Cache-Control", "no-cache"),)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    @property
    def route(self) -> str:
        """The request path without its query or a trailing slash."""
        return self.path.split("?")[0].rstrip("/")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        number = self.fake._log(self.route, body)
        self._answer(lambda: self.answer_post(self.route, body, number))

    def do_GET(self) -> None:
        self.fake._log(self.route, {})
        self._answer(lambda: self.answer_get(self.route))

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _answer(self, answer: Callable[[], None]) -> None:
        try:
            answer()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the harness hung up (e.g. it was killed mid-run)
        except Exception as exc:
            self.fake.errors.append(f"{type(exc).__name__}: {exc}")
            self.send_json(500, self.error_payload(str(exc)))

    def answer_post(self, path: str, body: dict[str, Any], number: int) -> None:
        """Answer request `number` (1-based), sent to `path` (no query, no trailing /)."""
        raise NotImplementedError

    def answer_get(self, path: str) -> None:
        self.not_found()

    def error_payload(self, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def not_found(self) -> None:
        self.send_json(404, self.error_payload(f"no such endpoint: {self.route}"))

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

    def send_events(self, events: Iterable[tuple[str | None, dict[str, Any] | str]]) -> None:
        """Server-sent events in one body: each `event: <name>` (left out when the name is
        None) with its `data`, a JSON object or a literal string such as `[DONE]`."""
        frames = []
        for name, data in events:
            line = data if isinstance(data, str) else json.dumps(data)
            frames.append((f"event: {name}\n" if name else "") + f"data: {line}\n\n")
        self.send(200, "text/event-stream", "".join(frames).encode(), self.event_headers)
