"""`dsh-circuit-breaker mcp [options] -- COMMAND [ARGS...]`: the breaker in front of any MCP
server, for MCP clients that have no pre-tool hook of their own.

The relay starts the server and passes every message both ways unchanged: requests,
responses, notifications, progress, cancellation, and the server's own requests to the
client (sampling, elicitation, roots). It reads only what it must: each message from the
client (to find `tools/call` and `initialize`), and the server's messages only while an
`initialize` answer is awaited (to learn the negotiated version) or, with the config's
`resultProgress` or `sameResultLimit`, an allowed call's result (to observe it: only its
digest is kept, docs/results.md). A `tools/call` the
breaker refuses never reaches the server; the client gets a normal result instead,
`isError: true` with the breaker's text, in the negotiated version's shape (`refusal`).

Its command line is `mcp_command.py`. The Python API, for the other transports (`mcp_http`)
and for `install mcp`/`doctor mcp`:

    guard = McpGuard(config_path, state, server="filesystem")  # as a command hook loads them
    result = guard.judge(agent, "read_file", {"path": "a"}, version)  # refusal dict or None
    connection = Connection(agent_id=None)    # one client's connection: its agent key
    agent = connection.agent(meta)            # `meta`: the request's params._meta (or {})
    refusal(text, version)                    # the CallToolResult dict itself

Agent keys (`Connection.agent`), first match wins:
1. a conversation id the client sends in the request's `_meta` (CONVERSATION_KEYS:
   OpenCode's `sessionID`), as `mcp:<id>`;
2. `--agent-id ID`, as given;
3. `mcp:<client name>:<connection>`: the client's name (`initialize`'s `clientInfo`, or
   2026-07-28's per-request `io.modelcontextprotocol/clientInfo`) and a random id that a
   new `initialize` renews: a new connection is a new agent. A desktop app keeps one
   server process, and one connection, across all its chats: they are then one agent.

Tool names are the server's; `--name SERVER` makes them `SERVER/tool` in state, in the
refusal text and on the live page, so two servers wrapped for one client stay apart.

Faults: every error of the relay's own passes the message through unchanged, with one
line on stderr (fail open). A line longer than MAX_JUDGED_LINE is passed through in
pieces, unjudged (never held whole); garbage is passed on for the other side to answer
as it would without the relay. The server's exit ends the relay with the server's status.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections import OrderedDict
from typing import Any

from ..core.assembly import Assembly
from ..core.config import ConfigError
from ..core.lenient import id_text, read
from ..core.results import result_text
from ..harnesses import mcp as harness
from ..judge import Call, judge

# The 2026-07-28 per-request envelope (no `initialize`, no session): its keys in `_meta`.
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT = "io.modelcontextprotocol/clientInfo"
# The first protocol version whose results must say `"resultType": "complete"`; versions
# are dates, so later ones compare greater.
RESULT_TYPE_SINCE = "2026-07-28"
# Conversation ids clients are known to send in a request's `_meta`.
CONVERSATION_KEYS = ("sessionID",)  # OpenCode (and Kilo, its fork)
MAX_KEY_PART = 200  # characters of a client's name or id kept in an agent key
# Allowed calls whose result is awaited, per connection (the oldest forgotten past this:
# a server that never answers must not grow the relay's memory).
MAX_AWAITED = 256
# A line up to this size is read whole and judged (the command hook's event limit);
# a longer one is passed through in pieces of at most this size, unjudged.
MAX_JUDGED_LINE = 16 * 1024 * 1024
CHUNK = 64 * 1024
EXIT_SECONDS = 5.0  # for the server's last output once it exited, and to die on SIGTERM


def relay_say(message: str) -> None:
    """One line on stderr (the client's log of the server), never a traceback."""
    prefix = "dsh-circuit-breaker: mcp: "
    # The breaker's warnings, and the HTTP server's it shares with `serve`, carry their own.
    message = message.removeprefix("dsh-circuit-breaker: ").removeprefix(
        "dsh-circuit-breaker serve: "
    )
    try:
        sys.stderr.write(prefix + " ".join(message.split()) + "\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not stop the relay
        pass


def refusal(text: str, version: str | None) -> dict[str, Any]:
    """The `CallToolResult` a refused call gets, in protocol `version`'s shape."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
    if isinstance(version, str) and version >= RESULT_TYPE_SINCE:
        result["resultType"] = "complete"  # required from 2026-07-28; unknown before
    return result


class McpGuard:
    """The breaker as MCP servers get it: config and state exactly as a command hook
    loads them (`--config`, `--state`, the same defaults), with the MCP harness's
    spellings; thread-safe. A bad config file or state URL fails here (ConfigError);
    the store itself is reached at the first judged call."""

    def __init__(
        self, config_path: str | None = None, state: str | None = None, server: str | None = None
    ) -> None:
        assembly = Assembly.of(harness.NAME, harness, config_path, state)
        self.config = assembly.config
        self.url = assembly.url
        self.server = server
        self._harness = harness
        self._breaker = assembly.breaker()

    def breaker(self) -> Any:
        return self._breaker

    def judge(
        self,
        agent: str,
        tool: str,
        arguments: Any,
        version: str | None = None,
        call_id: str | None = None,
    ) -> dict[str, Any] | None:
        """The refusal (a `CallToolResult` in `version`'s shape) for one `tools/call` of
        `tool` (the server's name for it) by `agent`, or None to pass the call on;
        `call_id`, the request's JSON-RPC id, only labels exported telemetry."""
        name = f"{self.server}/{tool}" if self.server else tool
        call = Call(agent, name, {} if arguments is None else arguments, call_id)
        text, _ = judge(self._harness, call, self.config, self.breaker)
        return None if text is None else refusal(text, version)

    def observe(self, agent: str, tool: str, arguments: Any, answer: dict[str, Any]) -> None:
        """The server's answer (a JSON-RPC response) to an allowed `tools/call`."""
        name = f"{self.server}/{tool}" if self.server else tool
        arguments = {} if arguments is None else arguments
        self._breaker.observe(agent, name, arguments, result_of(answer))

    def close(self) -> None:
        self._breaker.close()


class Connection:
    """One client connection as the relay sees it: who the client is, the version the
    two sides negotiated, and so the agent key of each call (see the module docstring)."""

    def __init__(self, agent_id: str | None = None) -> None:
        self.agent_id = agent_id
        self.client = "client"
        self.version: str | None = None
        self.id = secrets.token_hex(4)
        self.pending: set[Any] = set()  # ids of `initialize` requests not yet answered
        # id of an allowed `tools/call` -> (agent, tool, arguments), till its result comes.
        self.awaited: OrderedDict[Any, tuple[str, str, Any]] = OrderedDict()

    @property
    def listening(self) -> bool:
        """Whether the server's next messages are worth parsing."""
        return bool(self.pending or self.awaited)

    def await_result(self, message: dict[str, Any], agent: str) -> None:
        params = message["params"]
        key = _hashable(message["id"])
        self.awaited.pop(key, None)  # a reused id: the newer call is the one answered
        self.awaited[key] = (agent, params["name"], params.get("arguments"))
        while len(self.awaited) > MAX_AWAITED:
            self.awaited.popitem(last=False)

    def initialize(self, message: dict[str, Any]) -> None:
        """A client's `initialize` request: a new connection, so a new agent."""
        self.id = secrets.token_hex(4)
        self.version = None
        params = message.get("params")
        info = params.get("clientInfo") if isinstance(params, dict) else None
        self.client = _client_name(info) or "client"
        if "id" in message:
            self.pending.add(_hashable(message["id"]))

    def answered(self, message: Any) -> None:
        """A message from the server, while an `initialize` is pending: the answer to it
        names the negotiated version."""
        if not isinstance(message, dict) or "method" in message:
            return
        key = _hashable(message.get("id"))
        if key not in self.pending:
            return
        self.pending.discard(key)
        result = message.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        self.version = version if isinstance(version, str) else None

    def agent(self, meta: dict[str, Any]) -> str:
        for name in CONVERSATION_KEYS:
            value = meta.get(name)
            if isinstance(value, str) and value:
                return "mcp:" + value[:MAX_KEY_PART]
        if self.agent_id:
            return self.agent_id
        client = _client_name(meta.get(META_CLIENT)) or self.client
        return f"mcp:{client}:{self.id}"

    def version_of(self, meta: dict[str, Any]) -> str | None:
        """The version a request is made in: its own envelope's (2026-07-28 on), else the
        one `initialize` negotiated."""
        version = meta.get(META_VERSION)
        return version if isinstance(version, str) else self.version


def _client_name(info: Any) -> str | None:
    name = info.get("name") if isinstance(info, dict) else None
    return name[:MAX_KEY_PART] if isinstance(name, str) and name else None


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, type(None))) else repr(value)


class Session:
    """One client's traffic through the breaker, whatever carries it: what each of its
    messages becomes (`from_client`), and what the server's answers teach (`from_server`)."""

    def __init__(self, guard: McpGuard, connection: Connection) -> None:
        self.guard = guard
        self.connection = connection

    def from_client(self, message: Any) -> bytes | None:
        """For one parsed client message: the refusal to answer with (the encoded
        JSON-RPC response), or None to pass the message on unchanged."""
        if not isinstance(message, dict):
            return None  # a batch (not in any version we speak) or garbage: the server's
        method = message.get("method")
        if method == "initialize":
            self.connection.initialize(message)
            return None
        if method != "tools/call" or "id" not in message:
            return None
        params = message.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            return None  # malformed: the server answers it as it would
        meta = params.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        connection = self.connection
        agent = connection.agent(meta)
        ident = message["id"]
        result = self.guard.judge(
            agent,
            params["name"],
            params.get("arguments"),
            connection.version_of(meta),
            str(ident) if isinstance(ident, (str, int)) and not isinstance(ident, bool) else None,
        )
        if result is None:
            if self.guard.config.observes_results:
                connection.await_result(message, agent)
            return None
        return response(message["id"], result)

    def from_server(self, message: Any) -> None:
        self.connection.answered(message)
        if not isinstance(message, dict) or "method" in message or not self.connection.awaited:
            return
        call = self.connection.awaited.pop(_hashable(message.get("id")), None)
        if call is not None:
            self.guard.observe(*call, message)


def result_of(answer: dict[str, Any]) -> str:
    """What a `tools/call` returned, as the rules compare it: the text of its content, one
    part a line (a part that is not text, and `structuredContent`, as JSON), marked when
    it is an error. Text, not JSON: normalizing masks times and counters line by line."""
    result = answer.get("result")
    if not isinstance(result, dict):
        return "JSON-RPC error: " + result_text(answer.get("error"))
    lines = ["error:" if result.get("isError") else "ok:"]
    content = result.get("content")
    for part in content if isinstance(content, list) else ():
        text = part.get("text") if isinstance(part, dict) and part.get("type") == "text" else None
        lines.append(text if isinstance(text, str) else result_text(part))
    if len(lines) == 1:
        lines.append(result_text(result.get("structuredContent")))
    return "\n".join(lines)


def response(request_id: Any, result: dict[str, Any]) -> bytes:
    """The JSON-RPC response (a line) to request `request_id`, its id as the client wrote
    it: a number keeps its text (`lenient.id_text`), so `1E400` is not `Infinity`."""
    text = id_text(request_id) or json.dumps(request_id)
    body = json.dumps(result, separators=(",", ":"))
    return f'{{"jsonrpc":"2.0","id":{text},"result":{body}}}\n'.encode()


# -- stdio -------------------------------------------------------------------------------
class Lines:
    """Newline-delimited messages from a file descriptor, never more than `limit` bytes
    held: `read` gives (a whole line, True), or pieces (False) of a longer one, the last
    piece ending with its newline."""

    def __init__(self, fd: int, limit: int = MAX_JUDGED_LINE) -> None:
        self.fd = fd
        self.limit = limit
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._long = False  # inside a line longer than `limit`

    def read(self) -> tuple[bytes | bytearray, bool] | None:
        buffer = self._buffer
        while True:
            newline = buffer.find(b"\n", self._scanned)
            if newline >= 0:
                with memoryview(buffer) as view:  # one copy, not two
                    line = bytes(view[: newline + 1])
                del buffer[: newline + 1]
                self._scanned = 0
                whole = not self._long
                self._long = False
                return line, whole
            if len(buffer) >= self.limit or (self._long and buffer):
                # Past the limit, each read is passed on as it comes: nothing accumulates.
                self._long = True
                self._buffer, self._scanned = bytearray(), 0  # handed over, not copied
                return buffer, False
            self._scanned = len(buffer)
            try:
                data = os.read(self.fd, CHUNK)
            except OSError:
                data = b""
            if not data:
                if not buffer:
                    return None
                rest = bytes(buffer)
                buffer.clear()
                return rest, not self._long  # a last line without its newline
            buffer += data


class Writer:
    """Whole messages to a file descriptor from several threads, one at a time."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self.lock:
            self.write_held(data)

    def write_held(self, data: bytes | bytearray) -> None:
        """Write with `lock` already held (the pieces of one long line)."""
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]


def pump(source: Lines, target: Writer, on_line: Any, what: str) -> bool:
    """Copy `source` to `target` until either ends; True if it was `target` (it can no
    longer be written). `on_line(line)` returns what to write for a whole line (None:
    nothing). A long line goes through in pieces, under the target's lock, so no other
    message lands inside it."""
    holding = False
    try:
        while (got := source.read()) is not None:
            data, whole = got
            if whole:
                out = on_line(data)
                if out is not None:
                    target.write(out)
                continue
            if not holding:
                target.lock.acquire()
                holding = True
                relay_say(
                    f"a line from {what} is longer than {source.limit} bytes: passed on unjudged"
                )
            target.write_held(data)
            if data.endswith(b"\n"):
                target.lock.release()
                holding = False
    except OSError:
        return True  # Lines.read raises none: the target is gone
    finally:
        if holding:
            target.lock.release()
    return False


class StdioRelay:
    """The relay between this process's stdin/stdout (the client) and the server's."""

    def __init__(self, guard: McpGuard, command: list[str], agent_id: str | None = None) -> None:
        self.guard = guard
        self.command = command
        self.session = Session(guard, Connection(agent_id))
        self.client = Writer(sys.stdout.fileno())
        self.process: subprocess.Popen[bytes] | None = None

    def run(self) -> int:
        """Relay until the server exits; its exit status (128+N for signal N)."""
        self.process = process = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        assert process.stdin is not None and process.stdout is not None
        self._forward_signals()
        upstream = Writer(process.stdin.fileno())
        threading.Thread(
            target=self._client_side, args=(upstream,), name="client", daemon=True
        ).start()
        answers = threading.Thread(
            target=self._server_side, args=(process.stdout.fileno(),), name="server", daemon=True
        )
        answers.start()
        status = process.wait()
        answers.join(EXIT_SECONDS)  # its last answers, unless a child of its holds stdout
        return 128 - status if status < 0 else status

    def _client_side(self, upstream: Writer) -> None:
        pump(Lines(sys.stdin.fileno()), upstream, self._from_client, "the client")
        assert self.process is not None and self.process.stdin is not None
        with contextlib.suppress(OSError):
            self.process.stdin.close()  # the client is done: the server's cue to exit

    def _server_side(self, fd: int) -> None:
        if pump(Lines(fd), self.client, self._from_server, "the server"):
            # The client closed its end: nothing the server says can arrive any more.
            assert self.process is not None
            if self.process.poll() is None:
                self.process.terminate()

    def _from_client(self, line: bytes) -> bytes | None:
        try:
            answer = self.session.from_client(parsed(line, "the client"))
        except Exception as exc:  # our own bug: the call goes through
            relay_say(f"{type(exc).__name__}: {exc}; message passed on unjudged")
            return line
        if answer is None:
            return line
        with contextlib.suppress(OSError):  # the client is gone; the server side notices
            self.client.write(answer)
        return None

    def _from_server(self, line: bytes) -> bytes:
        if self.session.connection.listening:
            try:
                self.session.from_server(parsed(line))
            except Exception as exc:
                relay_say(f"{type(exc).__name__}: {exc}; message passed on")
        return line

    def _forward_signals(self) -> None:
        def forward(signum: int, _frame: Any) -> None:
            if self.process is not None and self.process.poll() is None:
                self.process.send_signal(signum)

        for name in ("SIGTERM", "SIGINT", "SIGHUP"):
            number = getattr(signal, name, None)
            if number is not None:
                signal.signal(number, forward)


def parsed(data: bytes | None, sender: str | None = None) -> Any:
    """`data` as the other side reads it (`lenient.read`: what our strict parser refuses
    but a server runs is judged too), or None for no JSON at all: garbage, passed on for
    the other side to answer. With `sender`, anything unusual is said in one line."""
    if not data:
        return None
    try:
        message, notes = read(data)
    except (ValueError, RecursionError):
        return None
    if notes and sender:
        relay_say(f"a message from {sender} judged as read: {'; '.join(notes)}")
    return message


def server_name(name: str | None) -> str | None:
    """`--name SERVER` checked, for either transport: it becomes the `SERVER/` prefix."""
    if name is None:
        return None
    if not name or "/" in name or not name.isprintable():
        raise ConfigError(f"--name {name!r}: a server name is printable and has no '/'")
    return name
