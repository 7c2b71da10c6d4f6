"""The real OpenHands CLI's terminal UI (its Textual app: `openhands --override-with-envs`,
not `--headless`), driven under tmux as a person drives it (tests/support/tmux.py), with
the hook the installed wheel's `install openhands-cli` wrote in ~/.openhands/hooks.json,
against a scripted model on 127.0.0.1 that asks for the same terminal command again and
again; offline as the headless e2e runs it (OpenHandsCli in
support/command_hook_harnesses.py: the model from LLM_MODEL, LLM_BASE_URL and LLM_API_KEY,
its one allowed PyPI version check, GIT_ALLOW_PROTOCOL, LITELLM_LOCAL_MODEL_COST_MAP).

What a person sees: the splash's "Loaded: 4 hooks" (ours and their own Stop hook). OpenHands
asks "Confirm 1 action(s)?" at the first call (its default, always-ask), our PreToolUse
hook's line already above the question (its hooks run as the model asks for a call, before
the question); they choose "Always". 5 calls run and end in ✓; the 6th and 7th end in ✗,
under "Hook: PreToolUse (terminal) Status: BLOCKED - Circuit breaker: NOT ...". The breaker
has no stop in OpenHands (refusals just go on), and its StuckDetector, which ends a run at
the 4th identical round, does not fire: the model words each attempt differently, as in the
headless scenarios. It gives up after the 7th call with a text of its own, the run's last
line; no model request follows. A second typed prompt starts afresh: the same command runs
again ("Once more: ... ✓"), then "Hello: it ran.". Ctrl+O (Toggle Cells) opens every line,
and the refused calls read "Rejection Reason:" and our whole text, "Circuit breaker: NOT
run, a repeat (copies: 6, limit: 6): ..." (the model got it after "Action rejected: ",
checked in its requests). The view does not always follow new lines (at_the_end). The
screens are kept in .test-output/screens/openhands-cli-loop/.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from support import tmux
from support.command_hook_harnesses import Harness, in_scratch_home
from support.fake_openai import FakeOpenAI
from support.harness_run import side_lines
from support.installed import Installed
from support.scripted_server import text_of

FIRST = "Run the cbprobe4 probe until it works"
SECOND = "Now run it once more and say hello"
GIVE_UP = "The probe keeps being refused, so I stop here."
SCROLL_BAR = re.compile("[\u2580-\u259f]")
CALLS = 7  # the model's calls before it gives up: 5 run, 2 refused

pytestmark = pytest.mark.timeout(600)


def typed(message: dict[str, Any]) -> str | None:
    """FIRST or SECOND, where `message` is one of the prompts the person typed."""
    said = text_of(message.get("content")) if message.get("role") == "user" else ""
    return next((prompt for prompt in (FIRST, SECOND) if prompt in said), None)


def model_reply(h: Harness, side: Path) -> Any:
    """After FIRST, the probe, after a sentence of its own every time (h.shell), until 7
    results came back, then GIVE_UP; after SECOND, the probe once, then hello."""

    def reply(body: dict[str, Any]) -> Any:
        messages = body.get("messages") or []
        prompts = [i for i, message in enumerate(messages) if typed(message)]
        assert prompts, body  # every request of the CLI's carries the typed prompt
        results = sum(1 for m in messages[prompts[-1] :] if m.get("role") == "tool")
        probe = f"echo cbprobe4 >> {side}"
        if typed(messages[prompts[-1]]) == SECOND:
            return "Hello: it ran." if results else h.shell(probe, "Once more")
        return GIVE_UP if results >= CALLS else h.shell(probe, f"Probe step {results + 1}")

    return reply


def flat(screen: str) -> str:
    """The screen's words in one line, without the scroll bar's blocks (▇, ▄, ...) that
    Textual draws at the end of a line."""
    return " ".join(SCROLL_BAR.sub(" ", screen).split())


def at_the_end(ui: tmux.Terminal, pattern: str, what: str, seconds: float) -> str:
    """`ui.wait_for(pattern)` for a line that shows at the end of the conversation. Its
    view follows new lines only while it is at the very end, and loses it now and then
    (lines that arrive together: richlog_visualizer.py checks `is_vertical_scroll_end` as
    it mounts each): every 15 s without `pattern`, the end is brought back as a person
    does it with keys: Tab to the last cell, End to the bottom, Tab back to the input."""
    deadline = time.monotonic() + seconds
    found = re.compile(pattern)
    nudge = time.monotonic() + 15
    while not found.search(ui.screen()):
        if time.monotonic() > deadline:
            ui.keep(f"{what}-timeout")
            raise AssertionError(f"no {pattern!r} on the screen within {seconds} s")
        if time.monotonic() > nudge:
            ui.keep(f"{what}-not-yet-End")
            ui.press("Tab", "End", "Tab")
            nudge = time.monotonic() + 15
        time.sleep(0.5)
    return ui.keep(what)


def scroll_to(ui: tmux.Terminal, words: str, key: str, what: str, seconds: float = 90) -> str:
    """Press `key` until `words` show on the screen, kept as `what`; one key at a time,
    each seen on screen, as a UI under load may lag."""
    deadline = time.monotonic() + seconds
    while words not in flat(ui.screen()):
        if time.monotonic() > deadline:
            ui.keep(f"{what}-timeout")
            raise AssertionError(f"no {words!r} on the screen within {seconds} s")
        ui.press(key)
        time.sleep(1.0)
    return ui.keep(what)


def test_openhands_cli_interactive_five_run_then_refusals(
    installed: Installed, harness_cache: Path
) -> None:
    require(tmux.available(), "tmux (Debian's tmux)")
    h = in_scratch_home("openhands-cli", installed, harness_cache)
    side = h.work / "side.txt"
    with h.offline(), FakeOpenAI(after=model_reply(h, side)) as model:
        # What the harness sets for a run, in the environment a person starts it from.
        env = h.run_env(model)
        ui_env = tmux.plain_env(**{k: v for k, v in env.items() if os.environ.get(k) != v})
        command = [str(h.cli), "--override-with-envs"]
        with tmux.Terminal("openhands-cli-loop", command, ui_env, h.work) as ui:
            # Our three hooks and the user's own Stop hook, read from ~/.openhands/hooks.json.
            screen = ui.wait_for(r"Loaded: 4 hooks", "started", 240)
            assert "Type your message" in screen
            conversation = re.search(r"Initialized conversation ([0-9a-f]{32})", screen)
            assert conversation is not None, screen
            ui.type(FIRST)
            screen = ui.wait_for(r"Confirm 1 action\(s\)\?", "asks-to-confirm", 240)
            assert "Hook: PreToolUse (terminal) Status: SUCCESS" in flat(screen)
            assert len(side_lines(side)) == 0
            ui.choose("Always", "Down", "always", cursor=">")
            screen = at_the_end(ui, re.escape(GIVE_UP), "the-model-gives-up", 300)
            shown = flat(screen)
            assert "Status: BLOCKED - Circuit breaker: NOT ..." in shown
            assert re.search(r"Probe step 5: \$ echo cbprobe4 >> \S+ ✓", shown), shown
            assert re.search(r"Probe step 6: \$ echo cbprobe4 >> \S+ ✗", shown), shown
            assert re.search(r"Probe step 7: \$ echo cbprobe4 >> \S+ ✗", shown), shown
            assert len(side_lines(side)) == 5
            asked = len(model.requests)
            time.sleep(5)
            assert len(model.requests) == asked == CALLS + 1, "a model request after the end"
            assert ui.alive()
            ui.wait_for(r"\^a Select all", "back-at-the-input", 60)  # the input's own keys
            ui.type(SECOND)
            screen = at_the_end(ui, r"Hello: it ran\.", "a-second-prompt-starts-afresh", 240)
            assert re.search(r"Once more: \$ echo cbprobe4 >> \S+ ✓", flat(screen)), screen
            assert len(side_lines(side)) == 6  # the same call ran again: the typed prompt reset it
            # Our whole text, as a person reads it: Ctrl+O (Toggle Cells) opens every cell,
            # Tab goes to the last one, Up a cell back at a time, to the refused calls.
            ui.press("C-o", "Tab")
            refusal = "Rejection Reason: " + h.duplicate()
            scroll_to(ui, refusal, "Up", "the-refusal-in-full")
    calls = model.tool_uses()
    assert len(calls) == CALLS + 1
    for call in calls[5:CALLS]:
        refused = model.result_in_next_request(call["id"]).text
        assert refused == h.refusal_prefix + h.duplicate()
    assert set(model.paths) == {"/v1/chat/completions"}
    assert model.errors == []
    (entry,) = h.incident_lines()
    assert entry["kind"] == "duplicate"
    assert entry["agent"].replace("-", "") == conversation.group(1)
