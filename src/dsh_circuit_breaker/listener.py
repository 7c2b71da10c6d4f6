"""Who listens on a guard's address, before anything that matters is sent there: the
socket's owner (Linux: /proc/net/tcp names it) must be this user, and what answers must
prove it holds the token without being sent it (`GET /proof?nonce=N`, answered with
`token.proof`). A squatter on the port (another user's program, or one of ours that is
not the guard) is told nothing: not the token, not a tool call's arguments.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import pwd
import secrets
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from . import token as tokens
from .core.config_file import ENV_TOKEN


class NotOurs(Exception):
    """Something answers on the guard's address that is not this user's guard: it was
    not sent the token, and nothing else."""


def _check_owner(origin: str) -> None:
    """NotOurs if another user's socket listens where `origin` connects (Linux:
    /proc/net/tcp names each socket's owner; elsewhere the proof alone decides)."""
    parts = urllib.parse.urlsplit(origin)
    host, port = parts.hostname or "127.0.0.1", _port(origin)
    for uid in listeners(host, port):
        if uid != os.geteuid():
            raise NotOurs(
                f"port {port} on {host} is held by {_user(uid)}, not by you: the guard's "
                "token and every tool call's arguments would go to them; it was not sent "
                "the token. Use a port no one else holds, or the command hook (see "
                "docs/http-guard.md, 'On a shared machine')"
            )


def listeners(host: str, port: int) -> list[int]:
    """The owners (uids) of the sockets listening on `port` that a connection to `host`
    reaches: bound to it or to every address. Empty where /proc/net is not readable."""
    target = ipaddress.ip_address(socket.gethostbyname(host))
    owners = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as file:
                rows = file.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 8 or fields[3] != "0A":  # 0A: LISTEN
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port and _reaches(address, target):
                owners.append(int(fields[7]))
    return owners


def _reaches(address: str, target: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether a socket bound to `address` (/proc/net's hex: 32-bit words in host byte
    order) takes connections to `target`."""
    raw = bytes.fromhex(address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    bound = ipaddress.ip_address(words)
    if isinstance(bound, ipaddress.IPv6Address) and bound.ipv4_mapped is not None:
        bound = bound.ipv4_mapped
    return bound.is_unspecified or bound == target


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _port(origin: str) -> int:
    return urllib.parse.urlsplit(origin).port or 80


def get(
    url: str, headers: dict[str, str], timeout: float, method: str = "GET"
) -> tuple[int, bytes] | None:
    """(status, body) of one request, None if nothing answers; never through a proxy."""
    request = urllib.request.Request(url, headers=headers, method=method)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, response.read(65536)
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (OSError, ValueError):
        return None


def json_object(body: bytes) -> dict[str, Any]:
    try:
        found = json.loads(body)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def verify(origin: str, token: str, timeout: float = 2.0) -> bool | None:
    """True if this user's guard holding `token` answers at `origin`, None if nothing
    answers there; NotOurs (saying who or what) otherwise. Sends no token."""
    _check_owner(origin)
    nonce = secrets.token_hex(16)
    answer = get(f"{origin}/proof?nonce={nonce}", {}, timeout)
    if answer is None:
        return None
    expected = tokens.proof(token, _port(origin), nonce)
    found = json_object(answer[1]).get("proof") if answer[0] == 200 else None
    if not isinstance(found, str) or not hmac.compare_digest(found, expected):
        raise NotOurs(
            f"{origin} answers (HTTP {answer[0]}) but cannot prove it holds this token: "
            "another program holds that port, or a guard started with another token (its "
            f"`--token`, ${ENV_TOKEN}, or {tokens.token_path()}); it was not sent the token"
        )
    return True
