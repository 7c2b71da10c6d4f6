"""`install NAME --http [HOST:]PORT`: the harness posts its hook events to the resident
guard (`serve --http`) instead of starting our command hook for every tool call.

A harness module opts in with `HTTP_EVENTS` (the events posted; `_defaults` has none) and
`START_EVENT` (the event, once per session, that runs `serve --http ADDRESS --ensure`,
which starts the guard unless it answers). The entries are Claude Code's shape (2.1.332):

    {"env": {"DSH_CIRCUIT_BREAKER_TOKEN": "..."},
     "hooks": {"SessionStart": [{"hooks": [{"type": "command",
                   "command": ".../python -c '...' serve --http 127.0.0.1:8741 --ensure"}]}],
               "PreToolUse": [{"hooks": [{"type": "http",
                   "url": "http://127.0.0.1:8741/hook/claude-code",
                   "headers": {"Authorization": "Bearer ${DSH_CIRCUIT_BREAKER_TOKEN}"},
                   "allowedEnvVars": ["DSH_CIRCUIT_BREAKER_TOKEN"],
                   "timeout": 30, "onFailure": "block"}]}],
               "UserPromptSubmit": [... the same ...]}}

`onFailure: block` is what keeps a run from going unguarded without a word: if the guard
cannot be asked (down, another token, a 4xx/5xx answer), Claude Code refuses the prompt
or the tool call, naming the hook URL and the error, instead of treating the failure as
"no opinion". The token reaches the header through the settings' `env` (Claude Code
interpolates only the variables `allowedEnvVars` names).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import listener
from .. import token as tokens
from ..address import DEFAULT_PORT, page_url, parse_address, probe_url, url_of
from ..core.config import ConfigError
from ..core.config_file import ENV_TOKEN
from ..core.invocation import HOOK_TIMEOUT, ensure_command, options_of
from ..usage import error
from . import _doctor, _settings

if TYPE_CHECKING:  # `_contract` stands on Protocols the kernel declares for mypy only
    from ._contract import SomeCommandHook


def supports(harness: SomeCommandHook) -> bool:
    return bool(harness.HTTP_EVENTS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--http",
        nargs="?",
        const=f"127.0.0.1:{DEFAULT_PORT}",
        metavar="[HOST:]PORT",
        help="post hook events to the resident guard (`serve --http`; default address "
        f"127.0.0.1:{DEFAULT_PORT}) instead of a hook process per call",
    )


def http_handler(url: str) -> dict[str, Any]:
    return {
        "type": "http",
        "url": url,
        "headers": {"Authorization": f"Bearer ${{{ENV_TOKEN}}}"},
        "allowedEnvVars": [ENV_TOKEN],
        "timeout": HOOK_TIMEOUT,
        "onFailure": "block",
    }


def with_ours(
    harness: SomeCommandHook,
    settings: dict[str, Any],
    address: str,
    command: str,
    token: str,
    post: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A copy of `settings` with our HTTP hooks (on `HTTP_EVENTS`, and the post-tool
    events `post`), the start command and the token in its `env` (any earlier entry of
    ours, command or HTTP, replaced)."""
    result = _settings.without_ours(settings)
    hooks = dict(result.get("hooks") or {})
    url = f"{url_of(address)}/hook/{harness.NAME}"
    start = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT}
    for event, handler in [
        (harness.START_EVENT, start),
        *((e, http_handler(url)) for e in (*harness.HTTP_EVENTS, *post)),
    ]:
        hooks[event] = [*(hooks.get(event) or []), {"hooks": [handler]}]
    result["hooks"] = hooks
    env = result.get("env")
    result["env"] = {**(env if isinstance(env, dict) else {}), ENV_TOKEN: token}
    return result


def ours(settings: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """event -> our HTTP handlers in it."""
    found: dict[str, list[dict[str, Any]]] = {}
    for event, groups in (settings.get("hooks") or {}).items():
        for group in groups if isinstance(groups, list) else []:
            for handler in _settings.handlers(group):
                if _settings.is_our_http(handler):
                    found.setdefault(event, []).append(handler)
    return found


def install(
    harness: SomeCommandHook,
    args: argparse.Namespace,
    path: Path,
    settings: dict[str, Any],
    post: tuple[str, ...] = (),
) -> int:
    if not args.file and args.scope == "project":
        return error(
            "--http puts your token into the settings file; the project's is shared "
            "with the repository. Use --scope local (yours only) or --scope user."
        )
    try:
        parse_address(args.http)
        token = tokens.resolve(None)
    except (ValueError, ConfigError) as exc:
        return error(exc)
    command = ensure_command(args.http, args.config, args.state)
    wanted = with_ours(harness, settings, args.http, command, token, post)
    url = wanted["hooks"][harness.HTTP_EVENTS[0]][-1]["hooks"][0]["url"]
    summary = (
        f"  hook URL: {url} ({', '.join((*harness.HTTP_EVENTS, *post))})\n"
        f"  {harness.START_EVENT} starts the guard unless it answers: {command}\n"
        "  while the guard cannot be asked, every prompt and tool call is refused "
        "(onFailure: block)\n"
        f"  the live page: {page_url(url_of(args.http), token)}"
    )
    if wanted == settings:
        print(f"{harness.LABEL}: already installed in {path}\n{summary}")
        return 0
    saved = _settings.write_settings(path, wanted, backup=not args.no_backup)
    note = _settings.backup_note(saved, not args.no_backup)
    print(f"{harness.LABEL}: installed in {path}{note}\n{summary}")
    return 0


def doctor(
    harness: SomeCommandHook, report: _doctor.Report, path: Path, settings: dict[str, Any]
) -> bool:
    """Check our HTTP hooks in one settings file, if there are any (False: none): every
    event has one, the start command is there, and the guard answers the probe events."""
    found = ours(settings)
    if not found:
        return False
    missing = [e for e in harness.HTTP_EVENTS if e not in found]
    what = f"HTTP hook missing for {', '.join(missing)}" if missing else "HTTP hook installed"
    report.check(
        not missing,
        f"{harness.LABEL} ({path}): {what}",
        f"run `dsh-circuit-breaker install {harness.NAME} --http`",
    )
    starts = _settings.our_commands(settings, "serve").get(harness.START_EVENT)
    report.check(
        bool(starts),
        f"{harness.START_EVENT} starts the guard: {starts[0] if starts else 'missing'}",
        f"run `dsh-circuit-breaker install {harness.NAME} --http` (without it nothing "
        "starts the guard, and prompts are refused while it is down)",
    )
    env = settings.get("env")
    token = env.get(ENV_TOKEN) if isinstance(env, dict) else None
    if not isinstance(token, str) or not token:
        token = os.environ.get(ENV_TOKEN)
    if not token:
        report.problem(
            f"no token for the HTTP hook: {ENV_TOKEN} is neither in {path}'s env nor here",
            f"run `dsh-circuit-breaker install {harness.NAME} --http`",
        )
        return True
    for url in dict.fromkeys(h["url"] for handlers in found.values() for h in handlers):
        _probe(report, harness, url, token, starts[0] if starts else None)
    return True


def _probe(
    report: _doctor.Report, harness: SomeCommandHook, url: str, token: str, start: str | None
) -> None:
    parts = urllib.parse.urlsplit(url)
    fix = _start_hint(harness, parts.netloc, start)
    try:  # the token and the probe go only to our own guard
        listener.verify(f"{parts.scheme}://{parts.netloc}", token)
    except listener.NotOurs as exc:
        report.problem(str(exc), fix)
        return
    session = f"dsh-circuit-breaker-doctor-{uuid.uuid4().hex[:12]}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for event in harness.probe_events(session):
        name = event.get("hook_event_name") or "probe"
        request = urllib.request.Request(
            probe_url(url),
            data=json.dumps(event).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        started = time.monotonic()
        try:
            with opener.open(request, timeout=HOOK_TIMEOUT) as response:
                body = response.read(65536).decode("utf-8", "replace").strip()
        except urllib.error.HTTPError as exc:
            report.problem(f"the guard at {url} answered HTTP {exc.code} on {name}", fix)
            return
        except OSError as exc:
            reason = getattr(exc, "reason", exc)
            report.problem(
                f"the guard does not answer at {url} ({reason}): Claude Code refuses every "
                "prompt and tool call until it does",
                fix,
            )
            return
        if body and body != "{}":
            report.problem(f"the guard denied the doctor's probe: {body[:300]}")
            return
        elapsed = (time.monotonic() - started) * 1000
        report.ok(f"the guard answers at {url} ({name} in {elapsed:.1f} ms)")


def _start_hint(harness: SomeCommandHook, address: str, start: str | None) -> str:
    """How to start the guard the hooks ask: at their address, with the config and state
    the installed start command names."""
    config, state = options_of(start) if start else (None, None)
    given = (("--config", config), ("--state", state))
    options = "".join(f" {flag} {shlex.quote(value)}" for flag, value in given if value)
    return (
        f"start it: `dsh-circuit-breaker serve --http {address}{options}` (a new session's "
        f"{harness.START_EVENT} hook starts it too)"
    )
