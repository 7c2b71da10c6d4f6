"""Acceptance on the calibration corpus (../shared/corpus, beside the repository).

What must hold (issue 5): with the defaults no healthy run is denied anything; every tau2
run that loops (`transfer_to_human_agents` / `update_reservation_flights` repeated back to
back until max_steps) is stopped within 7 calls of the loop's start; with
resetOnNewCall=false the original rule's false denials on the mini-swe-agent runs show.
The loops are found here from the raw JSON, independently of the readers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.cli import main

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
TAU2 = CORPUS / "tau2-bench" / "gpt-oss-120b_langchain_agent_airline.json"
LOOP_TOOLS = {"transfer_to_human_agents", "update_reservation_flights"}
# Measured on this corpus with resetOnNewCall=false (the original rule), other keys default.
ORIGINAL_RULE_MINI_SWE_FALSE_DENIALS = 17

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(list(args)) == 0
    out = capsys.readouterr().out
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.fixture(scope="module")
def tau2_loops() -> dict[str, tuple[int, int]]:
    """task id -> (first call number of the loop, its length), straight from the JSON."""
    loops = {}
    for sim in json.loads(TAU2.read_text())["simulations"]:
        calls = [
            (tc["name"], json.dumps(tc["arguments"], sort_keys=True))
            for m in sim["messages"]
            for tc in m.get("tool_calls") or ()
        ]
        if sim["termination_reason"] != "max_steps" or not calls:
            continue
        start = len(calls) - 1
        while start > 0 and calls[start - 1] == calls[-1]:
            start -= 1
        length = len(calls) - start
        if calls[-1][0] in LOOP_TOOLS and length >= 50:
            loops[sim["task_id"]] = (start + 1, length)
    return loops


def test_the_corpus_has_the_loops_the_readme_describes(tau2_loops: dict[str, Any]) -> None:
    # The README says "about 6"; this copy has 5 running until max_steps.
    assert sorted(tau2_loops) == ["10", "15", "27", "28", "47"]
    assert all(94 <= length <= 100 for _, length in tau2_loops.values())


def test_defaults_deny_no_healthy_run_and_stop_every_loop_within_7_calls(
    capsys: pytest.CaptureFixture[str], tau2_loops: dict[str, tuple[int, int]]
) -> None:
    report = run_json(capsys, "replay", str(CORPUS), "--json")
    runs = report["runs"]
    assert report["problems"]["count"] == 0
    assert report["total"]["runs"] == 353  # 3 DSH + 200 mini-swe-agent + 100 tau + 50 tau2

    denied = {r["run"]: r for r in runs if r["denied"]}
    # Healthy: no identical call repeated back to back 8 or more times. The runs that are
    # not healthy are the 5 max_steps loops and 2 shorter ones the agent left on its own
    # (task 30: one baggage update 15 times in a row; task 48: one transfer 8 times).
    looping = {r["run"] for r in runs if r["longest_streak"] and r["longest_streak"]["length"] >= 8}
    assert {r["meta"]["task_id"] for r in runs if r["run"] in looping} == {
        *tau2_loops,
        "30",
        "48",
    }
    assert set(denied) == looping, "a healthy run was denied, or a loop was not"
    healthy = [r for r in runs if r["run"] not in looping]
    assert len(healthy) == 346
    assert all(r["denied"] == 0 and r["first_denial"] is None for r in healthy)

    for row in runs:
        task = row.get("meta", {}).get("task_id")
        if row["format"] != "tau2" or task not in tau2_loops:
            continue
        start, length = tau2_loops[task]
        first = row["first_denial"]
        assert first["kind"] == "duplicate"
        assert first["tool"] in LOOP_TOOLS
        stopped_after = first["call"] - start + 1
        assert 1 <= stopped_after <= 7, (task, first, start)
        # every later repeat of the loop is denied too: the loop is over
        assert row["denied"] >= length - 6


def test_original_rule_false_denials_on_mini_swe_agent(capsys: pytest.CaptureFixture[str]) -> None:
    mini = str(CORPUS / "mini-swe-agent")
    report = run_json(capsys, "replay", mini, "--json", "--set", "resetOnNewCall=false")
    assert report["config"]["resetOnNewCall"] is False
    total = report["total"]
    assert total["runs"] == 200
    assert total["runs_with_denial"] == ORIGINAL_RULE_MINI_SWE_FALSE_DENIALS
    # they are all duplicate denials of a repeated command, never the cap
    assert set(total["denied_by_kind"]) == {"duplicate"}
    denied = [r for r in report["runs"] if r["denied"]]
    assert all(r["longest_streak"]["length"] <= 2 for r in denied)  # not loops

    again = run_json(capsys, "replay", mini, "--json")  # the default rule: none
    assert again["total"]["runs_with_denial"] == 0


def test_calibrate_reports_both_rules_on_the_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(
        capsys, "calibrate", str(CORPUS), "--json", "--limits", "6", "--windows", "200"
    )
    current, grid = report["current"], report["grid"]
    assert current["config"] == {
        "duplicateLimit": 6,
        "window": 200,
        "resetOnNewCall": True,
        "maxCallsPerAgent": 300,
        "stopAfterDenials": 3,
        "toolLimits": {},
    }
    assert current["loops"] == current["loops_stopped"] == 7
    assert current["stop_after_max"] == 7
    assert current["non_loop_runs_denied"] == 0
    [original] = [g for g in grid if g["config"]["resetOnNewCall"] is False]
    assert original["config"]["duplicateLimit"] == 6
    assert original["by_format"]["mini-swe-agent"]["non_loop_denied"] == (
        ORIGINAL_RULE_MINI_SWE_FALSE_DENIALS
    )
    assert original["loops_stopped"] == 7


# stopAfterDenials (issue 14): what a stop after N refusals in a row would have saved on
# this corpus, measured through the real engine. N -> (runs stopped, calls saved), a call
# saved being one the agent made after the stop (each one a model turn). Every stopped
# run is a loop; N = 1 and 2 also stop tau2 task 48, whose agent left its loop by itself
# after two refusals. 3, the default, is the smallest N that stops only runs that kept on.
STOP_FIGURES = {1: (7, 460), 2: (7, 453), 3: (6, 447), 4: (6, 441), 5: (6, 435), 6: (6, 429)}


@pytest.fixture(scope="module")
def corpus_runs() -> list[tuple[str, Any, list[Any]]]:
    """(label, tau2 task id or None, calls) for every transcript, read once."""
    from dsh_circuit_breaker.transcripts.model import Problems
    from dsh_circuit_breaker.transcripts.readers import read_transcripts
    from dsh_circuit_breaker.transcripts.sources import walk

    problems = Problems()
    runs = [
        (t.label, t.meta.get("task_id") if t.format == "tau2" else None, list(t.calls()))
        for t in read_transcripts(walk([str(CORPUS)], problems), problems, None)
    ]
    assert problems.count == 0 and len(runs) == 353
    return runs


def stops(runs: list[tuple[str, Any, list[Any]]], config: Config) -> list[dict[str, Any]]:
    """Every agent the breaker would have stopped: where, and the calls made after it."""
    stopped = []
    for label, task, calls in runs:
        breaker = CircuitBreaker(config)
        made: dict[str, int] = {}
        at: dict[str, int] = {}
        for call in calls:
            made[call.agent] = made.get(call.agent, 0) + 1
            if call.agent not in at and breaker.check(call.agent, call.tool, call.arguments).stop:
                at[call.agent] = made[call.agent]
        for agent, number in at.items():
            stopped.append(
                {"run": label, "task": task, "at": number, "saved": made[agent] - number}
            )
    return stopped


@pytest.mark.parametrize("n", sorted(STOP_FIGURES))
def test_stop_figures_for_each_n(corpus_runs: list[Any], n: int) -> None:
    stopped = stops(corpus_runs, Config(stop_after_denials=n))
    assert (len(stopped), sum(s["saved"] for s in stopped)) == STOP_FIGURES[n]
    loops = {"10", "15", "27", "28", "30", "47"} | ({"48"} if n <= 2 else set())
    assert {s["task"] for s in stopped} == loops  # tau2 loops only: no healthy run


def test_the_default_stop_ends_every_loop_at_its_ninth_call(
    corpus_runs: list[Any], tau2_loops: dict[str, tuple[int, int]]
) -> None:
    assert Config().stop_after_denials == 3
    stopped = {s["task"]: s for s in stops(corpus_runs, Config())}
    for task, (start, length) in tau2_loops.items():
        # six identical calls ran, two were refused, the third refusal stops the agent
        assert stopped[task]["at"] - start + 1 == 9
        assert stopped[task]["saved"] == start + length - 1 - stopped[task]["at"]
    assert sum(s["saved"] for s in stopped.values()) == STOP_FIGURES[3][1]
