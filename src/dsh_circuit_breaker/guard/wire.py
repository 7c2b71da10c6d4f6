"""HTTP/1.1 on the wire, bounded before anything else (as h11 reads it): a request head
is at most HEAD_BYTES (request line and headers) and MAX_HEADERS lines, parsed strictly,
and whatever could frame a second request inside the first (a duplicated
`Content-Length`, a body on a GET, `Transfer-Encoding`, folded or malformed header
lines) is refused rather than guessed at. Pure functions: the server (`http`) does the
I/O and the deadlines.
"""

from __future__ import annotations

from functools import lru_cache
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

HEAD_BYTES = 16 * 1024  # h11's default for an incomplete event
MAX_HEADERS = 100
MAX_LENGTH_DIGITS = 12
# Headers that decide where a request goes, who sent it or how long it is: a second
# copy could mean one thing to us and another to whatever sits in front of us.
SINGLE = frozenset(
    {"host", "authorization", "content-length", "transfer-encoding", "origin", "sec-fetch-site"}
)
# A header name or method is these bytes only; a request target, visible ASCII only.
# Checked by deleting them (`bytes.translate`): whatever is left is what is not allowed.
_TOKEN = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_VISIBLE = bytes(range(0x21, 0x7F))
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


class Request:
    """One parsed request head (the body, once read, in `body`)."""

    __slots__ = ("body", "headers", "http11", "keep_alive", "method", "path", "query")

    def __init__(self, method: str, target: str, version: str, headers: dict[str, str]) -> None:
        self.method = method
        if "?" in target or "#" in target or target.startswith("//"):
            parts = urlsplit(target)
            self.path = parts.path
            self.query = parse_qs(parts.query)
        else:  # a plain path, as a harness's hook posts: nothing to split
            self.path = target
            self.query = {}
        self.headers = headers
        connection = headers.get("connection", "").lower()
        self.http11 = version == "HTTP/1.1"
        self.keep_alive = self.http11 and "close" not in connection
        self.body = b""

    def length(self, limit: int) -> int:
        """The body's length from its `Content-Length` (0 if none); Refused for a body
        framed any other way, where none belongs, or larger than `limit`."""
        if "transfer-encoding" in self.headers:
            raise Refused(411, "length", "send the body with a Content-Length")
        text = self.headers.get("content-length", "0")
        if not (text.isascii() and text.isdigit()) or len(text) > MAX_LENGTH_DIGITS:
            raise Refused(400, "length", "Content-Length is not a number")
        length = int(text)
        if length and self.method != "POST":
            raise Refused(400, "length", f"a {self.method} request has no body")
        if length > limit:
            raise Refused(413, "too_large", f"a body here is at most {limit} bytes")
        return length


def parse_head(data: bytes) -> Request:
    """The request line and headers `data` holds (ending in the blank line); Refused if
    they are not well-formed HTTP/1.x or hold more than MAX_HEADERS lines."""
    lines = data[:-4].split(b"\r\n") if data.endswith(b"\r\n\r\n") else []
    if not lines or len(lines) - 1 > MAX_HEADERS:
        raise Refused(431, "too_large", f"a request has at most {MAX_HEADERS} header lines")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[0] or parts[0].translate(None, _TOKEN):
        raise Refused(400, "malformed", "malformed request line")
    method, target, version = (p.decode("latin-1") for p in parts)
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise Refused(505, "malformed", "HTTP/1.0 or HTTP/1.1 only")
    if not target.startswith("/") or parts[1].translate(None, _VISIBLE):
        raise Refused(400, "malformed", "malformed request target")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name.translate(None, _TOKEN):  # also a folded line
            raise Refused(400, "malformed", "malformed header line")
        key = name.decode("latin-1").lower()
        text = value.strip(b" \t").decode("latin-1")
        if key in headers:
            if key in SINGLE:
                raise Refused(400, "malformed", f"more than one {name.decode('latin-1')} header")
            text = f"{headers[key]}, {text}"
        headers[key] = text
    return Request(method, target, version, headers)


def response(
    status: int,
    data: bytes,
    content_type: str | None = None,
    *,
    close: bool = False,
    extra: tuple[tuple[str, str], ...] = (),
    streamed: bool = False,
    chunked: bool = False,
) -> bytes:
    """A whole response: status line, our security headers on every one, and the body; or,
    `streamed`, the head of one whose body follows, in chunks (`chunked`, HTTP/1.1: so a
    stream cut short is not taken for a whole one) or until the connection closes."""
    if not extra and not streamed:  # the same few heads, answer after answer: made once
        before, after = _head(status, content_type, close)
        return b"%s%d%s%s" % (before, len(data), after, data)
    return _response(status, data, content_type, close, extra, streamed, chunked)


@lru_cache(maxsize=64)
def _head(status: int, content_type: str | None, close: bool) -> tuple[bytes, bytes]:
    """A head without extra headers, in two parts: before the Content-Length value, and
    after it (the blank line included)."""
    head = _response(status, b"", content_type, close, (), False, False)
    before, _, after = head.partition(b"Content-Length: 0\r\n")
    return before + b"Content-Length: ", b"\r\n" + after


def _response(
    status: int,
    data: bytes,
    content_type: str | None,
    close: bool,
    extra: tuple[tuple[str, str], ...],
    streamed: bool,
    chunked: bool,
) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    lines = [f"HTTP/1.1 {status} {phrase}", "Server: dsh-circuit-breaker"]
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    if not streamed:
        lines.append(f"Content-Length: {len(data)}")
    elif chunked:
        lines.append("Transfer-Encoding: chunked")
    lines.extend(f"{name}: {value}" for name, value in (*SECURITY_HEADERS, *extra))
    if close or streamed:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data
