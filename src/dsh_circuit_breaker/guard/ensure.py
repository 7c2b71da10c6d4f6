"""`serve --http ADDRESS --ensure`: make sure the guard answers there, starting it in the
background if nothing does, then exit; `--stop` stops the one that answers there.
`install ... --http` runs `--ensure` as a SessionStart command hook: one process per
session (not per tool call), before the first prompt.

Before the token goes anywhere, the client makes sure it talks to this user's guard:
the listening socket must be this user's (/proc/net/tcp names its owner), and what
answers must prove it holds the token without being sent it (`GET /proof?nonce=N`: an
HMAC of the nonce and its port under the token). It exits 0 once the service answers
`/healthz` with the token, printing nothing unless stdout is a terminal (then the live
page's address, with the token, to open). Otherwise it says why on stderr and exits 1:
a port held by another user (named) or another program, a service with another token,
or one that would not start (its log's last lines). The harness then refuses the
session's prompts and tool calls (the HTTP hooks' `onFailure: block`), so nothing runs
unguarded without a word. A squatter on the port still gets what Claude Code's HTTP
hooks send it: see docs/http-guard.md, "On a shared machine".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

from .. import listener
from .. import token as tokens
from ..address import page_url, url_of
from ..core.config import ConfigError
from ..core.config_file import ENV_TOKEN
from ..core.files import default_state_dir, open_private, private_directory
from ..core.invocation import serve_command
from ..usage import error

START_SECONDS = 10.0
LOG_NAME = "http-guard.log"


def health(origin: str, token: str, timeout: float = 2.0) -> dict[str, Any] | int | None:
    """`/healthz`'s JSON if our guard answers there; the HTTP status if it answers that
    with an error; None if nothing answers. listener.NotOurs (`listener.verify`) if what answers
    is not this user's guard: then the token goes nowhere."""
    if listener.verify(origin, token, timeout) is None:
        return None
    answer = listener.get(f"{origin}/healthz", {"Authorization": f"Bearer {token}"}, timeout)
    if answer is None:
        return None
    found = listener.json_object(answer[1]) if answer[0] == 200 else {}
    return found if found.get("ok") is True else answer[0]


def log_path() -> str:
    return os.path.join(default_state_dir(), LOG_NAME)


def ensure(args: argparse.Namespace) -> int:
    if args.allow_remote or args.tls_cert:
        return _say("--ensure starts a loopback service only; start a remote one yourself", code=2)
    try:
        token = tokens.resolve(args.token)
        origin = url_of(args.http)
    except (ConfigError, ValueError) as exc:
        return _say(str(exc), code=2)
    try:
        code = _ensure(args, origin, token)
    except listener.NotOurs as exc:
        return _say(str(exc))
    if code == 0 and sys.stdout.isatty():
        _show_page(origin, token)
    return code


def _show_page(origin: str, token: str) -> None:
    """The page's address, for a person who typed the command. Only on a terminal: run as
    Claude Code's SessionStart hook, stdout would go into the model's context (the token
    with it), so there it stays silent."""
    print(f"the guard answers on {origin}\n  the live page: {page_url(origin, token)}")


def _ensure(args: argparse.Namespace, origin: str, token: str) -> int:
    answer = health(origin, token)
    if isinstance(answer, dict):
        return 0
    if answer is not None:
        return _say(f"{origin} answered HTTP {answer} to the token")
    try:
        child = _start(args, token)
    except OSError as exc:
        return _say(f"cannot start the service: {exc}")
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if isinstance(health(origin, token, timeout=0.5), dict):
            return 0
        if child.poll() is not None:
            # Another session may have started it a moment earlier (then ours could not
            # bind the port): its answer is as good as ours.
            if isinstance(health(origin, token), dict):
                return 0
            return _say(f"the service exited with status {child.returncode}: {_log_tail()}")
        time.sleep(0.05)
    return _say(f"the service did not answer on {origin} within {START_SECONDS:.0f} s")


def stop(args: argparse.Namespace) -> int:
    """Ask our guard on the address to stop (`POST /api/shutdown`, once it has proved it
    is ours; no pid it reports is ever signalled); 0 once nothing answers there."""
    try:
        token = tokens.resolve(args.token, create=False)
        origin = url_of(args.http)
        answer = health(origin, token)
    except (ConfigError, ValueError) as exc:
        return _say(str(exc), "--stop", code=2)
    except listener.NotOurs as exc:
        return _say(str(exc), "--stop")
    if answer is None:
        print(f"no guard answers on {origin}")
        return 0
    if not isinstance(answer, dict):
        return _say(f"{origin} answered HTTP {answer}: not a guard with this token", "--stop")
    asked = listener.get(
        f"{origin}/api/shutdown", {"Authorization": f"Bearer {token}"}, 2.0, method="POST"
    )
    if asked is None or asked[0] != 200:
        return _say(f"{origin} did not take the request to stop: {asked}", "--stop")
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        # Stopped is when the process is gone, not when it stops answering: its store
        # is closed only then, and a new guard may bind the port. (Its pid is only waited
        # on, never signalled: the listener was checked to be this user's guard.)
        pid = answer.get("pid")
        gone = not (isinstance(pid, int) and _alive(pid))
        if listener.get(f"{origin}/proof?nonce=00", {}, 0.5) is None and gone:
            print(f"stopped the guard on {origin} (pid {pid})")
            return 0
        time.sleep(0.05)
    return _say(f"the guard (pid {answer.get('pid')}) still answers on {origin}", "--stop")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive, and not ours to wait for
        return True
    try:  # our own child that exited (a test's) is a zombie until reaped
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:  # gone since, or no /proc here: its silence is all we can go by
        return False


def _start(args: argparse.Namespace, token: str) -> subprocess.Popen[bytes]:
    command = serve_command(args.http, args.config, args.state)
    private_directory(default_state_dir())
    log = open_private(log_path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        # The token goes in the environment, never on a command line `ps` shows; a new
        # session, so the service outlives the harness that started it.
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd="/",
            env={**os.environ, ENV_TOKEN: token},
            start_new_session=True,
        )
    finally:
        os.close(log)


def _log_tail(lines: int = 5, window: int = 8192) -> str:
    try:
        fd = open_private(log_path(), os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            text = os.pread(fd, window, max(size - window, 0)).decode("utf-8", "replace")
        finally:
            os.close(fd)
    except OSError:
        return "(no log)"
    return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"


def _say(message: str, option: str = "--ensure", code: int = 1) -> int:
    """One line the way every command says a problem (`usage`): 2 for a bad option, 1
    for a guard that does not answer or start."""
    return error(f"serve {option}: {message}", code)
