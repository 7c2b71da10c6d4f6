"""End to end, what only one command-hook harness has: Claude Code's parallel batches,
Codex's hook trust and its answer to a stop, Copilot's hooks directory, droid's
hooks.json, Gemini CLI's subagents, its hook command's fallback and its web search
budget, Kimi CLI's subagents and its own repeat guard, the OpenHands CLI's StuckDetector. The
real CLI, driven as in
tests/test_command_hook_e2e.py
(tests/support/command_hook_harnesses.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from hook_support import runs_then_refusal
from support.command_hook_harnesses import (
    GEMINI_STOPPED,
    Codex,
    Harness,
    gemini_tools,
    in_scratch_home,
)
from support.fake_gemini import function_responses_of
from support.harness_run import side_lines
from support.installed import Installed
from support.scripted_server import Block, tool_call

pytestmark = pytest.mark.timeout(660)

SUBAGENT_MARK = "SUBAGENT-TASK: run the loop"


@pytest.fixture
def scratch(installed: Installed, harness_cache: Path) -> Any:
    def make(name: str) -> Harness:
        return in_scratch_home(name, installed, harness_cache)

    return make


# -- Codex ---------------------------------------------------------------------------------

# Claude Code's stop answer (the deny plus `continue: false`), printed for every call.
CLAUDE_STOP_HOOK = """import json, sys
from dsh_circuit_breaker.core.breaker import Decision
from dsh_circuit_breaker.harnesses import claude_code
if json.load(sys.stdin).get("hook_event_name") == "PreToolUse":
    stop = Decision(False, "duplicate", "DENIED", 6, 6, stop=True, stop_reason="STOPPED")
    print(claude_code.answer(stop))
"""


def test_codex_a_stop_beside_the_deny_would_lose_the_deny(scratch: Any) -> None:
    # Why codex answers a stop with the plain deny: Claude Code's stop answer makes Codex
    # fail the hook, so the call runs and the run goes on. This pins down that limit.
    h = scratch("codex")
    script = h.home / "claude-stop-hook.py"
    script.write_text(CLAUDE_STOP_HOOK)
    hooks = json.loads(h.hooks_file.read_text())
    hooks["hooks"]["PreToolUse"][0]["hooks"][0]["command"] = f"{h.installed.python} {script}"
    h.hooks_file.write_text(json.dumps(hooks))
    side = h.work / "side.txt"
    with h.model([*h.probe(side, 2), "Done."]) as model:
        outcome = h.run(model, "Run the cbprobe4 probe twice.")
    assert side_lines(side) == ["cbprobe4"] * 2  # both ran: the deny was lost
    assert not any("DENIED" in o.text for o in model.tool_results())
    assert outcome.stderr.count("hook: PreToolUse Failed") == 2
    assert len(model.model_requests) == 3  # and the run went on


def test_codex_untrusted_hooks_do_not_run(scratch: Any) -> None:
    # Codex runs a user hook only once it is trusted (approved in /hooks); until then the
    # agent is unguarded. This pins down the limit the docs state.
    h: Codex = scratch("codex")
    h.trust = False
    side = h.work / "side.txt"
    with h.model([*h.probe(side), "Done."]) as model:
        h.run(model, "Run the cbprobe4 probe ten times.")
    assert side_lines(side) == ["cbprobe4"] * 10
    assert not any(o.text.startswith(h.refusal_prefix) for o in model.tool_results())
    assert agents_in(h.state) == 0  # the hook never ran (install only probed the store)
    # The very same hooks.json, untouched, once trusted: the hook runs and blocks. So the
    # untrusted run above was unguarded because of the trust, not a broken install.
    h.trust = True
    trusted_side = h.work / "trusted-side.txt"
    with h.model([*h.probe(trusted_side), "Done."]) as model:
        h.run(model, "Run the cbprobe4 probe ten times.")
    assert side_lines(trusted_side) == ["cbprobe4"] * 5
    refused = [o.text.startswith(h.refusal_prefix) for o in model.tool_results()]
    assert refused == [False] * 5 + [True] * 5
    assert agents_in(h.state) == 1


def agents_in(state: Path) -> int:
    """Agents the store at `state` holds (install writes and removes a probe agent)."""
    if not state.exists():
        return 0
    with contextlib.closing(sqlite3.connect(state)) as db:
        return int(db.execute("SELECT COUNT(*) FROM agents").fetchone()[0])


# -- GitHub Copilot CLI --------------------------------------------------------------------


def test_copilot_reinstall_and_uninstall(scratch: Any) -> None:
    h = scratch("copilot")
    hooks = h.hooks_file.parent
    (hooks / "others.json").write_text('{"version": 1, "hooks": {}}')
    config = h.home / "other-config.json"
    config.write_text('{"duplicateLimit": 4}')
    # A reinstall with other options leaves a backup of our file beside it, which Copilot
    # must not load as a second hook.
    assert "backup:" in h.install("--config", str(config)).stdout
    assert len(list(hooks.glob("dsh-circuit-breaker.json.bak-*"))) == 1
    side = h.work / "side.txt"
    with h.model([*h.probe(side, 5), "Stopped."]) as model:
        h.run(model, "Run the probe five times.")
    assert side_lines(side) == ["cbprobe4"] * 3
    # Uninstall deletes our file only; the CLI then runs unguarded.
    gone = h.installed.run("uninstall", "copilot", env=h.env)
    assert gone.returncode == 0 and "removed from" in gone.stdout, gone.stdout + gone.stderr
    assert not h.hooks_file.exists() and (hooks / "others.json").exists()
    side.unlink()
    with h.model([*h.probe(side, 8), "Done."]) as model:
        h.run(model, "Run the probe eight times.")
    assert side_lines(side) == ["cbprobe4"] * 8


# -- Factory droid -------------------------------------------------------------------------


def test_droid_a_hooks_json_event_replaces_ours(scratch: Any) -> None:
    # Why install refuses and doctor complains when ~/.factory/hooks.json defines one of
    # our events: droid then runs only that file's hooks for it, and ours never runs.
    h = scratch("droid")
    other = {"hooks": [{"type": "command", "command": "true"}]}
    (h.home / ".factory" / "hooks.json").write_text(json.dumps({"PreToolUse": [other]}))
    side = h.work / "side.txt"
    calls = [h.shell(f"echo shadowed >> {side}", f"Take {i}") for i in range(8)]
    with h.model([*calls, "Done."]) as model:
        h.run(model, "Run it eight times.")
    assert side_lines(side) == ["shadowed"] * 8
    assert not any(r.text.startswith(h.refusal_prefix) for r in model.tool_results())
    doctor = h.installed.run("doctor", "droid", env=h.env)
    assert doctor.returncode == 1 and "hooks.json defines PreToolUse" in doctor.stdout


# -- Gemini CLI ----------------------------------------------------------------------------


def test_gemini_a_subagent_is_keyed_by_its_parents_session(scratch: Any) -> None:
    # Gemini CLI gives a subagent's BeforeTool events its parent's session_id and nothing
    # naming the subagent: the looping subagent is denied, and its refusals count for the
    # whole session (the limit docs/gemini-cli.md states): the parent repeating the
    # subagent's command right after it is its third refusal in a row, and the run stops.
    h = scratch("gemini-cli")
    side = h.work / "side.txt"
    loop = f"echo loop >> {side}"

    def respond(body: dict[str, Any]) -> Any:
        done = len(function_responses_of(body))
        if "invoke_agent" not in gemini_tools(body):  # a subagent cannot delegate
            if done < 7:  # five run, two refused
                return h.shell(loop, f"attempt {done + 1}")
            return tool_call("complete_task", {"result": {"response": "The loop was refused."}})
        if done == 0:
            delegate = {"agent_name": "generalist", "prompt": SUBAGENT_MARK}
            return tool_call("invoke_agent", delegate)
        if done == 1:
            return h.shell(loop, "the subagent's command, from the parent")
        return h.shell(f"echo parent >> {side}", "a different command")  # never asked for

    with h.model([], after=respond) as model:
        outcome = h.run(model, "PARENT-TASK: delegate the loop, then check.")
    by_description = {u["input"].get("description"): u["id"] for u in model.tool_uses()}
    results = {r.call_id: r for r in model.tool_results()}
    sub = [results[by_description[f"attempt {i}"]] for i in range(1, 8)]
    assert [r.is_error for r in sub] == [False] * 5 + [True] * 2
    assert all(r.text.startswith(h.refusal_prefix + h.duplicate()) for r in sub[5:])
    delegated = results[next(u["id"] for u in model.tool_uses() if u["name"] == "invoke_agent")]
    # complete_task is exempt: the subagent handed its result back, though it had looped.
    assert not delegated.is_error and "The loop was refused." in delegated.text, delegated
    stopping = by_description["the subagent's command, from the parent"]
    assert model.tool_uses()[-1]["id"] == stopping  # the parent's run ended on it
    assert "a different command" not in by_description
    assert side_lines(side) == ["loop"] * 5
    # -o json prints no stop line; the tool error line on stderr still names the stop.
    assert h.stop_shown(outcome) == [h.stop_text()]
    incident, stop = h.incident_lines()
    assert (incident["kind"], stop["kind"]) == ("duplicate", "stop")
    assert incident["agent"] == stop["agent"] == outcome.session  # no subagent part


def test_gemini_a_stop_inside_a_subagent_does_not_end_it(scratch: Any) -> None:
    # Gemini CLI 0.61.0 ends only the main agent's loop on `continue: false`; a subagent
    # gets the stop as the call's error and goes on (to complete_task or its turn limit).
    # The call still never runs, and the parent goes on after the subagent.
    h = scratch("gemini-cli")
    side = h.work / "side.txt"

    def respond(body: dict[str, Any]) -> Any:
        done = len(function_responses_of(body))
        if "invoke_agent" not in gemini_tools(body):
            if done < 12:
                return h.shell(f"echo loop >> {side}", f"attempt {done + 1}")
            return tool_call("complete_task", {"result": {"response": "Gave up on the loop."}})
        if done == 0:
            return tool_call("invoke_agent", {"agent_name": "generalist", "prompt": SUBAGENT_MARK})
        if done == 1:
            return h.shell(f"echo parent >> {side}", "a different command")
        return "Parent: done."

    with h.model([], after=respond) as model:
        outcome = h.run(model, "PARENT-TASK: delegate the loop, then check.")
    by_description = {u["input"].get("description"): u["id"] for u in model.tool_uses()}
    results = {r.call_id: r for r in model.tool_results()}
    sub = [results[by_description[f"attempt {i}"]] for i in range(1, 13)]
    stop = h.stop_text()
    assert [r.is_error for r in sub] == [False] * 5 + [True] * 7
    assert [r.text.startswith(h.refusal_prefix) for r in sub[5:7]] == [True, True]
    assert sub[7].text == GEMINI_STOPPED + stop  # what the subagent's model is told instead
    assert all(r.text.startswith(GEMINI_STOPPED + stop[:60]) for r in sub[8:])
    assert side_lines(side) == ["loop"] * 5 + ["parent"]
    assert not results[by_description["a different command"]].is_error
    assert outcome.final == "Parent: done."
    assert "Agent execution stopped:" not in outcome.stderr


def test_gemini_a_hook_that_cannot_start_never_blocks(scratch: Any) -> None:
    # The environment the hook was installed from is gone: bash exits 127. Gemini CLI
    # takes any exit status from 2 up as a denial (of the prompt, on BeforeAgent), which
    # the installed command's `|| true` turns back into "no opinion".
    h = scratch("gemini-cli")
    gone = str(h.home / "removed-venv" / "bin" / "python")
    h.settings.write_text(h.settings.read_text().replace(str(h.installed.python), gone))
    side = h.work / "side.txt"
    with h.model([h.shell(f"echo ran >> {side}", "run it"), "Done."]) as model:
        h.run(model, "Run it once.")
    assert side_lines(side) == ["ran"]
    assert [r.is_error for r in model.tool_results()] == [False]
    path = f"{h.cli.parent}{os.pathsep}{h.env['PATH']}"
    doctor = h.installed.run("doctor", "gemini-cli", env=dict(h.env, PATH=path))
    assert doctor.returncode == 1 and "hook command warned on BeforeTool" in doctor.stdout
    assert gone in doctor.stdout


SEARCH = "google_web_search"
BUDGET_REFUSED = "Tool execution blocked: " + render(
    DEFAULT_MESSAGES["budget"], SEARCH, "budget", 12, 12
)


def search_query(body: dict[str, Any]) -> str | None:
    """The query of a request that Gemini CLI's google_web_search tool made (it asks the
    same API, with the googleSearch tool and the query as the one text), else None."""
    if {"googleSearch": {}} not in (body.get("tools") or []):
        return None
    return str(body["contents"][0]["parts"][0]["text"])


def is_search(body: dict[str, Any]) -> bool:
    return search_query(body) is not None


def search_result(body: dict[str, Any]) -> str:
    return f"Found for {search_query(body)}: nothing new."


def test_gemini_a_web_search_budget_refuses_the_thirteenth(scratch: Any) -> None:
    # The original report's agent had "Budget: 12 web_search calls" in its prompt and made
    # 1,043 searches; here the budget is the breaker's. Every query differs, so only the
    # budget can refuse. A search that runs asks this server (a side request, off-script).
    h = scratch("gemini-cli")
    h.configure({"toolLimits": {SEARCH: 12}})
    queries = [f"circuit breaker pattern, source {i}" for i in range(1, 14)]
    calls: list[Block] = [tool_call(SEARCH, {"query": q}) for q in queries]
    script = [*calls, "Twelve searches made."]
    with h.model(script, side=is_search, side_reply=search_result) as model:
        outcome = h.run(model, "Research the circuit breaker pattern. Budget: 12 web searches.")
    searched = [q for q in map(search_query, model.requests) if q is not None]
    assert searched == queries[:12]  # twelve ran; the 13th never reached the search API
    results = [model.result_in_next_request(c["id"]) for c in model.tool_uses()]
    assert [r.is_error for r in results] == [False] * 12 + [True]
    for query, result in zip(queries[:12], results[:12], strict=True):
        assert result.text.startswith(f'Web search results for "{query}"'), result.text
        assert f"Found for {query}: nothing new." in result.text
    assert results[12].raw["response"] == {"error": BUDGET_REFUSED}
    assert outcome.final == "Twelve searches made."
    (incident,) = h.incident_lines()  # one refusal: no stop (that takes three in a row)
    assert {k: incident[k] for k in ("kind", "tool", "count", "limit", "agent")} == {
        "kind": "budget",
        "tool": SEARCH,
        "count": 12,
        "limit": 12,
        "agent": outcome.session,
    }


# -- Claude Code ---------------------------------------------------------------------------

POLL_SCRIPT = 'n=$(cat polls 2>/dev/null || echo 0)\necho $((n + 1)) > polls\necho "done $n%"\n'
# A second hook beside ours on the call and result events: the order they fired in.
ORDER_HOOK = """import json, sys
event = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(event["hook_event_name"] + " " + event["tool_use_id"] + "\\n")
"""


def log_hook_order(h: Harness) -> Path:
    """Add a hook beside ours that logs each PreToolUse and PostToolUse (event, call id)."""
    script, log = h.home / "order_hook.py", h.home / "hook-order.log"
    script.write_text(ORDER_HOOK)
    settings = json.loads(h.settings.read_text())
    command = f"{sys.executable} {script} {log}"
    for event in ("PreToolUse", "PostToolUse"):
        settings["hooks"][event].append({"hooks": [{"type": "command", "command": command}]})
    h.settings.write_text(json.dumps(settings))
    return log


def test_claude_code_a_parallel_batch_is_judged_on_no_result_but_its_own(scratch: Any) -> None:
    # Two messages of seven identical tool_use blocks each, with the default install (the
    # post-tool hook in). Claude Code runs a batch of Bash calls one at a time, each
    # result's PostToolUse before the next copy's PreToolUse: each copy of a poll whose
    # output moves is judged on the result of the copy before it, its own, and all seven
    # run. It runs a batch of Reads at once: every PreToolUse before the first result, so
    # the breaker judges them with no result at all, as SPEC says of parallel calls (a
    # copy issued while the one before is out): the 6th and 7th to ask are refused, and
    # the results of the five that ran, which come back later, are not kept.
    h = scratch("claude-code")
    log = log_hook_order(h)
    (h.work / "poll.sh").write_text(POLL_SCRIPT)
    notes = h.work / "notes.txt"
    notes.write_text("the job is at step 3\n")
    polls = [h.shell("sh poll.sh", f"Poll the job, copy {i}") for i in range(1, 8)]
    reads = [tool_call("Read", {"file_path": str(notes)}) for _ in range(7)]
    with h.model([polls, reads, "Done."]) as model:
        outcome = h.run(model, "Poll the job seven times at once, then read the notes so.")
    assert outcome.final == "Done." and len(model.model_requests) == 3
    poll_ids, read_ids = [[c["id"] for c in batch] for batch in (polls, reads)]
    assert [c["id"] for c in model.tool_uses()] == poll_ids + read_ids  # two batches of 7
    order = [tuple(line.split()) for line in log.read_text().splitlines()]
    serial = [(event, i) for i in poll_ids for event in ("PreToolUse", "PostToolUse")]
    assert order[:14] == serial
    for i, call_id in enumerate(poll_ids):
        ran = model.result_in_next_request(call_id)
        assert not ran.is_error and f"done {i}%" in ran.text, ran.text
    assert (h.work / "polls").read_text().strip() == "7"
    asked = [i for event, i in order[14:] if event == "PreToolUse"]
    assert sorted(asked) == sorted(read_ids)
    first_result = next(n for n, (event, _) in enumerate(order) if n >= 14 and event[:4] == "Post")
    assert first_result == 14 + 7, order  # every copy was asked about before any result
    # The seven hooks run at once: which two are the 6th and 7th is the store's order.
    refused = "PreToolUse:Read hook error: " + render(
        DEFAULT_MESSAGES["duplicate"], "Read", "duplicate", 6, 6
    )
    results = {i: model.result_in_next_request(i) for i in read_ids}
    denied = [i for i in read_ids if results[i].is_error]
    assert len(denied) == 2 and all(results[i].text.startswith(refused) for i in denied)
    ran = [i for i in read_ids if i not in denied]
    assert all("the job is at step 3" in results[i].text for i in ran)
    # Results came back only for the five that ran; the breaker kept none of them (the
    # poll's results, one key, are all it has), and none is still awaited.
    assert sorted(i for event, i in order[21:] if event == "PostToolUse") == sorted(ran)
    state = Path(h.env["XDG_STATE_HOME"]) / "dsh-circuit-breaker" / "state.db"
    store = CircuitBreaker(Config(), state=f"sqlite:///{state}")
    try:
        kept = dict(store.store.agents())[outcome.session]
    finally:
        store.close()
    assert len(kept.results) == 1 and kept.awaiting == {}
    (entry,) = h.incident_lines()
    assert (entry["kind"], entry["tool"], entry["count"], entry["agent"]) == (
        "duplicate",
        "Read",
        6,
        outcome.session,
    )


# -- Kimi CLI ------------------------------------------------------------------------------


def kimi_child(body: dict[str, Any]) -> bool:
    """A request of the subagent: its first user message is the delegated task."""
    texts = [str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "user"]
    return bool(texts) and SUBAGENT_MARK in texts[0]


def test_kimi_a_subagent_shares_its_parents_key_and_its_task_resets_it(scratch: Any) -> None:
    # Kimi CLI 1.51.0 runs a subagent in its parent's session: its events carry the parent's
    # session_id and nothing naming it, and its task arrives as a UserPromptSubmit like a
    # typed prompt (the limits docs/kimi-cli.md states). Every copy in the window counts
    # here (resetOnNewCall off: the Agent call between is no new start), yet the parent's
    # four runs of the command count for nothing once the subagent starts; the subagent's
    # own loop is refused across Kimi's follow-up asking it for a longer summary; the
    # parent's next copy is refused too, the count being the subagent's.
    h = scratch("kimi-cli")
    h.configure({"resetOnNewCall": False})
    runs, refusal = runs_then_refusal(h.shell_tool, reset_on_new_call=False)
    side = h.work / "side.txt"
    loop = f"echo loop >> {side}"
    delegation = tool_call(
        "Agent", {"description": "loop task", "prompt": SUBAGENT_MARK, "subagent_type": "coder"}
    )
    parent = [*[h.shell(loop, f"Parent try {i}") for i in range(1, 5)], delegation]
    parent += [h.shell(loop, "Parent try 5"), "Parent: done."]
    child = [*[h.shell(loop, f"Child try {i}") for i in range(1, 5)], "Short."]
    child += [*[h.shell(loop, f"Child try {i}") for i in range(5, 9)], "Subagent: " + "x" * 300]

    def respond(body: dict[str, Any]) -> Any:
        queue = child if kimi_child(body) else parent
        return queue.pop(0) if queue else "Nothing more."

    with h.model([], after=respond) as model:
        outcome = h.run(model, "PARENT-TASK: loop, delegate the loop, loop again.")
    by_description = {u["input"].get("description"): u["id"] for u in model.tool_uses()}
    result = {r.call_id: r for r in model.tool_results()}
    kid = [result[by_description[f"Child try {i}"]].text for i in range(1, 9)]
    assert ["Circuit breaker" in text for text in kid] == [False] * runs + [True] * (8 - runs)
    assert all(text.startswith(h.refusal_prefix + refusal) for text in kid[runs:])
    assert result[by_description["Parent try 5"]].text.startswith(h.refusal_prefix + refusal)
    assert side_lines(side) == ["loop"] * (4 + runs)
    assert outcome.final == "Parent: done."
    incidents = h.incident_lines()
    assert [i["kind"] for i in incidents] == ["duplicate", "stop"]
    assert {i["agent"] for i in incidents} == {outcome.session}  # no subagent part


def test_kimi_its_own_guard_ends_the_turn_at_the_twelfth_identical_call(scratch: Any) -> None:
    # Kimi CLI's own repeat guard compares every argument, the description too: it appends
    # a reminder to the 3rd identical call's result and ends the turn after the 12th. Ours
    # refuses from the 7th; its reminders ride on our refusals, and its stop still comes.
    h = scratch("kimi-cli")
    runs, refusal = runs_then_refusal(h.shell_tool)
    side = h.work / "side.txt"
    same = h.shell(f"echo same >> {side}", "Append the marker")
    with h.model([*[dict(same) for _ in range(14)], "Never asked for."]) as model:
        outcome = h.run(model, "Append the marker.")
    calls = model.tool_uses()
    assert len(calls) == len(model.model_requests) == 12  # nothing asked after the 12th
    assert outcome.final is None
    assert side_lines(side) == ["same"] * runs
    results = [model.result_in_next_request(c["id"]).text for c in calls[:11]]
    reminded = ["<system-reminder>" in text for text in results]
    assert reminded == [False] * 2 + [True] * 9
    assert all(text.startswith(h.refusal_prefix + refusal) for text in results[runs:])
    assert "You are repeating the exact same tool call" in results[2]
    assert [i["kind"] for i in h.incident_lines()] == ["duplicate", "stop"]


def test_openhands_its_stuck_detector_ends_the_run_at_the_fourth_identical_round(
    scratch: Any,
) -> None:
    # OpenHands' StuckDetector, on in the CLI with no setting to turn it off, ends a run
    # after four identical rounds (the model's text before the call, the action, its
    # observation): before the breaker's 6th copy, so nothing is refused. (The shared
    # scenarios have the model word each attempt differently, which it never catches.)
    h = scratch("openhands-cli")
    side = h.work / "side.txt"
    same = tool_call(h.shell_tool, {"command": f"echo same >> {side}", "security_risk": "LOW"})
    with h.model([*[dict(same) for _ in range(8)], "Never asked for."]) as model:
        outcome = h.run(model, "Append the marker.")
    assert side_lines(side) == ["same"] * 4
    assert len(model.tool_uses()) == len(model.model_requests) == 4  # nothing after the 4th
    assert outcome.final is None
    assert h.incident_lines() == []
