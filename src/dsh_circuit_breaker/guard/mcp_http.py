"""`dsh-circuit-breaker mcp --http [HOST:]PORT --upstream URL`: the relay in front of a
Streamable HTTP MCP server.

Every request, on any path, goes to `--upstream URL` unchanged: POST (answered with JSON
or an SSE stream, passed back as it comes), the GET stream, DELETE; headers pass both
ways (`Mcp-Session-Id`, `MCP-Protocol-Version`, the client's own `Authorization` for the
server), less the hop-by-hop ones, with `Host` the upstream's. Only a POST whose body is
one `tools/call` is judged (`mcp.Session`); a refused one never reaches the server and is
answered `200 application/json` with the refusal in the request's version (its `_meta`
envelope's, else its `MCP-Protocol-Version` header's).

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

import hashlib
import http.client
import json
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import urlsplit

from ..cjson import loads
from .http import GuardHTTPServer, Response, _bearer, refused_json
from .mcp import MAX_JUDGED_LINE, META_VERSION, Connection, McpGuard, Session, say
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
SESSIONS = 10_000  # sessions whose client name is remembered (least recent dropped)


class HttpRelay:
    """The relay's state: the guard, the upstream, each session's connection."""

    def __init__(self, guard: McpGuard, upstream: str, agent_id: str | None = None) -> None:
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
        self._sessions: OrderedDict[str, Connection] = OrderedDict()
        self._sessionless = Connection(agent_id)
        self._lock = threading.Lock()

    def connect(self) -> http.client.HTTPConnection:
        if self.secure:
            return http.client.HTTPSConnection(self.host, self.port)
        return http.client.HTTPConnection(self.host, self.port)

    def connection(self, session: str | None) -> Connection:
        if not session:
            return self._sessionless
        key = hashlib.sha256(session.encode()).hexdigest()[:12]
        with self._lock:
            found = self._sessions.get(key)
            if found is None:
                found = self._sessions[key] = Connection(self.agent_id)
                found.id = key
                while len(self._sessions) > SESSIONS:
                    self._sessions.popitem(last=False)
            else:
                self._sessions.move_to_end(key)
            return found

    def judge(self, message: Any, headers: dict[str, str]) -> bytes | None:
        """The refusal to answer one POSTed message with, or None to pass it on
        (`headers`: the request's, their names in lower case)."""
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return None
        connection = self.connection(headers.get("mcp-session-id"))
        header_version = headers.get("mcp-protocol-version")
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if header_version and not (isinstance(meta, dict) and META_VERSION in meta):
            connection.version = header_version  # what the client says it speaks
        return Session(self.guard, connection).from_client(message)

    def answering(self, message: Any, headers: dict[str, str]) -> Session | None:
        """The session awaiting the result of `message`, an allowed `tools/call`, if any."""
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return None
        connection = self.connection(headers.get("mcp-session-id"))
        return Session(self.guard, connection) if connection.awaited else None

    def initialized(self, message: Any, session: str | None) -> None:
        """An `initialize` the server answered with session `session`: its client's name."""
        if not session or not isinstance(message, dict) or message.get("method") != "initialize":
            return
        connection = self.connection(session)
        key = connection.id
        connection.initialize(message)
        connection.id = key  # the session, not a random id, is this connection


class McpRoutes:
    """The relay's endpoints on `serve --http`'s server (its wire limits, deadlines,
    connection bounds and checks): every request is authorized and read in full first."""

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
            message = _parsed(request.body) if request.method == "POST" else None
            answer = self._judged(message, request.headers)
            if answer is not None:
                return Response(200, answer, "application/json")
            return self._relayed(request, message)
        except OSError as exc:
            say(f"{request.method}: the server cannot be reached: {exc}")
            return Response(
                502, b'{"error":"the MCP server cannot be reached"}', "application/json"
            )
        except Exception as exc:  # our own bug: say so, and stay up
            say(f"{request.method}: {type(exc).__name__}: {exc}")
            data = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
            return Response(502, data, "application/json", close=True)

    def _judged(self, message: Any, headers: dict[str, str]) -> bytes | None:
        try:
            return self.relay.judge(message, headers)
        except Exception as exc:  # fail open
            say(f"{type(exc).__name__}: {exc}; message passed on unjudged")
            return None

    def _relayed(self, request: Request, message: Any) -> Response:
        relay = self.relay
        upstream = relay.connect()
        body = request.body if request.method != "GET" else None
        try:
            upstream.request(
                request.method, relay.path, body=body, headers=self._upstream_headers(request)
            )
            answer = upstream.getresponse()
        except BaseException:
            upstream.close()
            raise
        relay.initialized(message, answer.getheader("Mcp-Session-Id"))
        headers = tuple(
            (name, value)
            for name, value in answer.getheaders()
            if name.lower() not in DROPPED and name.lower() not in OURS
        )
        kind = answer.getheader("Content-Type")
        session = relay.answering(message, request.headers)
        if answer.getheader("Content-Length") is not None:
            try:
                body = answer.read()
            finally:
                upstream.close()
            if session is not None:
                _shown(session, body)
            return Response(answer.status, body, kind, extra=headers)
        chunks = _stream(upstream, answer)
        if session is not None:
            chunks = _watched(session, chunks)
        return Response(answer.status, b"", kind, extra=headers, chunks=chunks)

    def _upstream_headers(self, request: Request) -> dict[str, str]:
        token = self.server.token.decode()
        headers = {}
        for name, value in request.headers.items():
            if name in DROPPED:
                continue
            if name == "authorization" and _bearer(value) == token:
                continue  # the relay's token, not the server's credentials
            headers[name] = value
        headers["host"] = self.relay.netloc
        if request.method != "GET":
            headers["content-length"] = str(len(request.body))
        return headers


def _stream(upstream: http.client.HTTPConnection, answer: http.client.HTTPResponse) -> Any:
    """The upstream's body as it comes (an SSE stream ends when the server ends it)."""
    try:
        while chunk := answer.read1(CHUNK):
            yield chunk
    finally:
        upstream.close()


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
        session.from_server(_parsed(data))
    except Exception as exc:  # fail open: the answer goes on unread
        say(f"{type(exc).__name__}: {exc}; a result not observed")


def _parsed(body: bytes | None) -> Any:
    try:
        return loads(body) if body else None
    except (ValueError, RecursionError):
        return None


def serve(args: Any) -> int:
    """Run `mcp --http` until stopped; 2 with one line for a bad option."""
    import signal
    import ssl

    from .. import token as tokens
    from ..config import ConfigError
    from .cli import listening
    from .mcp import _server_name

    if not args.upstream:
        say("--http needs --upstream URL (the MCP server's)")
        return 2
    try:
        host, port, tls, loopback = listening(args)
        token = tokens.resolve(args.token)
        guard = McpGuard(args.config, args.state, _server_name(args.name))
        relay = HttpRelay(guard, args.upstream, args.agent_id)
        server = GuardHTTPServer(
            (host, port), cast(Any, relay), token, tls=tls, check_host=loopback, routes=McpRoutes
        )
    except (ConfigError, ValueError, OSError, ssl.SSLError) as exc:
        say(str(exc))
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
