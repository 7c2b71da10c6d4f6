"""`dsh-circuit-breaker demo --http [HOST:]PORT`: the live page without a harness.

The HTTP guard starts in this process, exactly as `serve --http` builds it, over a state
and an incident log in a scratch directory (the person's own stay untouched) and the
default config. The probe's calls go to it over HTTP as Claude Code's HTTP hook posts
them (`PreToolUse` events, this directory as `cwd`), each answer is printed, then the
page's address, and the guard stays up for the person to look (`--serve-for`, else until
Ctrl-C). Everything is removed when it ends.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import threading
import time
import urllib.request
from typing import Any

from .address import page_url, parse_address
from .core.config import ConfigError
from .guard.http import GuardHTTPServer
from .guard.service import Guard
from .usage import error

HARNESS = "claude-code"


def run_http(address: str, calls: list[dict[str, str]], serve_for: int | None) -> int:
    try:
        host, port = parse_address(address)
    except ValueError as exc:
        return error(f"demo: {exc}")
    with tempfile.TemporaryDirectory(prefix="dsh-circuit-breaker-demo-") as scratch:
        config = os.path.join(scratch, "config.json")
        log = os.path.join(scratch, "incidents.jsonl")
        with open(config, "w", encoding="utf-8") as handle:
            json.dump({"incidentLog": log}, handle)
        try:
            guard = Guard(config, f"sqlite:///{os.path.join(scratch, 'state.db')}")
            server = GuardHTTPServer((host, port), guard, secrets.token_urlsafe(32))
        except (ConfigError, OSError) as exc:
            return error(f"demo --http {address}: {exc}")
        thread = threading.Thread(target=server.serve_forever, name="demo-guard", daemon=True)
        thread.start()
        try:
            print(f"The HTTP guard, on {server.origin} (state and incident log in {scratch})")
            _drive(server.origin, server.token.decode(), calls)
            print(f"\nThe live page: {page_url(server.origin, server.token.decode())}")
            print(f"  up {f'for {serve_for} s' if serve_for else 'until Ctrl-C'}", flush=True)
            _wait(serve_for)
        finally:
            server.shutdown()
            thread.join(10)
            server.server_close()
            guard.close()
    return 0


def _drive(origin: str, token: str, calls: list[dict[str, str]]) -> None:
    """Post the probe as Claude Code's HTTP hook does; print what each call got."""
    session = f"demo-{secrets.token_hex(4)}"
    for n, arguments in enumerate(calls, start=1):
        event = {
            "session_id": session,
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": arguments,
            "tool_use_id": f"toolu_demo_{n}",
            "cwd": os.getcwd(),
        }
        answer = _post(f"{origin}/hook/{HARNESS}", token, event)
        print(f"call {n:2}: Bash {arguments}  ->  {_verdict(answer)}")


def _post(url: str, token: str, event: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(event).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only
    with opener.open(request, timeout=30) as response:
        body = response.read(1 << 20).decode("utf-8")
    return json.loads(body) if body.strip() else {}


def _verdict(answer: dict[str, Any]) -> str:
    """What Claude Code makes of the answer: nothing is an allow."""
    output = answer.get("hookSpecificOutput") or {}
    if output.get("permissionDecision") != "deny":
        return "allowed"
    verdict = "DENIED"
    if answer.get("continue") is False:
        verdict += ", stop the agent"
    return verdict


def _wait(seconds: int | None) -> None:
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2 if deadline is None else min(0.2, deadline - time.monotonic()))
    except KeyboardInterrupt:
        print()
