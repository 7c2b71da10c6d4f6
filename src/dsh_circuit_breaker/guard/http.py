"""`dsh-circuit-breaker serve --http [HOST:]PORT`: the guard over HTTP.

Endpoints (every one needs the token, see `token`):

    POST /hook/<harness>            a hook event in; exactly what `hook --harness` prints out
    GET  /                          the live page (the token in `?token=`, as Jupyter does)
    GET  /api/agents                the store's agents, as the page lists them
    GET  /api/agents/<id>           one agent (null if not in the store) and its timeline
    POST /api/agents/<id>/reset     forget one agent's state
    GET  /api/incidents?after=N     incident log records after byte N
    GET  /metrics                   Prometheus text format
    GET  /healthz                   {"ok": true, "version", "pid"}
    GET  /proof?nonce=HEX           the one without the token: proof that this service holds
                                    it, never the token (`ensure.proof`)
    POST /api/shutdown              stop this service (what `serve --stop` asks)

Any local process, and any web page the user's browser shows, can reach a loopback port,
so, in this order and before any work is done for a request: its head is read bounded
(`wire`: at most HEAD_BYTES and MAX_HEADERS lines, within HEAD_SECONDS); the `Host`
header must name this service (a DNS-rebinding page names its own host, 421); the token
must be there (401); a POST from a browser must come from the page itself (`Origin`,
`Sec-Fetch-Site`; 403); only then is a body read, at most MAX_HOOK_BODY bytes on /hook
(as the command hook reads at most) and MAX_API_BODY elsewhere (413, unread), within
BODY_SECONDS.

One event loop holds every connection (a few kilobytes each, no thread), so clients that
trickle or hold connections open cost memory only, bounded: at most MAX_UNAUTHENTICATED
connections that have not yet sent the token (past that the oldest is closed), at most
MAX_CONNECTIONS in all, both lowered to fit this process's descriptor limit
(`descriptor_budget`). Decisions run on WORKERS threads, which only authenticated,
complete requests ever reach: whatever unauthenticated clients do, the harness's
requests are answered.

A non-loopback address needs `--allow-remote` and TLS (`--tls-cert`, `--tls-key`): the
token would otherwise cross the network in clear text (see `cli`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import secrets
import socket
import ssl
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from .. import token as tokens
from .._version import __version__
from ..address import PROBE, is_loopback
from ..core._log import warn
from ..core.config_file import ENV_TOKEN
from ..core.stores import StoreUnavailable
from ..harnesses import HARNESSES
from ..judge import BIG_EVENT_BYTES, MAX_EVENT_BYTES
from ..token import proof
from .metrics import CONTENT_TYPE
from .service import Guard
from .unauthorized import page as unauthorized
from .wire import HEAD_BYTES, Refused, Request, parse_head, response
from .workers import Workers

MAX_HOOK_BODY = MAX_EVENT_BYTES
MAX_API_BODY = 64 * 1024
HEAD_SECONDS = 10.0  # to send a request line and headers, from the first wait (idle included)
BODY_SECONDS = 10.0  # to send the body, once the head is accepted
WRITE_SECONDS = 10.0  # to take an answer
MAX_CONNECTIONS = 8192
MAX_UNAUTHENTICATED = 2048
WORKERS = 8
# Big bodies judged at once: each holds its bytes and up to a few tens of MB while it is
# read (bounded.py); the rest wait on the loop, not on a worker a small call needs.
BIG_AT_ONCE = 2
MAX_STREAMS = 1024  # relayed streams open at once (threads waiting on their upstream)
BACKLOG = 1024
RESERVED_DESCRIPTORS = 64  # for what is not a client: the store's files, logs, pipes
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


class Response:
    """What a route answers; `stop` asks the server to stop once it is sent."""

    __slots__ = ("abort", "chunks", "close", "content_type", "data", "extra", "status", "stop")

    def __init__(
        self,
        status: int,
        data: bytes,
        content_type: str | None = None,
        *,
        close: bool = False,
        extra: tuple[tuple[str, str], ...] = (),
        stop: bool = False,
        chunks: Iterator[bytes] | None = None,
        abort: Callable[[], None] | None = None,
    ) -> None:
        self.status, self.data, self.content_type = status, data, content_type
        self.close, self.extra, self.stop = close, extra, stop
        # A body that comes as it is made (a relayed stream): it ends the connection.
        # `abort` (from the loop's thread) makes a wait for the next chunk end at once.
        self.chunks = chunks
        self.abort = abort

    def wire(self, keep_alive: bool, chunked: bool = False) -> bytes:
        extra = self.extra
        if self.status == 401:
            extra = (*extra, ("WWW-Authenticate", 'Bearer realm="dsh-circuit-breaker"'))
        close = self.close or not keep_alive
        streamed = self.chunks is not None
        return response(
            self.status,
            self.data,
            self.content_type,
            close=close,
            extra=extra,
            streamed=streamed,
            chunked=chunked,
        )


def json_response(status: int, payload: Any, *, close: bool = False) -> Response:
    data = json.dumps(payload, separators=(",", ":")).encode()
    return Response(status, data, "application/json", close=close)


class _Deadline:
    """A timer cancelled when its `with` block ends (a class: a generator-based context
    manager costs more than the timer itself, and every request takes two)."""

    __slots__ = ("timer",)

    def __init__(self, timer: asyncio.TimerHandle) -> None:
        self.timer = timer

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc_info: object) -> None:
        self.timer.cancel()


class RouteSet(Protocol):
    """What a server serves: its checks before a body is read, its body limit, its
    answers (on worker threads, the request read in full)."""

    def authorize(self, request: Request) -> None: ...

    def body_limit(self, request: Request) -> int: ...

    def respond(self, request: Request) -> Response: ...

    # 0: `respond` runs on the shared WORKERS threads (it never waits on anything slow);
    # else a thread of its own, at most this many at once (past that: 503 at once).
    threads: int

    def refused(self, request: Request | None, refusal: Refused) -> Response:
        """The answer to a request refused before it was read (`request`: its head, if it
        was parsed); the connection closes after it."""
        ...


def refused_json(refusal: Refused) -> Response:
    return json_response(refusal.status, {"error": str(refusal)}, close=True)


class GuardHTTPServer:
    """The listening socket (bound at construction, so a taken port fails there) and the
    event loop `serve_forever` runs; `shutdown` stops it from any thread."""

    def __init__(
        self,
        address: tuple[str, int],
        guard: Guard,
        token: str,
        *,
        tls: ssl.SSLContext | None = None,
        check_host: bool = True,
        routes: Callable[[GuardHTTPServer], RouteSet] | None = None,
    ) -> None:
        """`routes` makes the endpoints (default: the guard's own, `Routes`); another
        transport (the MCP relay) serves its own behind the same wire, limits and checks."""
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.socket = socket.create_server(address, family=family, backlog=BACKLOG)
        self.server_address = self.socket.getsockname()
        self.guard = guard
        self.metrics = guard.metrics
        self.token = token.encode()
        self.tls = tls
        self.check_host = check_host
        self.allowed_hosts = self._hosts()
        self.routes: RouteSet = (routes or Routes)(self)
        # A relay's client connection may hold a connection to its server as well.
        self.max_connections, self.max_unauthenticated = descriptor_budget(
            2 if self.routes.threads else 1
        )
        self._workers = Workers(WORKERS, "guard")
        self._own = ThreadPoolExecutor(self.routes.threads or 1, thread_name_prefix="request")
        self._busy = 0  # requests on `_own` threads (counted on the loop's thread)
        self._big = asyncio.Semaphore(BIG_AT_ONCE)
        self._streams = ThreadPoolExecutor(MAX_STREAMS, thread_name_prefix="stream")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopping = False
        self._open: set[asyncio.StreamWriter] = set()
        # Connections that have not sent the token yet, oldest first.
        self._unauthenticated: OrderedDict[asyncio.StreamWriter, None] = OrderedDict()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def origin(self) -> str:
        host = str(self.server_address[0])
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def _hosts(self) -> set[str]:
        host = str(self.server_address[0])
        names = {host, f"[{host}]"} | set(LOOPBACK_NAMES if is_loopback(host) else ())
        return {f"{name}:{self.port}".lower() for name in names}

    # -- running -------------------------------------------------------------------------
    def serve_forever(self) -> None:
        asyncio.run(self._serve())

    def shutdown(self) -> None:
        """Stop serving (safe from a signal handler or another thread)."""
        self._stopping = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(stop.set)

    def server_close(self) -> None:
        self.socket.close()
        self._workers.shutdown()
        self._own.shutdown(wait=False)
        self._streams.shutdown(wait=False)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(_loop_error)
        self._stop = asyncio.Event()
        if self._stopping:
            return
        server = await asyncio.start_server(
            self._connection,
            sock=self.socket,
            limit=HEAD_BYTES,
            backlog=BACKLOG,
            ssl=self.tls,
            ssl_handshake_timeout=HEAD_SECONDS if self.tls else None,
        )
        try:
            await self._stop.wait()
        finally:
            server.close()
            for writer in list(self._open):
                writer.transport.abort()

    # -- connections ---------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._open) >= self.max_connections:
            self.metrics.count("refused", "busy")
            writer.transport.abort()
            return
        self._open.add(writer)
        self._unauthenticated[writer] = None
        if len(self._unauthenticated) > self.max_unauthenticated:
            oldest, _ = self._unauthenticated.popitem(last=False)
            self.metrics.count("refused", "busy")
            oldest.transport.abort()
        try:
            while await self._exchange(reader, writer):
                pass
        except (OSError, asyncio.IncompleteReadError):
            pass  # the client went away, or was cut off at a deadline: nothing to tell
        finally:
            self._unauthenticated.pop(writer, None)
            self._open.discard(writer)
            writer.transport.abort()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read one request and answer it; whether the connection stays open."""
        request: Request | None = None
        try:
            with self._deadline(writer, HEAD_SECONDS):
                head = await _head(reader)
            request = parse_head(head)
            self.routes.authorize(request)
            self._unauthenticated.pop(writer, None)
            length = request.length(self.routes.body_limit(request))
            if length:
                with self._deadline(writer, BODY_SECONDS):
                    request.body = await reader.readexactly(length)
        except Refused as exc:
            # Closed after the answer: a body left unread must not be taken for a request.
            self.metrics.count("refused", exc.reason)
            await self._send(writer, self.routes.refused(request, exc))
            return False
        answer = await self._answer(request)
        chunked = answer.chunks is not None and request.http11
        await self._send(writer, answer, request.keep_alive, chunked)
        if answer.chunks is not None:
            await self._stream(reader, writer, answer, chunked)
            return False
        if answer.stop and self._stop is not None:
            self._stop.set()
        return request.keep_alive and not answer.close

    async def _answer(self, request: Request) -> Response:
        if len(request.body) > BIG_EVENT_BYTES:
            async with self._big:
                return await self._answer_now(request)
        return await self._answer_now(request)

    async def _answer_now(self, request: Request) -> Response:
        routes = self.routes
        if not routes.threads:
            return await self._workers.submit(routes.respond, request)
        if self._busy >= routes.threads:
            self.metrics.count("refused", "busy")
            message = f"{routes.threads} requests are waiting on the server; try again"
            warn("dsh-circuit-breaker: %s", message)
            return json_response(503, {"error": message}, close=True)
        self._busy += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._own, routes.respond, request)
        finally:
            self._busy -= 1

    async def _stream(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        answer: Response,
        chunked: bool,
    ) -> None:
        """Write a streamed body as it comes. Each wait for the next chunk holds a thread
        of its own (a stream may stay open for hours), never one of the workers; a client
        that goes frees it at once (`answer.abort`). A source that fails ends the
        connection without the last chunk: the client sees a cut."""
        loop = asyncio.get_running_loop()
        chunks = answer.chunks
        assert chunks is not None
        # A client sends nothing more on a stream: a read that ends means it has gone.
        gone = asyncio.ensure_future(reader.read(1))
        try:
            while True:
                waiting = loop.run_in_executor(self._streams, next, chunks, b"")
                await asyncio.wait((waiting, gone), return_when=asyncio.FIRST_COMPLETED)
                if not waiting.done():
                    if answer.abort is not None:
                        answer.abort()
                    with contextlib.suppress(Exception):
                        await waiting  # its thread is free once the aborted read ends
                    return
                try:
                    chunk = waiting.result()
                except Exception as exc:
                    warn(
                        "dsh-circuit-breaker: a stream was cut short (%s: %s)",
                        type(exc).__name__,
                        exc,
                    )
                    writer.transport.abort()
                    return
                if not chunk:
                    if chunked:
                        writer.write(b"0\r\n\r\n")
                        with self._deadline(writer, WRITE_SECONDS):
                            await writer.drain()
                    return
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                with self._deadline(writer, WRITE_SECONDS):
                    await writer.drain()
        finally:
            gone.cancel()
            close = getattr(chunks, "close", None)
            if close is not None:
                await loop.run_in_executor(self._streams, close)

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        answer: Response,
        keep_alive: bool = False,
        chunked: bool = False,
    ) -> None:
        writer.write(answer.wire(keep_alive, chunked))
        if writer.transport.get_write_buffer_size():  # the socket did not take it all at once
            with self._deadline(writer, WRITE_SECONDS):
                await writer.drain()

    def _deadline(self, writer: asyncio.StreamWriter, seconds: float) -> _Deadline:
        """Cut the connection off unless the `with` block ends within `seconds` (the read
        or write it waits on then fails; a timer, not a task per phase)."""
        assert self._loop is not None
        return _Deadline(self._loop.call_later(seconds, self._late, writer))

    def _late(self, writer: asyncio.StreamWriter) -> None:
        self.metrics.count("refused", "slow")
        writer.transport.abort()

    # -- the checks every route set makes, before a body is read ---------------------------
    def host_of(self, request: Request) -> str:
        """The request's Host; Refused unless it names this service (DNS rebinding)."""
        host = request.headers.get("host", "").lower()
        if self.check_host and host not in self.allowed_hosts:
            raise Refused(421, "host", f"this service does not answer for host {host!r}")
        return host

    def admit(
        self, request: Request, host: str, given: str | None, methods: tuple[str, ...]
    ) -> None:
        """The token (`given`, compared in constant time), then the method, then, for
        anything but a GET, that a browser sent it from this service's own page."""
        if given is None or not hmac.compare_digest(given.encode(), self.token):
            raise Refused(401, "token", "a valid token is required (Authorization: Bearer)")
        if request.method not in methods:
            raise Refused(405, "method", f"{request.method} is not served here")
        if request.method != "GET":
            origin = request.headers.get("origin")
            if origin is not None and not self.same_origin(origin, host):
                raise Refused(403, "origin", f"cross-site request from {origin!r} refused")
            site = request.headers.get("sec-fetch-site")
            if site is not None and site not in ("same-origin", "none"):
                raise Refused(403, "origin", f"cross-site request ({site}) refused")

    def same_origin(self, origin: str, host: str) -> bool:
        """`origin` (a browser's Origin header) is this service, by any name it answers to;
        off loopback, the name the request itself was sent to (TLS vouches for it)."""
        parts = urlsplit(origin.lower())
        if parts.scheme != ("https" if self.tls else "http"):
            return False
        if self.check_host:
            return parts.netloc in self.allowed_hosts
        return bool(host) and parts.netloc == host.lower()


class Routes:
    """The endpoints, on worker threads: the request is authorized and read in full."""

    threads = 0  # decisions: the shared workers

    def __init__(self, server: GuardHTTPServer) -> None:
        self.server = server
        self.guard = server.guard
        self.page = _page_parts()

    def authorize(self, request: Request) -> None:
        """Host, token and origin checks, before a body is read; Refused if one fails."""
        host = self.server.host_of(request)
        if request.method == "GET" and request.path == "/proof":
            return  # proves the token to a client that will not send it to a stranger
        given = _bearer(request.headers.get("authorization"))
        if given is None and request.method == "GET" and request.path == "/":
            given = _first(request.query, "token")
        self.server.admit(request, host, given, ("GET", "POST"))

    def body_limit(self, request: Request) -> int:
        return MAX_HOOK_BODY if request.path.startswith("/hook/") else MAX_API_BODY

    def refused(self, request: Request | None, refusal: Refused) -> Response:
        page = request is not None and request.method == "GET" and request.path == "/"
        if refusal.status != 401 or not page:
            return refused_json(refusal)
        # A person at the page's address without the token: say where it is, as a page.

        policy = ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
        data = unauthorized(tokens.token_path(), ENV_TOKEN)
        return Response(401, data, "text/html; charset=utf-8", close=True, extra=(policy,))

    def respond(self, request: Request) -> Response:
        try:
            return self._route(request.method, request.path, request.query, request.body)
        except Exception as exc:  # our own bug: say so, and stay up
            warn(
                "dsh-circuit-breaker serve: %s %s failed",
                request.method,
                request.path,
                exc_info=True,
            )
            return json_response(500, {"error": f"{type(exc).__name__}: {exc}"}, close=True)

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> Response:
        guard = self.guard
        if method == "POST" and path.startswith("/hook/"):
            return self._hook(path[len("/hook/") :], body, _first(query, PROBE) is not None)
        if method == "GET" and path == "/":
            return self._page()
        if method == "GET" and path == "/healthz":
            return json_response(200, {"ok": True, "version": __version__, "pid": os.getpid()})
        if method == "GET" and path == "/proof":
            return self._proof(_first(query, "nonce") or "")
        if method == "POST" and path == "/api/shutdown":
            answer = json_response(200, {"stopping": True, "pid": os.getpid()}, close=True)
            answer.stop = True
            return answer
        if method == "GET" and path == "/metrics":
            text = self.server.metrics.render(self._agents_tracked)
            return Response(200, text.encode(), CONTENT_TYPE)
        if method == "GET" and path == "/api/agents":
            return _store_json(guard.agents)
        if method == "GET" and path == "/api/incidents":
            after = _first(query, "after")
            offset = int(after) if after is not None and after.isdigit() else None
            return json_response(200, guard.incidents(offset))
        if path.startswith("/api/agents/"):
            return self._agent(method, path[len("/api/agents/") :])
        return json_response(404, {"error": f"no {method} {path}"})

    def _hook(self, name: str, body: bytes, probe: bool) -> Response:
        if name not in HARNESSES:
            return json_response(
                404, {"error": f"unknown harness {name!r}; known: {list(HARNESSES)}"}
            )
        answer = self.guard.hook(name, body, probe)
        if answer.warning:
            warn("dsh-circuit-breaker serve: %s", answer.warning)
        return Response(200, answer.body, "application/json" if answer.body else None)

    def _agent(self, method: str, rest: str) -> Response:
        guard = self.guard
        if method == "POST" and rest.endswith("/reset"):
            agent = unquote(rest[: -len("/reset")])
            return _store_json(lambda: guard.reset(agent), f"no agent {agent!r} in the store")
        if method == "GET" and "/" not in rest:
            agent = unquote(rest)
            return _store_json(lambda: guard.agent(agent))
        return json_response(404, {"error": f"no {method} /api/agents/{rest}"})

    def _proof(self, nonce: str) -> Response:
        if not 2 <= len(nonce) <= 128 or not all(c in "0123456789abcdef" for c in nonce):
            return json_response(400, {"error": "nonce: 2 to 128 lowercase hex digits"})
        token = self.server.token.decode()
        return json_response(200, {"proof": proof(token, self.server.port, nonce)})

    def _agents_tracked(self) -> int | None:
        return self.guard.tracked()

    def _page(self) -> Response:
        nonce = secrets.token_urlsafe(16)
        head, script = self.page
        html = head.replace("{{nonce}}", nonce).replace("{{script}}", script)
        policy = (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'"
        )
        return Response(
            200,
            html.encode(),
            "text/html; charset=utf-8",
            extra=(("Content-Security-Policy", policy),),
        )


def _store_json(read: Any, missing: str = "") -> Response:
    try:
        found = read()
    except StoreUnavailable as exc:
        return json_response(503, {"error": f"state store unavailable: {exc}"})
    if found is None:
        return json_response(404, {"error": missing})
    return json_response(200, found)


async def _head(reader: asyncio.StreamReader) -> bytes:
    """A request head, line by line up to its blank line; Refused past HEAD_BYTES, or at
    the first line that ends in a bare LF (waiting for a CRLF CRLF that never comes would
    hold the connection till the deadline)."""
    lines: list[bytes] = []
    size = 0
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            line = b""
            size = HEAD_BYTES + 1
        size += len(line)
        if size > HEAD_BYTES:
            raise Refused(431, "too_large", f"a request head is at most {HEAD_BYTES} bytes")
        if not line.endswith(b"\r\n"):
            raise Refused(400, "malformed", "a line of the request head ends in a bare LF")
        lines.append(line)
        if line == b"\r\n":
            return b"".join(lines)


def descriptor_budget(per_connection: int) -> tuple[int, int]:
    """MAX_CONNECTIONS and MAX_UNAUTHENTICATED, lowered to fit the descriptor limit
    (RLIMIT_NOFILE: 1,024 under systemd, 256 on macOS) with RESERVED_DESCRIPTORS to
    spare, its soft limit first raised toward what they need where the hard limit
    allows. Past the limit a connection is not even accepted, so the oldest tokenless
    one is closed before it: a squatter never keeps the harness out."""
    try:
        import resource
    except ImportError:  # not POSIX: no such limit to fit
        return MAX_CONNECTIONS, MAX_UNAUTHENTICATED
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = MAX_CONNECTIONS * per_connection + RESERVED_DESCRIPTORS
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):  # macOS: past OPEN_MAX
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    if soft == resource.RLIM_INFINITY or soft >= need:
        return MAX_CONNECTIONS, MAX_UNAUTHENTICATED
    connections = max(8, (soft - RESERVED_DESCRIPTORS) // per_connection)
    unauthenticated = max(2, min(MAX_UNAUTHENTICATED, connections // 4))
    warn(
        "dsh-circuit-breaker: %d file descriptors allowed: at most %d connections, %d of "
        "them without the token",
        soft,
        connections,
        unauthenticated,
    )
    return connections, unauthenticated


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if isinstance(context.get("exception"), OSError):
        return  # a client that went away or failed its TLS handshake: nothing to tell
    warn("dsh-circuit-breaker serve: %s (%r)", context.get("message"), context.get("exception"))


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def _page_parts() -> tuple[str, str]:
    package = resources.files(__package__ or "dsh_circuit_breaker.guard")
    return (
        package.joinpath("page.html").read_text(encoding="utf-8"),
        package.joinpath("page.js").read_text(encoding="utf-8"),
    )
