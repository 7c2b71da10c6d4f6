"""`dsh-circuit-breaker mcp --http [HOST:]PORT --upstream URL`: the relay in front of a
Streamable HTTP MCP server.

Every request, on any path, goes to `--upstream URL` unchanged: POST (answered with JSON
or an SSE stream, passed back as it comes), the GET stream, DELETE; headers pass both
ways (`Mcp-Session-Id`, `MCP-Protocol-Version`, the client's own `Authorization` for the
server), less the hop-by-hop ones, with `Host` the upstream's. A POSTed `tools/call` is
judged (`mcp.Session`), alone or in a batch (each call in it); a refused one never
reaches the server and is answered `200 application/json` with the refusal in the
request's version (its `_meta` envelope's, else its `MCP-Protocol-Version` header's).

The wire and the checks are `serve --http`'s own (`http.GuardHTTPServer`, with the
relay's `McpRoutes`): bounded heads, a deadline per phase, and the token
(`token.resolve`: `--token`, `$DSH_CIRCUIT_BREAKER_TOKEN`, else the state directory's
token file), `Host` naming this relay, a browser's `Origin` this relay; loopback only
unless `--allow-remote` with TLS. The token comes in `Dsh-Circuit-Breaker-Token`, or as
`Authorization: Bearer` when the server itself needs no `Authorization` (then that header
is the relay's and is not passed on). A body is at most 16 MiB (413 past it, like any
body `serve --http` will not read); a streamed answer (SSE, the GET stream) is passed on as
it comes, on a thread of its own.

Agents: a conversation id in `_meta`, `--agent-id`, else the client's name and its
`Mcp-Session-Id` (a digest of it: a session id is a credential); a 2026-07-28 client has
no session, so its calls key by its name for this relay run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.client
import itertools
import json
import signal
import socket
import ssl
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import urlsplit

from .. import token as tokens
from ..core.config import ConfigError
from ..core.lenient import elements
from .cli import listening
from .http import GuardHTTPServer, Response, _bearer, refused_json
from .mcp import (
    MAX_JUDGED_LINE,
    META_VERSION,
    Connection,
    McpGuard,
    Session,
    parsed,
    relay_say,
    server_name,
)
from .metrics import Metrics
from .wire import SECURITY_HEADERS, Refused, Request

TOKEN_HEADER = "Dsh-Circuit-Breaker-Token"
# Not passed on: hop-by-hop (RFC 9110 7.6.1), recomputed, or the relay's own.
DROPPED = frozenset(
    (
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "origin",  # checked against this relay; the server would see a foreign one
        "sec-fetch-site",
        "sec-fetch-mode",
        "sec-fetch-dest",
        TOKEN_HEADER.lower(),
    )
)
# What the relay's own answer carries already (wire.response writes them).
OURS = frozenset(["content-type", "server", "date", *(n.lower() for n, _ in SECURITY_HEADERS)])
CHUNK = 64 * 1024
SESSIONS = 10_000  # sessions whose client name is remembered (see HttpRelay.initialized)
# Requests waiting on the server at once, each on a thread of its own (a slow tool holds
# only its own); past this a request gets 503 at once.
THREADS = 1024
UPSTREAM_SECONDS = 300.0  # default --upstream-timeout: a slow tool's answer fits in it


class HttpRelay:
    """The relay's state: the guard, the upstream, each session's connection."""

    def __init__(
        self,
        guard: McpGuard,
        upstream: str,
        agent_id: str | None = None,
        timeout: float = UPSTREAM_SECONDS,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--upstream {upstream!r}: an http:// or https:// URL")
        self.guard = guard
        self.metrics = Metrics()  # GuardHTTPServer counts refused requests here
        self.secure = parts.scheme == "https"
        self.netloc = parts.netloc.rpartition("@")[2]
        self.host, self.port = parts.hostname, parts.port
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.agent_id = agent_id
        self.timeout = timeout
        # Sessions the server issued, least recently used first, with when each was used.
        self._sessions: OrderedDict[str, tuple[Connection, float]] = OrderedDict()
        self._idle = guard.config.idle_expiry_seconds
        self._sessionless = Connection(agent_id)
        self._lock = threading.Lock()

    def connect(self) -> http.client.HTTPConnection:
        """A connection whose every wait (connect, the answer's head, each read of its
        body) ends at `timeout`."""
        if self.secure:
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def connection(self, session: str | None) -> Connection:
        """The connection of `session`: as its `initialize` named it, or, for a session
        not remembered (made up, or past the bound), one with the default client name,
        the same each time, so its agent key never changes."""
        if not session:
            return self._sessionless
        key = _session_key(session)
        with self._lock:
            found = self._sessions.pop(key, None)
            if found is None:
                unknown = Connection(self.agent_id)
                unknown.id = key
                return unknown
            self._sessions[key] = (found[0], time.monotonic())
            return found[0]

    def judge(self, message: Any, headers: dict[str, str]) -> tuple[bytes | None, Session | None]:
        """The refusal to answer one POSTed message with (or None to pass it on), and the
        session awaiting its result, if any (`headers`: the request's, names in lower case).

        The result of a call comes back on the answer to its own POST, so it is awaited
        by that request alone: a table per session keyed by JSON-RPC id would mix up two
        clients without a session (every client counts its ids from 1)."""
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return None, None
        connection = _one_request(self.connection(headers.get("mcp-session-id")))
        header_version = headers.get("mcp-protocol-version")
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if header_version and not (isinstance(meta, dict) and META_VERSION in meta):
            connection.version = header_version  # what the client says it speaks
        session = Session(self.guard, connection)
        refusal = session.from_client(message)
        return refusal, session if session.connection.awaited else None

    def initialized(self, message: Any, session: str | None) -> None:
        """An `initialize` the server answered with session `session`: its client's name,
        remembered within SESSIONS. Only sessions the server issued enter, and only one
        idle past `idleExpiry` (whose agent state has expired anyway) makes room: a
        flood of sessions cannot change an active agent's key, so its count never
        restarts. A session past the bound keeps the default client name for its life."""
        if not session or not isinstance(message, dict) or message.get("method") != "initialize":
            return
        connection = Connection(self.agent_id)
        connection.initialize(message)
        key = connection.id = _session_key(session)  # the session is this connection
        now = time.monotonic()
        with self._lock:
            self._sessions.pop(key, None)
            while len(self._sessions) >= SESSIONS:
                oldest = next(iter(self._sessions))
                if now - self._sessions[oldest][1] < self._idle:
                    relay_say(f"{SESSIONS} active sessions: a new one is keyed as client {key}")
                    return
                del self._sessions[oldest]
            self._sessions[key] = (connection, now)

    def ended(self, session: str | None) -> None:
        """A session the client ended (DELETE) and the server let go: room for another."""
        if session:
            with self._lock:
                self._sessions.pop(_session_key(session), None)


def _session_key(session: str) -> str:
    return hashlib.sha256(session.encode()).hexdigest()[:12]  # a session id is a credential


def _one_request(connection: Connection) -> Connection:
    """`connection`'s agent and version, with results awaited by one request alone."""
    own = Connection(connection.agent_id)
    own.client, own.version, own.id = connection.client, connection.version, connection.id
    return own


class McpRoutes:
    """The relay's endpoints on `serve --http`'s server (its wire limits, deadlines,
    connection bounds and checks): every request is authorized and read in full first."""

    threads = THREADS

    def __init__(self, server: GuardHTTPServer) -> None:
        self.server = server
        self.relay: HttpRelay = cast(Any, server.guard)

    def authorize(self, request: Request) -> None:
        host = self.server.host_of(request)
        given = request.headers.get(TOKEN_HEADER.lower())
        given = given.strip() if given else _bearer(request.headers.get("authorization"))
        # DELETE ends a session: a browser may not send it cross-site, as a POST.
        self.server.admit(request, host, given, ("GET", "POST", "DELETE"))

    def body_limit(self, request: Request) -> int:
        return MAX_JUDGED_LINE

    def refused(self, request: Request | None, refusal: Refused) -> Response:
        return refused_json(refusal)

    def respond(self, request: Request) -> Response:
        try:
            message = parsed(request.body, "a client") if request.method == "POST" else None
            if isinstance(message, list) and message:
                return self._batch(request, message)
            answer, session = self._judged(message, request.headers)
            if answer is not None:
                return Response(200, answer, "application/json")
            return self._relayed(request, message, session)
        except TimeoutError:
            seconds = self.relay.timeout
            relay_say(f"{request.method}: no answer from the server within {seconds:g} s; gave up")
            error = {"error": f"the MCP server did not answer within {seconds:g} s"}
            return Response(504, json.dumps(error).encode(), "application/json", close=True)
        except OSError as exc:
            relay_say(f"{request.method}: the server cannot be reached: {exc}")
            return Response(
                502, b'{"error":"the MCP server cannot be reached"}', "application/json"
            )
        except Exception as exc:  # our own bug: say so, and stay up
            relay_say(f"{request.method}: {type(exc).__name__}: {exc}")
            data = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
            return Response(502, data, "application/json", close=True)

    def _judged(self, message: Any, headers: dict[str, str]) -> tuple[bytes | None, Session | None]:
        try:
            return self.relay.judge(message, headers)
        except Exception as exc:  # fail open
            relay_say(f"{type(exc).__name__}: {exc}; message passed on unjudged")
            return None, None

    def _batch(self, request: Request, messages: list[Any]) -> Response:
        """A JSON-RPC batch (2025-03-26; later versions dropped them, but SDK servers still
        run them): each `tools/call` in it judged as if sent alone; the refused ones are
        answered by the relay, the rest go to the server as a batch of their own bytes,
        and the two answers become one (the refusals first)."""
        raws = elements(request.body)
        if len(raws) != len(messages):  # our bug: the batch goes on whole, unjudged
            relay_say(
                f"a batch of {len(messages)} not split ({len(raws)} found); passed on unjudged"
            )
            return self._relayed(request, messages, None)
        refusals: list[bytes] = []
        kept: list[bytes] = []
        for message, raw in zip(messages, raws, strict=True):
            answer, _ = self._judged(message, request.headers)
            if answer is None:
                kept.append(raw)
            else:
                refusals.append(answer.rstrip(b"\n"))
        if not refusals:
            return self._relayed(request, messages, None)
        relay_say(f"a batch of {len(messages)}: {len(refusals)} refused, {len(kept)} passed on")
        if not kept:
            return Response(200, b"[" + b",".join(refusals) + b"]", "application/json")
        rest = self._relayed(request, messages, None, b"[" + b",".join(kept) + b"]")
        return _merged(rest, refusals)

    def _relayed(
        self, request: Request, message: Any, session: Session | None, body: bytes | None = None
    ) -> Response:
        relay = self.relay
        upstream = relay.connect()
        if body is None:
            body = request.body if request.method != "GET" else None
        try:
            upstream.request(
                request.method, relay.path, body=body, headers=self._upstream_headers(request, body)
            )
            answer = upstream.getresponse()
        except BaseException:
            upstream.close()
            raise
        relay.initialized(message, answer.getheader("Mcp-Session-Id"))
        if request.method == "DELETE" and 200 <= answer.status < 300:
            relay.ended(request.headers.get("mcp-session-id"))
        headers = tuple(
            (name, value)
            for name, value in answer.getheaders()
            if name.lower() not in DROPPED and name.lower() not in OURS
        )
        kind = answer.getheader("Content-Type")
        length = answer.getheader("Content-Length") or ""
        if length.isdigit() and int(length) <= MAX_JUDGED_LINE:  # larger: passed on as it comes
            try:
                body = answer.read()
            finally:
                upstream.close()
            if session is not None:
                _shown(session, body)
            return Response(answer.status, body, kind, extra=headers)
        if request.method == "GET" and upstream.sock is not None:
            upstream.sock.settimeout(None)  # the GET stream may rightly be quiet for hours
        chunks = _stream(upstream, answer)
        if session is not None:
            chunks = _watched(session, chunks)
        abort = functools.partial(_abort, upstream)
        return Response(answer.status, b"", kind, extra=headers, chunks=chunks, abort=abort)

    def _upstream_headers(self, request: Request, body: bytes | None) -> dict[str, str]:
        token = self.server.token.decode()
        headers = {}
        for name, value in request.headers.items():
            if name in DROPPED:
                continue
            if name == "authorization" and _bearer(value) == token:
                continue  # the relay's token, not the server's credentials
            headers[name] = value
        headers["host"] = self.relay.netloc
        if body is not None:
            headers["content-length"] = str(len(body))
        return headers


def _merged(answer: Response, refusals: list[bytes]) -> Response:
    """The server's answer to the rest of a batch with the relay's refusals added: into
    its JSON array, as SSE events ahead of its stream, or as the whole answer where it
    had none to give (202: the rest were notifications)."""
    if answer.status == 202 or (answer.chunks is None and not answer.data.strip()):
        return Response(200, b"[" + b",".join(refusals) + b"]", "application/json")
    if answer.chunks is not None:
        events = b"".join(b"event: message\ndata: " + r + b"\n\n" for r in refusals)
        answer.chunks = itertools.chain([events], answer.chunks)
        return answer
    data = answer.data.strip()
    if data.startswith(b"[") and data.endswith(b"]"):
        rest = data[1:-1].strip()
        answer.data = b"[" + b",".join([*refusals, *([rest] if rest else [])]) + b"]"
    else:  # one object (or an error) for the whole of the rest
        answer.data = b"[" + b",".join([*refusals, data]) + b"]"
    return answer


def _stream(upstream: http.client.HTTPConnection, answer: http.client.HTTPResponse) -> Any:
    """The upstream's body as it comes (an SSE stream ends when the server ends it)."""
    try:
        while chunk := answer.read1(CHUNK):
            yield chunk
    finally:
        upstream.close()


def _abort(upstream: http.client.HTTPConnection) -> None:
    """End a wait on `upstream` from another thread (its client has gone)."""
    sock = upstream.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _watched(session: Session, chunks: Iterator[bytes]) -> Iterator[bytes]:
    """An SSE stream passed on as it comes, each `data:` line on it shown to `session`
    until the results it awaits have come (the rest is not read)."""
    held = bytearray()
    for chunk in chunks:
        yield chunk
        if not session.connection.awaited:
            continue
        held += chunk
        while (end := held.find(b"\n")) >= 0:
            line = bytes(held[:end]).strip()
            del held[: end + 1]
            if line.startswith(b"data:"):
                _shown(session, line[5:])
        if len(held) > MAX_JUDGED_LINE:
            held.clear()  # a message past the judged size: not ours to read


def _shown(session: Session, data: bytes) -> None:
    try:
        session.from_server(parsed(data))
    except Exception as exc:  # fail open: the answer goes on unread
        relay_say(f"{type(exc).__name__}: {exc}; a result not observed")


def _seconds(text: str | None) -> float:
    if text is None:
        return UPSTREAM_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds <= 86400:
        raise ValueError(f"--upstream-timeout {text!r}: seconds, above 0 and at most 86400")
    return seconds


def serve(args: Any) -> int:
    """Run `mcp --http` until stopped; 2 with one line for a bad option."""
    if not args.upstream:
        relay_say("--http needs --upstream URL (the MCP server's)")
        return 2
    try:
        host, port, tls, loopback = listening(args)
        token = tokens.resolve(args.token)
        guard = McpGuard(args.config, args.state, server_name(args.name))
        relay = HttpRelay(guard, args.upstream, args.agent_id, _seconds(args.upstream_timeout))
        server = GuardHTTPServer(
            (host, port), cast(Any, relay), token, tls=tls, check_host=loopback, routes=McpRoutes
        )
    except (ConfigError, ValueError, OSError, ssl.SSLError) as exc:
        relay_say(str(exc))
        return 2
    print(f"dsh-circuit-breaker mcp: relaying {server.origin} to {args.upstream}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        guard.close()
    sys.stdout.flush()
    return 0
