"""The real Claude Code's interactive UI (not `-p`), driven under tmux as a person drives it
(tests/support/tmux.py): first-run screens answered, the hook the installed wheel's
`install claude-code` wrote in the user's settings, a scripted model on 127.0.0.1 that
asks for the same Bash command for ever.

What a person sees: 5 calls run; the 6th and 7th are refused, and at the 8th "PreToolUse:Bash
hook stopped Claude" and the whole stop text; once the turn ends Claude Code folds it into
"Ran 5 shell commands, did not run 3 other calls" and "3 actions not run · permission
denied". The session returns to its prompt (it does
not exit), no further model request is made, and a second typed prompt starts afresh.
The screens are kept in .test-output/screens/.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from support import tmux
from support.fake_anthropic import FakeAnthropic
from support.harness_run import side_lines
from support.installed import Installed
from support.plugin_harnesses import closed_port
from support.scripted_server import tool_call

CLAUDE = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "claude"
FIRST = "Run the cbprobe4 probe until it works"
SECOND = "Now run it once more and say hello"

pytestmark = pytest.mark.timeout(600)


def typed(body: dict[str, Any]) -> list[str]:
    """The prompts a person typed, in a request's messages."""
    found = []
    for message in body.get("messages") or []:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        found += [b.get("text") for b in blocks or [] if b.get("type") == "text"]
    return [t for t in found if isinstance(t, str) and t.strip() in (FIRST, SECOND)]


def model_reply(side: Path) -> Any:
    def reply(body: dict[str, Any]) -> Any:
        if not body.get("tools"):
            return "OK"  # Claude Code's own side requests (titles and the like)
        call = tool_call("Bash", {"command": f"echo cbprobe4 >> {side}", "description": "probe"})
        prompts = typed(body)
        if not prompts or prompts[-1].strip() == FIRST:
            return call  # for ever
        last = (body.get("messages") or [{}])[-1].get("content")
        answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        return "Hello: it ran." if answered else call

    return reply


def test_claude_code_interactive_refusals_then_the_stop(installed: Installed) -> None:
    require(CLAUDE.exists(), "the Claude Code CLI (tests/e2e: npm ci)")
    require(tmux.available(), "tmux (Debian's tmux)")
    home = installed.home
    work = home / "work"
    work.mkdir()
    done = installed.run("install", "claude-code")  # the user's ~/.claude/settings.json
    assert done.returncode == 0 and str(home / ".claude" / "settings.json") in done.stdout
    # Without it, a first run tries the network for onboarding and exits.
    (home / ".claude.json").write_text(
        json.dumps({"hasCompletedOnboarding": True, "theme": "dark"})
    )
    side = work / "side.txt"
    proxy = f"http://127.0.0.1:{closed_port()}"
    with FakeAnthropic(after=model_reply(side)) as model:
        ui_env = tmux.plain_env(
            HOME=str(home),
            PATH=installed.env["PATH"],
            XDG_STATE_HOME=installed.env["XDG_STATE_HOME"],
            XDG_CONFIG_HOME=installed.env["XDG_CONFIG_HOME"],
            ANTHROPIC_BASE_URL=model.url,
            ANTHROPIC_API_KEY="sk-ant-fake-key-for-tests",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_TELEMETRY="1",
            DISABLE_AUTOUPDATER="1",
            HTTPS_PROXY=proxy,
            HTTP_PROXY=proxy,
            NO_PROXY="127.0.0.1",
        )
        command = [str(CLAUDE), "--allowedTools", "Bash(echo:*)"]
        with tmux.Terminal("claude-code-loop", command, ui_env, work) as ui:
            ui.choose("Yes, I trust this folder", "Down", "folder-trust")  # default: No, exit
            ui.wait_for(r"Do you want to use this API key", "api-key-dialog")
            ui.choose("Yes", "Up", "api-key-dialog")  # its default is "No (recommended)"
            ui.wait_for(r"(?m)^\s*[>❯]", "ready")
            time.sleep(2)
            ui.type(FIRST)
            screen = ui.wait_for(r"hook stopped Claude", "the-breaker-stops", 300)
            flat = " ".join(screen.split())
            # Claude Code folds the turn into one line per kind once it ends.
            assert "Ran 5 shell commands, did not run 3 other calls" in flat
            assert "3 actions not run · permission denied" in flat
            assert "hook stopped Claude Circuit breaker: this agent is being stopped" in flat
            assert len(side_lines(side)) == 5
            asked = len(model.requests)
            time.sleep(5)
            assert len(model.requests) == asked, "a model request after the stop"
            assert ui.alive(), "the session exited instead of returning to its prompt"
            ui.keep("back-at-the-prompt")
            ui.type(SECOND)
            ui.wait_for(r"Hello: it ran\.", "a-second-prompt-starts-afresh", 240)
            assert len(side_lines(side)) == 6  # the same call ran again: the typed prompt reset it
    assert model.errors == []
