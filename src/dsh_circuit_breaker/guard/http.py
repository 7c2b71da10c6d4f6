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

Any local process, and any web page the user's browser shows, can reach a loopback port,
so: a request without the token is refused (401); the `Host` header must name this
service (a DNS-rebinding page names its own host, 421); a POST from a browser must come
from the page itself (`Origin`, `Sec-Fetch-Site`; 403); a body is at most
MAX_HOOK_BODY bytes on /hook (as the command hook reads at most) and MAX_API_BODY
elsewhere (413, unread); and a client gets REQUEST_SECONDS to send a request, however
slowly it trickles in, past which its connection is closed, so a slow client holds only
its own thread, of at most MAX_CONNECTIONS.

A non-loopback address needs `--allow-remote` and TLS (`--tls-cert`, `--tls-key`): the
token would otherwise cross the network in clear text (see `cli`).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from .._log import warn
from .._version import __version__
from ..address import is_loopback
from ..harnesses import HARNESSES
from ..judge import MAX_EVENT_BYTES
from ..stores import StoreUnavailable
from .metrics import CONTENT_TYPE
from .service import Guard

MAX_HOOK_BODY = MAX_EVENT_BYTES
MAX_API_BODY = 64 * 1024
REQUEST_SECONDS = 10.0  # to send a whole request (headers and body), from its first wait
SOCKET_SECONDS = 5.0  # any one read or write; an idle keep-alive connection closes then
MAX_CONNECTIONS = 256
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-store"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
)


class Refused(Exception):
    """A request the service will not serve: HTTP `status`, a `reason` for /metrics."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class GuardHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most MAX_CONNECTIONS at once; a watchdog closes the
    connection of a client that takes longer than REQUEST_SECONDS to send a request."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        guard: Guard,
        token: str,
        *,
        tls: ssl.SSLContext | None = None,
        check_host: bool = True,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._stopped = threading.Event()  # before binding: a failed bind calls server_close
        super().__init__(address, Handler)
        self.guard = guard
        self.metrics = guard.metrics
        self.token = token.encode()
        self.tls = tls
        self.check_host = check_host
        self.allowed_hosts = self._hosts()
        self.page = _page_parts()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._deadlines: dict[socket.socket, float] = {}
        self._watch_lock = threading.Lock()
        threading.Thread(target=self._watchdog, name="deadlines", daemon=True).start()

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

    # -- connections ---------------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.metrics.count("refused", "busy")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def watch(self, connection: socket.socket, seconds: float | None) -> None:
        """Close `connection` unless it is unwatched within `seconds` (None: unwatch)."""
        with self._watch_lock:
            if seconds is None:
                self._deadlines.pop(connection, None)
            else:
                self._deadlines[connection] = time.monotonic() + seconds

    def _watchdog(self) -> None:
        while not self._stopped.wait(0.25):
            now = time.monotonic()
            with self._watch_lock:
                late = [c for c, deadline in self._deadlines.items() if deadline < now]
                for connection in late:
                    del self._deadlines[connection]
            for connection in late:
                self.metrics.count("refused", "slow")
                # Wakes the thread blocked reading it; that thread closes it.
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    def server_close(self) -> None:
        self._stopped.set()
        super().server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client went away, timed out or was cut off: nothing to tell
        warn("dsh-circuit-breaker serve: error on a connection", exc_info=True)

    def same_origin(self, origin: str) -> bool:
        """`origin` (a browser's Origin header) is this service, by any name it answers to."""
        parts = urlsplit(origin.lower())
        if parts.scheme != ("https" if self.tls else "http"):
            return False
        if self.check_host:
            return parts.netloc in self.allowed_hosts
        return origin.lower() == self.origin.lower()


class Handler(BaseHTTPRequestHandler):
    server: GuardHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "dsh-circuit-breaker"
    sys_version = ""
    timeout = SOCKET_SECONDS

    def setup(self) -> None:
        if self.server.tls is not None:  # the handshake is the client's time too
            self.request.settimeout(SOCKET_SECONDS)
            self.request = self.server.tls.wrap_socket(
                self.request, server_side=True, do_handshake_on_connect=False
            )
            self.server.watch(self.request, REQUEST_SECONDS)
            try:
                self.request.do_handshake()
            except OSError:
                self.server.metrics.count("refused", "tls")
                raise
        super().setup()

    def finish(self) -> None:
        self.server.watch(self.request, None)
        with contextlib.suppress(OSError):  # the client is gone: nothing to flush to
            super().finish()

    def handle_one_request(self) -> None:
        self.server.watch(self.request, REQUEST_SECONDS)
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per tool call would drown the warnings that matter

    # -- methods -------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        try:
            path, query = self._authorized(method)
            body = self._body(path) if method == "POST" else b""
        except Refused as exc:
            # Closed after the answer: a body left unread must not be taken for a request.
            self.server.metrics.count("refused", exc.reason)
            if exc.status == 401 and method == "GET" and urlsplit(self.path).path == "/":
                self._no_token_page()  # a person at the page's address, not a client
                return
            self._send_json(exc.status, {"error": str(exc)}, close=True)
            return
        self.server.watch(self.request, None)  # read in full: no longer the client's time
        try:
            self._route(method, path, query, body)
        except OSError:
            raise  # the client went away: nothing to answer
        except Exception as exc:  # our own bug: say so, and stay up
            warn("dsh-circuit-breaker serve: %s %s failed", method, path, exc_info=True)
            self._send_json(500, {"error": f"{type(exc).__name__}: {exc}"}, close=True)

    def _no_token_page(self) -> None:
        from .. import token as tokens
        from ..config_file import ENV_TOKEN
        from .unauthorized import page

        self._send(
            401,
            page(tokens.token_path(), ENV_TOKEN),
            "text/html; charset=utf-8",
            close=True,
            policy="default-src 'none'; style-src 'unsafe-inline'",
        )

    def _authorized(self, method: str) -> tuple[str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        host = (self.headers.get("Host") or "").lower()
        if self.server.check_host and host not in self.server.allowed_hosts:
            raise Refused(421, "host", f"this service does not answer for host {host!r}")
        given = _bearer(self.headers.get("Authorization"))
        if given is None and method == "GET" and parts.path == "/":
            given = _first(query, "token")
        if given is None or not hmac.compare_digest(given.encode(), self.server.token):
            raise Refused(401, "token", "a valid token is required (Authorization: Bearer)")
        if method == "POST":
            origin = self.headers.get("Origin")
            if origin is not None and not self.server.same_origin(origin):
                raise Refused(403, "origin", f"cross-site request from {origin!r} refused")
            site = self.headers.get("Sec-Fetch-Site")
            if site is not None and site not in ("same-origin", "none"):
                raise Refused(403, "origin", f"cross-site request ({site}) refused")
        return parts.path, query

    def _body(self, path: str) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise Refused(411, "length", "send the body with a Content-Length")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise Refused(400, "length", "Content-Length is not a number") from None
        limit = MAX_HOOK_BODY if path.startswith("/hook/") else MAX_API_BODY
        if not 0 <= length <= limit:
            raise Refused(413, "too_large", f"a body here is at most {limit} bytes")
        data = self.rfile.read(length)
        if len(data) != length:
            raise Refused(400, "length", "the body ended before its Content-Length")
        return data

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> None:
        guard = self.server.guard
        if method == "POST" and path.startswith("/hook/"):
            self._hook(path[len("/hook/") :], body)
        elif method == "GET" and path == "/":
            self._page()
        elif method == "GET" and path == "/healthz":
            self._send_json(200, {"ok": True, "version": __version__, "pid": os.getpid()})
        elif method == "GET" and path == "/metrics":
            text = self.server.metrics.render(self._agents_tracked)
            self._send(200, text.encode(), CONTENT_TYPE)
        elif method == "GET" and path == "/api/agents":
            self._store_json(guard.agents)
        elif method == "GET" and path == "/api/incidents":
            after = _first(query, "after")
            offset = int(after) if after is not None and after.isdigit() else None
            self._send_json(200, guard.incidents(offset))
        elif path.startswith("/api/agents/"):
            self._agent(method, path[len("/api/agents/") :])
        else:
            self._send_json(404, {"error": f"no {method} {path}"})

    def _hook(self, name: str, body: bytes) -> None:
        if name not in HARNESSES:
            self._send_json(404, {"error": f"unknown harness {name!r}; known: {list(HARNESSES)}"})
            return
        answer = self.server.guard.hook(name, body)
        if answer.warning:
            warn("dsh-circuit-breaker serve: %s", answer.warning)
        self._send(200, answer.body, "application/json" if answer.body else None)

    def _agent(self, method: str, rest: str) -> None:
        guard = self.server.guard
        if method == "POST" and rest.endswith("/reset"):
            agent = unquote(rest[: -len("/reset")])
            self._store_json(lambda: guard.reset(agent), f"no agent {agent!r} in the store")
        elif method == "GET" and "/" not in rest:
            agent = unquote(rest)
            self._store_json(lambda: guard.agent(agent))
        else:
            self._send_json(404, {"error": f"no {method} /api/agents/{rest}"})

    def _store_json(self, read: Any, missing: str = "") -> None:
        try:
            found = read()
        except StoreUnavailable as exc:
            self._send_json(503, {"error": f"state store unavailable: {exc}"})
            return
        if found is None:
            self._send_json(404, {"error": missing})
        else:
            self._send_json(200, found)

    def _agents_tracked(self) -> int | None:
        try:
            return sum(1 for _ in self.server.guard.store.agents())
        except StoreUnavailable:
            return None

    def _page(self) -> None:
        nonce = secrets.token_urlsafe(16)
        head, script = self.server.page
        html = head.replace("{{nonce}}", nonce).replace("{{script}}", script)
        policy = (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'"
        )
        self._send(200, html.encode(), "text/html; charset=utf-8", policy=policy)

    # -- responses -----------------------------------------------------------------------
    def _send_json(self, status: int, payload: Any, *, close: bool = False) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode()
        self._send(status, data, "application/json", close=close)

    def _send(
        self,
        status: int,
        data: bytes,
        content_type: str | None,
        *,
        close: bool = False,
        policy: str | None = None,
    ) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        if policy:
            self.send_header("Content-Security-Policy", policy)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="dsh-circuit-breaker"')
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)


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
