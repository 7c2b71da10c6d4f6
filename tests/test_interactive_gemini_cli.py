"""The real Gemini CLI's interactive UI (not `-p`), driven under tmux as a person drives it
(tests/support/tmux.py), with the hook the installed wheel's `install gemini-cli` wrote,
against a scripted model on 127.0.0.1 that calls the same shell command for ever.

What a person sees: Gemini CLI's own loop detection stops the turn at the 5th identical
call with its dialog; choosing "Disable loop detection for this session" retries the
request, and the breaker, which has counted the 4 that ran, lets 1 more run, refuses the
next ones and stops the agent at the 8th (the third refusal in a row): 5 in all (a967c7a
reset the count at the retry: 10). The session returns to its prompt; no further model
request is made; a second typed prompt starts afresh. The screens are kept in
.test-output/screens/.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from support import tmux
from support.fake_gemini import FakeGemini, tool_call
from support.harness_run import side_lines
from support.installed import Installed
from support.plugin_harnesses import closed_port

GEMINI = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "gemini"
FIRST = "Run the cbprobe4 probe until it works"
SECOND = "Now run it once more and say hello"
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}
STOPPED = "Agent execution stopped by hook: Circuit breaker: this agent is being stopped"

pytestmark = pytest.mark.timeout(600)


def typed(body: dict[str, Any]) -> list[str]:
    """The prompts a person typed, in a request's contents."""
    texts = [
        part.get("text")
        for content in body.get("contents") or []
        if content.get("role") == "user"
        for part in content.get("parts") or []
    ]
    return [t for t in texts if t in (FIRST, SECOND)]


def model_reply(side: Path) -> Any:
    def reply(body: dict[str, Any]) -> Any:
        call = tool_call(
            "run_shell_command", {"command": f"echo cbprobe4 >> {side}", "description": "probe"}
        )
        prompts = typed(body)
        if not prompts or prompts[-1] == FIRST:
            return call  # for ever
        last = (body.get("contents") or [{}])[-1]
        answered = any("functionResponse" in part for part in last.get("parts") or [])
        return "Hello: it ran." if answered else call

    return reply


def test_gemini_cli_interactive_loop_dialog_then_the_breaker(installed: Installed) -> None:
    require(GEMINI.exists(), "the Gemini CLI (tests/e2e: npm ci)")
    require(tmux.available(), "tmux (Debian's tmux)")
    home = installed.home
    work = home / "work"
    work.mkdir()
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(SETTINGS))
    env = {**installed.env, "XDG_STATE_HOME": str(home / ".local" / "state")}
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    done = installed.run("install", "gemini-cli", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    side = work / "side.txt"
    proxy = f"http://127.0.0.1:{closed_port()}"  # anything leaving loopback fails at once
    with FakeGemini(after=model_reply(side)) as model:
        ui_env = tmux.plain_env(
            HOME=str(home),
            PATH=env["PATH"],
            XDG_STATE_HOME=env["XDG_STATE_HOME"],
            XDG_CONFIG_HOME=env["XDG_CONFIG_HOME"],
            GEMINI_API_KEY="fake-gemini-key-for-tests",
            GOOGLE_GEMINI_BASE_URL=model.url,
            GEMINI_CLI_TRUST_WORKSPACE="true",
            HTTPS_PROXY=proxy,
            HTTP_PROXY=proxy,
            NO_PROXY="127.0.0.1",
        )
        command = [str(GEMINI), "--yolo", "-m", "gemini-2.5-flash"]
        with tmux.Terminal("gemini-cli-loop", command, ui_env, work) as ui:
            ui.wait_for(r"Type your message", "started")
            ui.type(FIRST)
            ui.wait_for(r"A potential loop was detected", "its-loop-dialog", 240)
            assert len(side_lines(side)) == 4  # Gemini CLI's own guard stopped the 5th
            ui.choose("Disable loop detection for this session", "Down", "disable-its-guard")
            screen = ui.wait_for(r"Agent execution stopped by hook", "the-breaker-stops", 240)
            assert STOPPED in " ".join(screen.split())
            # 4 before the dialog, 1 after: the retry kept the count
            assert len(side_lines(side)) == 5
            asked = len(model.requests)
            time.sleep(5)
            assert len(model.requests) == asked, "a model request after the stop"
            ui.wait_for(r"Type your message", "back-at-the-prompt")
            assert ui.alive()
            ui.type(SECOND)
            ui.wait_for(r"Hello: it ran\.", "a-second-prompt-starts-afresh", 240)
            assert len(side_lines(side)) == 6  # the same call ran again: the typed prompt reset it
    assert model.errors == []
