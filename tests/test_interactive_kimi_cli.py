"""The real Kimi CLI's interactive shell (`kimi`, not `--print`), driven under tmux as a
person drives it (tests/support/tmux.py), with the hook the installed wheel's `install
kimi-cli` wrote into the user's ~/.kimi/config.toml, against a scripted model on 127.0.0.1
that asks for the same Shell call for ever (the offline setup of the headless e2e:
support/command_hook_harnesses.KimiCli).

Kimi asks before its first Shell command; the person chooses "Approve for this session"
(the default is "Approve once"), as one does when a command should run on.

What a person sees: `• Used Shell (echo cbprobe4 >> ...)` twelve times, the 6th to the 12th
each with Kimi's line `Hook blocked` under it, then the input box again. Our text is not
on the screen: Kimi shows only its `brief` for a hook's refusal. It is in what the model
gets, the call's `tool` message, so that is asserted: "<system>ERROR: Circuit breaker: NOT
run, a repeat ..." from the 6th call on. Kimi's own repeat guard adds its reminders to the
results of the 3rd, 5th and 8th identical calls (from the 6th after our refusal); none of
them shows on the screen either. Our stop (the 8th call, the third refusal in a row) cannot
end a Kimi run: it comes as the same refusal. What ends the turn is Kimi's own guard after
the 12th call: the 12th result is never sent, no further model request is made, and
nothing on the screen says why. A second typed prompt starts afresh: the same command runs
again. The screens are kept in .test-output/screens/.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from support import tmux
from support.command_hook_harnesses import in_scratch_home, user_texts
from support.fake_openai import FakeOpenAI, function_call
from support.harness_run import side_lines
from support.installed import Installed

FIRST = "Run the cbprobe4 probe until it works"
SECOND = "Now run it once more and say hello"
# What the hook's process needs from the environment `KimiCli.run_env` gives a headless run.
KEEP = (
    "HOME", "PATH", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "KIMI_SHARE_DIR", "OPENAI_BASE_URL",
    "OPENAI_API_KEY", "KIMI_DISABLE_TELEMETRY", "KIMI_CLI_NO_AUTO_UPDATE", "HTTPS_PROXY",
    "HTTP_PROXY", "NO_PROXY",
)  # fmt: skip

pytestmark = pytest.mark.timeout(600)


def typed(body: dict[str, Any]) -> list[str]:
    """The prompts a person typed, in a request's messages."""
    return [t.strip() for t in user_texts(body) if t.strip() in (FIRST, SECOND)]


def model_reply(side: Path) -> Any:
    def reply(body: dict[str, Any]) -> Any:
        call = function_call("Shell", {"command": f"echo cbprobe4 >> {side}"})
        prompts = typed(body)
        if not prompts or prompts[-1] == FIRST:
            return call  # for ever
        last = (body.get("messages") or [{}])[-1]
        return "Hello: it ran." if last.get("role") == "tool" else call

    return reply


def check_results(results: list[str], refusal: str) -> None:
    """What the model got for the 11 calls whose results Kimi sent it: 5 ran, then our
    refusal, with Kimi's reminders at the 3rd, 5th and 8th."""
    assert len(results) == 11, results
    assert not any("Circuit breaker" in r for r in results[:5]), results[:5]
    for result in results[5:]:
        assert result.startswith(f"<system>ERROR: {refusal}</system>"), result
    assert "You are repeating the exact same tool call" not in results[1]
    assert "You are repeating the exact same tool call" in results[2]
    assert "The previous repeated calls did not make progress" in results[4]
    assert "You are stuck in a dead end" in results[7]


def test_kimi_cli_interactive_refusals_then_its_own_stop(
    installed: Installed, harness_cache: Path
) -> None:
    require(tmux.available(), "tmux (Debian's tmux)")
    kimi = in_scratch_home("kimi-cli", installed, harness_cache)  # our hook installed
    side = kimi.work / "side.txt"
    with FakeOpenAI(after=model_reply(side)) as model, kimi.trapped():
        env = kimi.run_env(model)
        ui_env = tmux.plain_env(**{k: env[k] for k in KEEP})
        with tmux.Terminal("kimi-cli-loop", [str(kimi.cli)], ui_env, kimi.work) as ui:
            ui.wait_for(r"Welcome to Kimi Code CLI![\s\S]*── input ─", "started")
            time.sleep(2)
            ui.type(FIRST)
            ui.choose("[2] Approve for this session", "Down", "approve-shell")  # default: once
            screen = ui.wait_for(r"(Hook blocked[\s\S]*){7}── input ─", "its-own-stop", 300)
            assert screen.count("Used Shell (echo cbprobe4") == 12, screen
            assert "Circuit breaker" not in screen  # only Kimi's "Hook blocked"
            assert len(side_lines(side)) == 5
            asked = len(model.requests)
            time.sleep(5)
            assert asked == len(model.requests) == 12, "a model request after Kimi's stop"
            check_results([r.text for r in model.tool_results()], kimi.duplicate())
            assert ui.alive()
            ui.type(SECOND)
            ui.wait_for(r"Hello: it ran\.", "a-second-prompt-starts-afresh", 240)
            assert len(side_lines(side)) == 6  # the same call ran again: the typed prompt reset it
            assert "Circuit breaker" not in model.tool_results()[-1].text
    assert model.errors == []
