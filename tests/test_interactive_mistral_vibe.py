"""The real Mistral Vibe's interactive UI (`vibe` with no `-p`: its Rust TUI over the Python
app server), driven under tmux as a person drives it (tests/support/tmux.py), with the hooks
the installed wheel's `install mistral-vibe` wrote (tests/support/command_hook_harnesses.py's
MistralVibe: the same `generic` provider on the scripted model at 127.0.0.1, the same proxy
trap), started with `--auto-approve --trust` so its bash runs without asking, and a model
that calls the same command for ever.

What a person sees: "Ran 5 commands"; Ctrl+O (its tool output view) lists the 5 that ran,
then one "✗ [dsh-circuit-breaker-pre_tool] Denied tool 'bash'" line per refused copy. Vibe
does not show a denial's reason in its UI: our text ("Circuit breaker: NOT run, a repeat
...") is what the model gets as the call's result, and that is asserted on the model's
requests. Vibe cannot end a run from a hook (docs/mistral-vibe.md), so there is no stop: the
refusals go on until the person presses Escape ("Interrupted · What should Vibe do
instead?"), after which no model request is made. Vibe has no prompt event either, so a
second typed prompt does NOT start afresh: its call is refused too (the model's answer
quotes our text on screen) and the command does not run again. The screens are kept in
.test-output/screens/.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from support import tmux
from support.command_hook_harnesses import MistralVibe, in_scratch_home
from support.fake_openai import FakeOpenAI, function_call
from support.harness_run import side_lines
from support.installed import Installed

FIRST = "Run the cbprobe4 probe until it works"
SECOND = "Now run it once more and say hello"
REFUSED = "Circuit breaker: NOT run, a repeat"
DENIED_LINE = "✗ [dsh-circuit-breaker-pre_tool] Denied tool 'bash'"

pytestmark = pytest.mark.timeout(600)


def typed(body: dict[str, Any]) -> list[str]:
    """The prompts a person typed, in a request's messages."""
    found = [m.get("content") for m in body.get("messages") or [] if m.get("role") == "user"]
    return [t.strip() for t in found if isinstance(t, str) and t.strip() in (FIRST, SECOND)]


def model_reply(side: Path) -> Any:
    """The same call for ever after FIRST; after SECOND, one call, then an answer quoting
    what the call returned (a person sees it only that way: above)."""

    def reply(body: dict[str, Any]) -> Any:
        call = function_call("bash", {"command": f"echo cbprobe4 >> {side}"})
        prompts = typed(body)
        if not prompts or prompts[-1] == FIRST:
            return call
        last = (body.get("messages") or [{}])[-1]
        return f"It said: {last.get('content')}" if last.get("role") == "tool" else call

    return reply


def test_mistral_vibe_interactive_refusals_no_stop_no_reset(
    installed: Installed, harness_cache: Path
) -> None:
    require(tmux.available(), "tmux (Debian's tmux)")
    vibe = in_scratch_home("mistral-vibe", installed, harness_cache)
    assert isinstance(vibe, MistralVibe)
    side = vibe.work / "side.txt"
    with FakeOpenAI(after=model_reply(side)) as model, vibe.trapped():
        vibe.config.write_text(vibe.config.read_text().replace("http://127.0.0.1:9/v1", model.url))
        keep = ("HOME", "PATH", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "VIBE_HOME")
        ui_env = tmux.plain_env(
            **{k: vibe.env[k] for k in keep},
            FAKE_VIBE_API_KEY="sk-fake-key-for-tests",
            **vibe.trap.proxy_env(),
        )
        command = [str(vibe.cli), "--auto-approve", "--trust"]
        with tmux.Terminal("mistral-vibe-loop", command, ui_env, vibe.work) as ui:
            ui.wait_for(r"auto-approve", "started")
            time.sleep(2)
            ui.type(FIRST)
            ui.wait_for(r"Ran 5 commands", "five-ran", 300)
            assert model.wait_for_requests(10, timeout=120)  # the refusals go on: no stop
            ui.press("C-o")
            screen = ui.wait_for(re.escape(DENIED_LINE), "its-tool-output-view")
            assert screen.count("Ran echo cbprobe4 >>") == 5
            assert len(side_lines(side)) == 5
            ui.press("Escape")
            ui.wait_for(r"Interrupted · What should Vibe do instead\?", "escape-interrupts")
            asked = len(model.requests)
            time.sleep(5)
            assert len(model.requests) == asked, "a model request after Escape"
            results = [r.text for r in model.tool_results()]
            assert results[5] == vibe.duplicate()  # the 6th: copies 6, limit 6
            assert all(r.startswith(REFUSED) for r in results[5:]), results
            assert len(results) >= 8  # past the stop point: Vibe has no stop
            assert ui.alive()
            ui.type(SECOND)
            screen = ui.wait_for(r"It said: Circuit breaker", "a-second-prompt-refused-too", 240)
            assert REFUSED in " ".join(screen.split())
            assert len(side_lines(side)) == 5  # no prompt event: the count carried on
    assert model.errors == []
