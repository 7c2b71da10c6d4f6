"""A new user prompt starts the main agent afresh (`resetOnUserPrompt`), but only a prompt a
person typed: a harness that fires its prompt event for its own follow-ups (a nudge, a
retry) must not restart the count under one typed prompt.

Gemini CLI 0.61.0, interactive (captured under tmux, tests/fixtures/harness-events/
gemini-cli/loop-retry.jsonl): its loop detection stopped the turn at the 5th identical
call; it then sent itself `[System: You successfully executed a tool but returned an empty
response. ...]` (a BeforeAgent with that prompt), and once loop detection was switched
off in its dialog, retried the request with that same nudge (another BeforeAgent). On
a967c7a each reset the session, so the one typed prompt ran the call 4 + 6 = 10 times.

Kimi CLI 1.51.0 (tests/fixtures/harness-events/kimi-cli/subagent.jsonl): a subagent's task
comes as a UserPromptSubmit under its parent's session, like a typed prompt, and resets it
(a limit docs/kimi-cli.md states); Kimi's follow-up asking the subagent for a longer
summary does not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.harnesses import load
from dsh_circuit_breaker.judge import Prompt
from hook_support import hook_env, run_hook, runs_then_refusal

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
    assert answers[:5] == [None] * 5  # 5 in all run, across the nudges and the retry
    assert all(a is not None and a["decision"] == "deny" for a in answers[5:])
    assert [bool(a.get("continue") is False) for a in answers[5:8]] == [False, False, True]


def test_a_typed_prompt_still_starts_afresh(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    captured = events("gemini-cli", "loop-retry.jsonl")
    call = next(e for e in captured if e["hook_event_name"] == "BeforeTool")
    typed = next(e for e in captured if e["hook_event_name"] == "BeforeAgent")
    for _ in range(5):
        assert run_hook(call, env, "--harness", "gemini-cli").stdout == ""
    assert run_hook(call, env, "--harness", "gemini-cli").stdout.strip()  # the 6th: refused
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


def test_copilot_stop_hook_continuation_looks_typed() -> None:
    """Copilot CLI 1.0.102, `copilot -p` (captured: tests/fixtures/harness-events/copilot/
    stop-continuation.jsonl): an `agentStop` hook answered `decision: "block"` after 6
    calls, and Copilot sent that hook's reason back as a `userPromptSubmitted` prompt with
    the same fields as a typed one, so it resets the session (a known limit, docs/copilot.md).
    Its session log (`events.jsonl`) tells them apart, but Copilot writes it in batches, in
    a plain run only when the session ends, after our hook has answered."""
    captured = events("copilot", "stop-continuation.jsonl")
    prompts = [e for e in captured if "prompt" in e]
    typed, continuation, resumed = prompts
    assert continuation["prompt"] == "Keep going: run the probe once more."  # the reason
    assert set(typed) == set(continuation) == set(resumed)
    assert all(isinstance(load("copilot").parse(p), Prompt) for p in prompts)


def test_cline_team_updates_run_keeps_counting(tmp_path: Path) -> None:
    """Cline 3.0.65, `cline --json` (captured: tests/fixtures/harness-events/cline/
    team-updates.jsonl, the hook inputs its plugins got): the lead spawned a teammate, gave
    it a task (async), then called two commands by turns, 6 times each, and ended its run;
    Cline started the lead's next run by itself with its teammate's report
    (`System-delivered teammate async run updates: ...`), and the lead went on with the
    same commands. The 4th `a` (the 7th call) is refused as a frozen cycle (`a` `b`, three
    rounds; this capture has no results, which counts as nothing changed). Counting goes on
    into the run Cline started by itself: its `b` and `a` are refused, where a fresh agent
    would have run all three. Before the fix that run reset the lead."""
    from test_cline_plugin import drive

    captured = events("cline", "team-updates.jsonl")
    lead = captured[0]["snapshot"]["agentId"]
    steps = [
        [e["hook"], e["snapshot"], e.get("input"), (e.get("toolCall") or {}).get("toolName")]
        for e in captured
    ]
    runs = [s for s in steps if s[0] == "beforeRun" and s[1]["agentId"] == lead]
    assert len(runs) == 2 and "System-delivered teammate" in json.dumps(runs[1][1])
    typed = json.loads(json.dumps(runs[1]))  # the person's next prompt: afresh again
    go_on = {"type": "text", "text": '<user_input mode="act">Go on.</user_input>'}
    typed[1]["messages"][-1]["content"] = [go_on]
    again = next(s for s in steps if s[3] == "run_commands")
    out = drive(tmp_path, [*steps, typed, again])["out"]
    assert out[0] == {"setup": "ok"}
    refused = [
        isinstance(o, dict) and o.get("skip") is True
        for s, o in zip([*steps, typed, again], out[1:], strict=True)
        if s[3] == "run_commands"
    ]
    first_run, second_run, typed_again = refused[:12], refused[12:15], refused[15:]
    assert first_run == [False] * 6 + [True, False, False, False, False, True]
    assert second_run == [False, True, True]  # afresh, all three would run
    assert typed_again == [False]


def test_kimi_cli_a_subagents_task_resets_its_follow_up_does_not(tmp_path: Path) -> None:
    # Every copy in the window counts (resetOnNewCall off), so only a reset restarts it.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"resetOnNewCall": False}))
    env = hook_env(tmp_path)
    captured = events("kimi-cli", "subagent.jsonl")
    prompts = [e for e in captured if e["hook_event_name"] == "UserPromptSubmit"]
    assert [e["prompt"][:40] for e in prompts] == [
        "PARENT-TASK: loop, delegate the loop, lo",
        "SUBAGENT-TASK: run the loop",
        "Your previous response was too brief. Pl",
    ]
    kinds = [type(load("kimi-cli").parse(e)).__name__ for e in prompts]
    assert kinds == ["Prompt", "Prompt", "NoneType"]
    refused = []
    for event in captured:
        if event["hook_event_name"] not in ("UserPromptSubmit", "PreToolUse"):
            continue  # SubagentStart / SubagentStop: recorded beside, not ours
        done = run_hook(event, env, "--harness", "kimi-cli", "--config", str(config))
        assert done.returncode == 0 and done.stderr == ""
        if event.get("tool_name") == "Shell":
            refused.append(bool(done.stdout.strip()))
    # The parent's 4, then (reset by the subagent's task) the subagent's 4 + 3 across the
    # follow-up, then the parent's 5th: refused from the copy past the limit on.
    runs, _ = runs_then_refusal("Shell", reset_on_new_call=False)
    assert refused == [False] * 4 + [False] * runs + [True] * (8 - runs)
