"""The real pi's interactive UI (not `-p`), driven under tmux as a person drives it
(tests/support/tmux.py), with the extension the installed wheel's `install pi` wrote,
against a scripted model on 127.0.0.1 that asks for the same bash command for ever.

What a person sees: 5 calls run, the 6th and 7th are refused with our text as the tool's
error, and at the 8th the extension blocks the call and aborts the agent: the stop text
shows and pi is back at its editor, with no further model request. A second typed prompt
starts afresh. The screens are kept in .test-output/screens/.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from support import tmux
from support.fake_openai import FakeOpenAI, function_call
from support.harness_run import side_lines
from support.installed import Installed
from support.plugin_harnesses import MODEL, PROVIDER, Pi

FIRST = "Run the cbprobe4 probe until it works"
SECOND = "Now run it once more and say hello"

pytestmark = pytest.mark.timeout(600)


def model_reply(side: Path) -> Any:
    def reply(body: dict[str, Any]) -> Any:
        messages = body.get("messages") or []
        prompts = [
            m.get("content")
            for m in messages
            if m.get("role") == "user" and _text(m.get("content")) in (FIRST, SECOND)
        ]
        call = function_call("bash", {"command": f"echo cbprobe4 >> {side}"})
        if not prompts or _text(prompts[-1]) == FIRST:
            return call  # for ever
        return "Hello: it ran." if messages and messages[-1].get("role") == "tool" else call

    return reply


def _text(content: Any) -> str:
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content.strip() if isinstance(content, str) else ""


def test_pi_interactive_refusals_then_the_stop(installed: Installed) -> None:
    require(tmux.available(), "tmux (Debian's tmux)")
    pi = Pi(installed)
    require(pi.available(), "pi (tests/e2e: npm ci)")
    pi.install()
    side = pi.work / "side.txt"
    with FakeOpenAI(after=model_reply(side)) as model:
        pi.configure(model)
        keep = ("HOME", "PATH", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "PI_OFFLINE")
        keep += ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
        ui_env = tmux.plain_env(**{k: pi.env[k] for k in keep if k in pi.env})
        command = [str(pi.cli), "--provider", PROVIDER, "--model", MODEL]
        with tmux.Terminal("pi-loop", command, ui_env, pi.work) as ui:
            ui.wait_for(MODEL, "started")
            time.sleep(2)
            ui.type(FIRST)
            screen = ui.wait_for(r"this agent is being stopped", "the-breaker-stops", 300)
            flat = " ".join(screen.split())
            assert "Circuit breaker: NOT run, a repeat" in flat
            assert len(side_lines(side)) == 5
            asked = len(model.requests)
            time.sleep(5)
            assert len(model.requests) == asked, "a model request after the stop"
            assert ui.alive()
            ui.keep("back-at-the-editor")
            ui.type(SECOND)
            ui.wait_for(r"Hello: it ran\.", "a-second-prompt-starts-afresh", 240)
            # The same call ran again: a new prompt, a new agent run
            assert len(side_lines(side)) == 6
    assert model.errors == []
