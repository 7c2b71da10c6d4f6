"""The real OpenClaw's terminal UI (`openclaw tui`), driven under tmux as a person drives it
(tests/support/tmux.py), with the plugin the installed wheel's `install openclaw` wrote
(tests/test_openclaw_e2e.py's OpenClaw: the same scratch HOME, the same Chat Completions
provider on the scripted model at 127.0.0.1, HTTP(S)_PROXY at a closed port on 127.0.0.1),
and a model that calls the same `exec` command for ever.

The TUI runs through a Gateway (`openclaw gateway run`, bound to 127.0.0.1 with a token, its
port and token in openclaw.json, which `openclaw tui` reads): the plugin runs in the
Gateway. Its local embedded mode (`openclaw chat`, `openclaw tui --local`) cannot be guarded
in 2026.9.6: it registers plugins in "discovery" mode only and fires no plugin hook at all
(no before_tool_call, no before_prompt_build; seen with a probe plugin logging both, while the
same plugin in `agent --local` and in the Gateway saw every call), so an exec loop there runs
unrefused (docs/openclaw.md, Known limits).

What a person sees, once `/verbose full` is typed (tool cards are off by default): a card
"Exec Probe (completed)" with "(no output)" for each of the 5 that ran, "Exec Probe
(blocked)" with our text ("Circuit breaker: NOT run, a repeat (copies: 6, limit: 6): ...")
for the 6th and 7th, and for the 8th "Exec Probe (blocked)", "Aborted", "run aborted", the
status line "connected | aborted". Our stop text is not in the TUI: it is in the Gateway's
log ("[plugins] Circuit breaker: this agent is being stopped ..."), asserted there. No
further model request is made; a second typed prompt starts afresh (the command runs
again). The screens are kept in .test-output/screens/.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from support import tmux
from support.fake_openai import FakeOpenAI, function_call
from support.harness_run import side_lines
from support.installed import Installed
from support.plugin_harnesses import closed_port
from test_openclaw_e2e import BIN, OpenClaw

FIRST = "Run the cbprobe4 probe until it works"
SECOND = "Now run it once more and say hello"
TOKEN = "gateway-token-for-tests-only"
DENIED = render(DEFAULT_MESSAGES["duplicate"], "exec", "duplicate", 6, 6)
STOPPED = render(DEFAULT_MESSAGES["stop"], "exec", "duplicate", 3, 3)

pytestmark = pytest.mark.timeout(600)


def typed(body: dict[str, Any]) -> list[str]:
    """The prompts a person typed, in a request's messages (OpenClaw prefixes a time)."""
    found = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if message.get("role") == "user" and isinstance(content, str):
            found += [p for p in (FIRST, SECOND) if p in content]
    return found


def model_reply(side: Path) -> Any:
    def reply(body: dict[str, Any]) -> Any:
        call = function_call("exec", {"command": f"echo cbprobe4 >> {side}", "title": "Probe"})
        messages = body.get("messages") or []
        prompts = typed(body)
        if not prompts or prompts[-1] == FIRST:
            return call  # for ever
        # OpenClaw adds a context message after the typed one: a result since SECOND?
        since = [i for i, m in enumerate(messages) if SECOND in json.dumps(m)][-1]
        answered = any(m.get("role") == "tool" for m in messages[since:])
        return "Hello: it ran." if answered else call

    return reply


@contextmanager
def gateway(openclaw: OpenClaw, log: Path) -> Iterator[int]:
    """`openclaw gateway run` on a free loopback port, ended with its process group."""
    port = closed_port()
    data = json.loads(openclaw.config.read_text())
    data["gateway"] = {
        "mode": "local",
        "port": port,
        "bind": "loopback",
        "auth": {"mode": "token", "token": TOKEN},
    }
    openclaw.config.write_text(json.dumps(data, indent=2))
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(BIN / "openclaw"), "gateway", "run", "--port", str(port)],
            cwd=openclaw.home,
            env=openclaw.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        while "[gateway] ready" not in plain(log.read_text(errors="replace")):
            assert process.poll() is None, f"the gateway exited:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no gateway:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        yield port
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def plain(text: str) -> str:
    """Text without its ANSI colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_openclaw_tui_refusals_then_the_stop(installed: Installed, tmp_path: Path) -> None:
    require(tmux.available(), "tmux (Debian's tmux)")
    openclaw = OpenClaw(installed)
    done = openclaw.cli("install", "openclaw")
    assert done.returncode == 0, done.stderr
    work = openclaw.home / "work"
    work.mkdir()
    side = work / "side.txt"
    with FakeOpenAI(after=model_reply(side)) as model:
        openclaw.point_at(model)
        log = tmp_path / "gateway.log"
        with gateway(openclaw, log):
            keep = ("HOME", "PATH", "XDG_STATE_HOME", "XDG_CONFIG_HOME")
            keep += ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
            keep += ("NO_PROXY", "no_proxy")
            ui_env = tmux.plain_env(**{k: openclaw.env[k] for k in keep})
            command = [str(BIN / "openclaw"), "tui"]
            with tmux.Terminal("openclaw-loop", command, ui_env, work) as ui:
                ui.wait_for(r"connected \| idle", "started", 180)
                # Tool cards show only with verbose on (off by default).
                ui.type("/verbose full")
                ui.wait_for(r"\| verbose full \|", "verbose-on")
                ui.type(FIRST)
                screen = ui.wait_for(r"run aborted", "the-breaker-stops", 300)
                flat = " ".join(screen.split())
                assert f"Exec Probe (blocked) Probe {DENIED}" in flat
                assert "Exec Probe (blocked) Probe Aborted run aborted" in flat
                assert len(side_lines(side)) == 5
                results = [r.text for r in model.tool_results()]
                assert results == ["(no output)"] * 5 + [DENIED] * 2
                asked = len(model.requests)
                time.sleep(5)
                assert len(model.requests) == asked, "a model request after the stop"
                assert STOPPED in plain(log.read_text())  # the Gateway's log, not the TUI
                assert ui.alive()
                ui.keep("back-at-the-composer")
                ui.type(SECOND)
                ui.wait_for(r"Hello: it ran\.", "a-second-prompt-starts-afresh", 240)
                # The same call ran again: the typed prompt reset it
                assert len(side_lines(side)) == 6
    assert model.errors == []
