"""Addresses of the HTTP guard (`serve --http [HOST:]PORT`): parsed, judged loopback or
not, and turned into the URLs a client on this machine uses. A leaf module: the guard
serves on them, and `install --http` writes them into a harness's settings."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import quote

DEFAULT_PORT = 8741


def parse_address(text: str) -> tuple[str, int]:
    """`[HOST:]PORT` (an IPv6 host in brackets) -> (host, port); ValueError if not."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--http {text!r}: the port must be a number from 0 to 65535")
    return host or "127.0.0.1", int(port)


def is_loopback(host: str) -> bool:
    """Every address `host` stands for is a loopback address."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(f[4][0]).is_loopback for f in found)


def url_of(address: str) -> str:
    """The base URL a client on this machine uses for `serve --http ADDRESS`."""
    host, port = parse_address(address)
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def page_url(origin: str, token: str) -> str:
    return f"{origin}/?token={quote(token)}"


# Marks doctor's probe events on a hook URL, so the guard judges them without counting
# them as any agent's calls (metrics, the page).
PROBE = "probe"


def probe_url(hook_url: str) -> str:
    return f"{hook_url}{'&' if '?' in hook_url else '?'}{PROBE}=doctor"
