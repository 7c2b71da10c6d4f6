"""A new user prompt starts the main agent afresh (`resetOnUserPrompt`), but only a prompt a
person typed: a harness that fires its prompt event for its own follow-ups (a nudge, a
retry) must not restart the count under one typed prompt.

Gemini CLI 0.61.0, interactive (captured under tmux, tests/fixtures/harness-events/
gemini-cli/loop-retry.jsonl): its loop detection stopped the turn at the 5th identical
call; it then sent itself `[System: You successfully executed a tool but returned an empty
response. ...]` (a BeforeAgent with that prompt), and once loop detection was switched
off in its dialog, retried the request with that same nudge (another BeforeAgent). On
a967c7a each reset the session, so the one typed prompt ran the call 4 + 6 = 10 times.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.harnesses import Prompt, load
from hook_support import hook_env, run_hook

FIXTURES = Path(__file__).parent / "fixtures" / "harness-events"
pytestmark = pytest.mark.timeout(120)


def events(name: str, file: str) -> list[dict[str, Any]]:
    text = (FIXTURES / name / file).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_gemini_cli_loop_retry_keeps_counting(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    captured = events("gemini-cli", "loop-retry.jsonl")
    prompts = [e["prompt"] for e in captured if e["hook_event_name"] == "BeforeAgent"]
    assert prompts[0] == "Run echo cbprobe4 many times"
    assert len(prompts) == 3 and all(p.startswith("[System: ") for p in prompts[1:])
    answers = []
    for event in captured:
        done = run_hook(event, env, "--harness", "gemini-cli")
        assert done.returncode == 0 and done.stderr == ""
        if event["hook_event_name"] == "BeforeTool":
            answers.append(json.loads(done.stdout) if done.stdout.strip() else None)
    assert answers[:6] == [None] * 6  # 6 in all run, across the nudges and the retry
    assert all(a is not None and a["decision"] == "deny" for a in answers[6:])
    assert [bool(a.get("continue") is False) for a in answers[6:9]] == [False, False, True]


def test_a_typed_prompt_still_starts_afresh(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    captured = events("gemini-cli", "loop-retry.jsonl")
    call = next(e for e in captured if e["hook_event_name"] == "BeforeTool")
    typed = next(e for e in captured if e["hook_event_name"] == "BeforeAgent")
    for _ in range(6):
        assert run_hook(call, env, "--harness", "gemini-cli").stdout == ""
    assert run_hook(call, env, "--harness", "gemini-cli").stdout.strip()  # the 7th: refused
    assert run_hook({**typed, "prompt": "Now try something else"}, env, "--harness", "gemini-cli")
    assert run_hook(call, env, "--harness", "gemini-cli").stdout == ""  # afresh


@pytest.mark.parametrize(
    ("prompt", "typed"),
    [
        ("Run the tests", True),
        ("[System: You previously returned an empty response with no text or thoughts.]", False),
        ("  ", False),  # a retry of tool results: no text a person could have sent
        ("", False),
        ("[System] is the word I mean", True),
    ],
)
def test_gemini_cli_prompts_a_person_typed(prompt: str, typed: bool) -> None:
    event = {"hook_event_name": "BeforeAgent", "session_id": "s", "prompt": prompt}
    assert isinstance(load("gemini-cli").parse(event), Prompt) is typed


def test_gemini_cli_before_agent_without_a_prompt_field_is_a_prompt() -> None:
    event = {"hook_event_name": "BeforeAgent", "session_id": "s"}
    assert isinstance(load("gemini-cli").parse(event), Prompt)
