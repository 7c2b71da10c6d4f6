"""The real Hermes Agent's interactive CLI (`hermes chat` without `-q`: its classic
prompt_toolkit shell, the default on a terminal), driven under tmux as a person drives it
(tests/support/tmux.py), with the hooks the installed wheel's `install hermes` wrote into
the user's $HERMES_HOME/config.yaml, against a scripted model on 127.0.0.1 that asks for
the same `terminal` command for ever (the offline setup of the headless e2e:
support/command_hook_harnesses.Hermes).

No first-start dialog: the user's config accepts hooks (`hooks_auto_accept: true`, else
Hermes asks once on a terminal), and Hermes runs `echo` without asking (it asks only for
commands it deems dangerous). Offline beyond the headless setup: the shell fetches the
model catalog for its `/model` picker at start (`model_catalog.enabled: false` in the
user's config turns that off), and warms that picker's cache from models.dev in a
background thread, which no setting turns off: that one request is let through the trap,
where it fails at once.

What a person sees: `┊ 💻 $         echo cbprobe4  0.1s` for each of the 5 calls that
ran, and for every refused call only `┊ 💻 preparing terminal…`, with no result line. Our
text is not on the screen; it is in what the model gets, the call's `tool` message
(`{"error": "Circuit breaker: NOT run, a repeat ..."}`), so that is asserted. Our stop
cannot end a Hermes run (its `pre_tool_call` takes a block or nothing): every further copy
is refused the same way until Hermes's own iteration budget (90) ends the turn with
"Reached maximum iterations (90). Requesting summary..." and one more model request,
without tools, for a summary; the model's answer shows and Hermes is back at its prompt,
with no further request of the agent's (Hermes asks the model for the session's title in
the background, which the fake answers apart). A second typed prompt starts afresh: the
same command runs again. The screens are kept in .test-output/screens/.
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
SUMMARY = "You've reached the maximum number of tool-calling iterations allowed."  # Hermes's
SUMMARISED = "The probe was refused every time after five runs."
# Hermes names a session by asking the model, in the background, once the first turn ends.
TITLE_PROMPT = "Generate a short, descriptive title"
BUDGET = 90  # Hermes's default iteration budget for a turn (agent.max_turns)
# What the hook's process needs from the environment `Hermes.run_env` gives a headless run.
KEEP = (
    "HOME", "PATH", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "HERMES_HOME", "HTTPS_PROXY",
    "HTTP_PROXY", "NO_PROXY",
)  # fmt: skip
# The /model picker's cache warm-up at start, in a thread of its own (hermes_cli/model_switch.py).
PICKER_WARMUP = b"CONNECT models.dev:443 "

pytestmark = pytest.mark.timeout(600)


def typed(body: dict[str, Any]) -> list[str]:
    """The prompts a person typed, in a request's messages."""
    return [t.strip() for t in user_texts(body) if t.strip() in (FIRST, SECOND)]


def model_reply(side: Path) -> Any:
    def reply(body: dict[str, Any]) -> Any:
        said = user_texts(body)
        if said and said[-1].startswith(SUMMARY):
            return SUMMARISED
        call = function_call("terminal", {"command": f"echo cbprobe4 >> {side}"})
        prompts = typed(body)
        if not prompts or prompts[-1] == FIRST:
            return call  # for ever
        last = (body.get("messages") or [{}])[-1]
        return "Hello: it ran." if last.get("role") == "tool" else call

    return reply


def titling(body: dict[str, Any]) -> bool:
    """A request of Hermes's own for the session's title (not the agent's)."""
    first = (body.get("messages") or [{}])[0]
    return str(first.get("content", "")).startswith(TITLE_PROMPT)


def check_results(results: list[str], refusal: str) -> None:
    """What the model got for the calls of the first prompt: 5 ran, then our refusal as
    Hermes's JSON error, up to its iteration budget."""
    assert len(results) == BUDGET, len(results)
    assert not any("Circuit breaker" in r for r in results[:5]), results[:5]
    for result in results[5:]:
        assert result.startswith('{"error": "' + refusal), result


def test_hermes_interactive_refusals_then_its_own_budget(
    installed: Installed, harness_cache: Path
) -> None:
    require(tmux.available(), "tmux (Debian's tmux)")
    hermes = in_scratch_home("hermes", installed, harness_cache)  # our hooks installed
    with hermes.settings.open("a") as config:
        config.write("model_catalog:\n  enabled: false\n")
    side = hermes.work / "side.txt"
    fake = FakeOpenAI(after=model_reply(side), side=titling, side_reply="Probe loop")
    with fake as model, hermes.trapped((PICKER_WARMUP,)):
        hermes.point_at(model)
        ui_env = tmux.plain_env(**{k: hermes.run_env(model)[k] for k in KEEP})
        command = [str(hermes.cli), "chat"]
        with tmux.Terminal("hermes-loop", command, ui_env, hermes.work) as ui:
            ui.wait_for(r"Welcome to Hermes Agent![\s\S]*❯", "started")
            time.sleep(2)
            ui.type(FIRST)
            ui.wait_for(r"(┊ 💻 preparing terminal…\s+){3}", "refused-calls-show-no-result", 240)
            screen = ui.wait_for(SUMMARISED, "its-own-budget-ends-the-turn", 400)
            flat = " ".join(screen.split())
            assert f"Reached maximum iterations ({BUDGET}). Requesting summary..." in flat
            assert "Circuit breaker" not in flat
            assert len(side_lines(side)) == 5
            asked = len(model.replies)  # the agent's requests, not the title's
            time.sleep(5)
            assert len(model.replies) == asked == BUDGET + 1, "a request after the turn ended"
            check_results([r.text for r in model.tool_results()], hermes.duplicate())
            ui.wait_for(r"(?m)^❯\s*$", "back-at-the-prompt")
            ui.type(SECOND)
            ui.wait_for(r"Hello: it ran\.", "a-second-prompt-starts-afresh", 240)
            assert len(side_lines(side)) == 6  # the same call ran again: the typed prompt reset it
            assert "Circuit breaker" not in model.tool_results()[-1].text
    assert model.errors == []
