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


def copilot_log_until(log: list[dict[str, Any]], prompt: dict[str, Any]) -> str:
    """Copilot's session log as it stood when it ran the hooks of `prompt`: up to that
    prompt's own `hook.start`."""
    for i, entry in enumerate(log):
        data = entry.get("data") or {}
        mine = data.get("hookType") == "userPromptSubmitted" and entry["type"] == "hook.start"
        if mine and data["input"]["timestamp"] == prompt["timestamp"]:
            return "".join(json.dumps(e) + "\n" for e in log[: i + 1])
    raise AssertionError(f"no hook.start for {prompt['prompt']!r}")


def test_copilot_stop_hook_continuation_keeps_counting(tmp_path: Path) -> None:
    """Copilot CLI 1.0.102, `copilot -p` (captured: tests/fixtures/harness-events/copilot/
    stop-continuation.jsonl, and .events.jsonl, its session log): after 6 identical calls
    an `agentStop` hook answered `decision: "block"` once, and Copilot sent that hook's
    reason as a `userPromptSubmitted` prompt, shaped as a typed one; 3 more calls; then the
    person's next prompt in the resumed session (`--resume`) and 2 calls. Before the fix
    the continuation reset the session: all 11 ran."""
    home = tmp_path / "copilot-home"
    env = hook_env(tmp_path, COPILOT_HOME=str(home))
    captured = events("copilot", "stop-continuation.jsonl")
    log = events("copilot", "stop-continuation.events.jsonl")
    prompts = [e["prompt"] for e in captured if "prompt" in e]
    assert prompts[1] == "Keep going: run the probe once more."  # the Stop hook's reason
    refused = []
    for event in (e for e in captured if "toolName" in e or "prompt" in e):
        if "prompt" in event:
            path = home / "session-state" / event["sessionId"] / "events.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(copilot_log_until(log, event), encoding="utf-8")
        done = run_hook(event, env, "--harness", "copilot")
        assert done.returncode == 0 and done.stderr == ""
        if "toolName" in event:
            refused.append(bool(done.stdout.strip()))
    assert refused == [False] * 6 + [True] * 3 + [False] * 2


COPILOT_PROMPT = {"sessionId": "s", "timestamp": 1, "cwd": "/", "prompt": "Run the tests"}
COPILOT_START = json.dumps(
    {"type": "hook.start", "data": {"hookType": "userPromptSubmitted", "input": COPILOT_PROMPT}}
)
COPILOT_STOP = '{"type": "hook.end", "data": {"hookType": "agentStop"%s}}'


@pytest.mark.parametrize(
    "log",
    [
        None,  # no session log
        [COPILOT_STOP % "", COPILOT_START],  # the Stop hook did not block
        [COPILOT_STOP % ', "output": {"decision": "block"}', '{"type": "user.message"}'],
        ["not json"],  # the prompt's own entry never comes: LOG_WAIT, then typed
    ],
)
def test_copilot_prompts_a_person_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: list[str] | None
) -> None:
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path))
    if log is not None:
        path = tmp_path / "session-state" / "s" / "events.jsonl"
        path.parent.mkdir(parents=True)
        ours = [] if log == ["not json"] or COPILOT_START in log else [COPILOT_START]
        path.write_text("".join(line + "\n" for line in [*log, *ours]), encoding="utf-8")
    assert isinstance(load("copilot").parse(dict(COPILOT_PROMPT)), Prompt)


def test_copilot_a_blocking_stop_hook_right_before_is_no_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path))
    path = tmp_path / "session-state" / "s" / "events.jsonl"
    path.parent.mkdir(parents=True)
    blocked = COPILOT_STOP % ', "output": {"decision": "block", "reason": "Run the tests"}'
    path.write_text(f"{blocked}\n{COPILOT_START}\n", encoding="utf-8")
    assert load("copilot").parse(dict(COPILOT_PROMPT)) is None


def test_cline_team_updates_run_keeps_counting(tmp_path: Path) -> None:
    """Cline 3.0.65, `cline --json` (captured: tests/fixtures/harness-events/cline/
    team-updates.jsonl, the hook inputs its plugins got): the lead spawned a teammate, gave
    it a task (async), then called two commands by turns, 6 times each, and ended its run;
    Cline started the lead's next run by itself with its teammate's report
    (`System-delivered teammate async run updates: ...`), and the lead went on with the
    same commands. Counting goes on: the 7th `a` is the 6th since `b`'s first (new) call,
    and runs; the 7th `b` and the 8th `a` are refused. Before the fix that run reset the
    lead: all 15 ran."""
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
    assert refused == [False] * 13 + [True] * 2 + [False]
