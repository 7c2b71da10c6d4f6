"""`dsh-circuit-breaker mcp --http [HOST:]PORT --upstream URL`: the relay in front of a
Streamable HTTP MCP server.

Every request, on any path, goes to `--upstream URL` unchanged: POST (answered with JSON
or an SSE stream, passed back as it comes), the GET stream, DELETE; headers pass both
ways (`Mcp-Session-Id`, `MCP-Protocol-Version`, the client's own `Authorization` for the
server), less the hop-by-hop ones, with `Host` the upstream's. Only a POST whose body is
one `tools/call` is judged (`mcp.Session`); a refused one never reaches the server and is
answered `200 application/json` with the refusal in the request's version (its `_meta`
envelope's, else its `MCP-Protocol-Version` header's).

The security checks are `serve --http`'s own (`http.Handler._authorized`): the token
(`token.resolve`: `--token`, `$DSH_CIRCUIT_BREAKER_TOKEN`, else the state directory's
token file), `Host` naming this relay, a browser's `Origin` this relay; loopback only
unless `--allow-remote` with TLS. The token comes in `Dsh-Circuit-Breaker-Token`, or as
`Authorization: Bearer` when the server itself needs no `Authorization` (then that header
is the relay's and is not passed on).

Agents: a conversation id in `_meta`, `--agent-id`, else the client's name and its
`Mcp-Session-Id` (a digest of it: a session id is a credential); a 2026-07-28 client has
no session, so its calls key by its name for this relay run.
"""

from __future__ import annotations

import hashlib
import http.client
import sys
import threading
from collections import OrderedDict
from typing import Any, cast
from urllib.parse import urlsplit

from ..cjson import loads
from .http import GuardHTTPServer, Handler, Refused, _bearer
from .mcp import MAX_JUDGED_LINE, META_VERSION, Connection, McpGuard, Session, say
from .metrics import Metrics

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

    def judge(self, message: Any, headers: Any) -> bytes | None:
        """The refusal to answer one POSTed message with, or None to pass it on."""
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return None
        connection = self.connection(headers.get("Mcp-Session-Id"))
        header_version = headers.get("MCP-Protocol-Version")
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if header_version and not (isinstance(meta, dict) and META_VERSION in meta):
            connection.version = header_version  # what the client says it speaks
        return Session(self.guard, connection).from_client(message)

    def initialized(self, message: Any, session: str | None) -> None:
        """An `initialize` the server answered with session `session`: its client's name."""
        if not session or not isinstance(message, dict) or message.get("method") != "initialize":
            return
        connection = self.connection(session)
        key = connection.id
        connection.initialize(message)
        connection.id = key  # the session, not a random id, is this connection


class McpHTTPServer(GuardHTTPServer):
    """`serve --http`'s server (its connection limit, deadlines and checks), with the
    relay's handler."""

    def __init__(
        self,
        address: tuple[str, int],
        relay: HttpRelay,
        token: str,
        *,
        tls: Any = None,
        check_host: bool = True,
    ) -> None:
        # GuardHTTPServer reads only `.metrics` from its guard; the relay has one.
        super().__init__(address, cast(Any, relay), token, tls=tls, check_host=check_host)
        self.relay = relay

    def finish_request(self, request: Any, client_address: Any) -> None:
        McpHandler(request, client_address, self)


class McpHandler(Handler):
    server: McpHTTPServer

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _token_given(self) -> str | None:
        own = self.headers.get(TOKEN_HEADER)
        return own.strip() if own else super()._token_given()

    def _serve(self, method: str) -> None:
        try:
            # DELETE ends a session: a browser may not send it cross-site, as a POST.
            self._authorized("POST" if method == "DELETE" else method)
            length = self._length() if method != "GET" else 0
        except Refused as exc:
            self.server.metrics.count("refused", exc.reason)
            self._send_json(exc.status, {"error": str(exc)}, close=True)
            return
        try:
            self._relay(method, length)
        except OSError:
            self.close_connection = True  # either side went away: nothing to answer
        except Exception as exc:  # our own bug: say so, and stay up
            say(f"{method}: {type(exc).__name__}: {exc}")
            self._send_json(502, {"error": f"{type(exc).__name__}: {exc}"}, close=True)

    def _length(self) -> int:
        if self.headers.get("Transfer-Encoding"):
            raise Refused(411, "length", "send the body with a Content-Length")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise Refused(400, "length", "Content-Length is not a number") from None
        if length < 0:
            raise Refused(400, "length", "Content-Length is negative")
        return length

    def _relay(self, method: str, length: int) -> None:
        relay = self.server.relay
        body: Any = None
        message = None
        if length <= MAX_JUDGED_LINE:
            body = self.rfile.read(length) if method != "GET" else None
            if body is not None and len(body) != length:
                raise OSError("the body ended before its Content-Length")
            self.server.watch(self.request, None)  # read in full: no longer the client's time
            message = _parsed(body) if method == "POST" else None
            answer = self._judged(message)
            if answer is not None:
                self._send(200, answer, "application/json")
                return
        else:  # passed on as it is read, unjudged
            self.server.watch(self.request, None)
            say(f"a body of {length} bytes is longer than {MAX_JUDGED_LINE}: passed on unjudged")
            body = _Body(self.rfile, length)
        upstream = relay.connect()
        try:
            upstream.request(method, relay.path, body=body, headers=self._upstream_headers(length))
            response = upstream.getresponse()
            relay.initialized(message, response.getheader("Mcp-Session-Id"))
            self._answer(response)
        finally:
            upstream.close()

    def _judged(self, message: Any) -> bytes | None:
        try:
            return self.server.relay.judge(message, self.headers)
        except Exception as exc:  # fail open
            say(f"{type(exc).__name__}: {exc}; message passed on unjudged")
            return None

    def _upstream_headers(self, length: int) -> dict[str, str]:
        token = self.server.token.decode()
        headers = {}
        for name, value in self.headers.items():
            lower = name.lower()
            if lower in DROPPED:
                continue
            if lower == "authorization" and _bearer(value) == token:
                continue  # the relay's token, not the server's credentials
            headers[name] = value
        headers["Host"] = self.server.relay.netloc
        if self.command != "GET":
            headers["Content-Length"] = str(length)
        return headers

    def _answer(self, response: http.client.HTTPResponse) -> None:
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in DROPPED:
                self.send_header(name, value)
        length = response.getheader("Content-Length")
        if length is not None:
            self.send_header("Content-Length", length)
        else:  # a stream (SSE): it ends when the server ends it
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        while chunk := response.read1(CHUNK):
            self.wfile.write(chunk)


class _Body:
    """A request body of `length` bytes, read as http.client sends it."""

    def __init__(self, stream: Any, length: int) -> None:
        self.stream = stream
        self.left = length

    def read(self, size: int = CHUNK) -> bytes:
        if self.left <= 0:
            return b""
        data: bytes = self.stream.read(min(size, self.left, CHUNK))
        if not data:
            raise OSError("the body ended before its Content-Length")
        self.left -= len(data)
        return data


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
        server = McpHTTPServer((host, port), relay, token, tls=tls, check_host=loopback)
    except (ConfigError, ValueError, OSError, ssl.SSLError) as exc:
        say(str(exc))
        return 2
    print(f"dsh-circuit-breaker mcp: relaying {server.origin} to {args.upstream}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        guard.close()
    sys.stdout.flush()
    return 0
