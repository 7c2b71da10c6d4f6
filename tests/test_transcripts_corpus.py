"""Acceptance on the calibration corpus (../shared/corpus, beside the repository).

What must hold (issue 5): with the defaults no healthy run is denied anything; every tau2
run that loops (`transfer_to_human_agents` / `update_reservation_flights` repeated back to
back until max_steps) is stopped within 7 calls of the loop's start; with
resetOnNewCall=false the original rule's false denials on the mini-swe-agent runs show.
The loops are found here from the raw JSON, independently of the readers.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.cli import main

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
TAU2 = CORPUS / "tau2-bench" / "gpt-oss-120b_langchain_agent_airline.json"
LOOP_TOOLS = {"transfer_to_human_agents", "update_reservation_flights"}
# Measured on this corpus with resetOnNewCall=false (the original rule: the sixth copy in the
# window refused), other keys default; 17 when the seventh was the one refused.
ORIGINAL_RULE_MINI_SWE_FALSE_DENIALS = 32

pytestmark = pytest.mark.usefixtures("corpus")  # a missing corpus fails under CI


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
        "resultProgress": True,
        "sameResultLimit": 0,
        "cycleRounds": 3,
        "toolLimits": {},
    }
    assert current["loops"] == current["loops_stopped"] == 7
    assert current["stop_after_max"] == 6  # the sixth identical call of each loop refused
    assert current["non_loop_runs_denied"] == 0
    [original] = [g for g in grid if g["config"]["resetOnNewCall"] is False]
    assert original["config"]["duplicateLimit"] == 6
    assert original["by_format"]["mini-swe-agent"]["non_loop_denied"] == (
        ORIGINAL_RULE_MINI_SWE_FALSE_DENIALS
    )
    assert original["loops_stopped"] == 7
    # The stop grid: every loop is one the agent kept on (task 48's transfer comes back three
    # times from the first refusal on), no N stops a run outside one, and 3 is the most
    # lenient N that ends all seven.
    by_stop = {g["config"]["stopAfterDenials"]: g for g in [current, *report["stop_grid"]]}
    assert all(by_stop[n]["non_loop_runs_stopped"] == 0 for n in range(1, 7))
    assert {n: by_stop[n]["loops_ended_by_stop"] for n in range(1, 7)} == {
        1: 7,
        2: 7,
        3: 7,
        4: 6,
        5: 6,
        6: 6,
    }
    assert all(by_stop[n]["loops_kept_on"] == 7 for n in range(1, 7))
    assert report["recommendation"][1].startswith(
        "Stop: keep the current config (stopAfterDenials=3): it ends 6 of 6 loops"
    )


# stopAfterDenials (issues 14, 32): what a stop after N refusals in a row would have saved on
# this corpus, measured through the real engine (no user-prompt resets here). N -> (runs
# stopped, calls saved), a call saved being one the agent made after the stop (each one a
# model turn). N <= 3 stop all seven loops, tau2 task 48 among them (five transfers ran,
# the 6th to 8th were refused, and its run made no call after the 8th: nothing saved).
# N = 1 also stops a run that is not a loop, tau2 task 9, at its 27th call (the sixth
# book_reservation since its last new call, with user turns between that the replay counts
# as resets). 3, the default, is the largest N that still ends every loop.
STOP_FIGURES = {1: (8, 467), 2: (7, 460), 3: (7, 453), 4: (6, 447), 5: (6, 441), 6: (6, 435)}


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
    loops = {"10", "15", "27", "28", "30", "47"} | ({"48"} if n <= 3 else set())
    # tau2 loops only, but for N = 1's task 9 (see STOP_FIGURES)
    assert {s["task"] for s in stopped} == loops | ({"9"} if n == 1 else set())


def test_the_default_stop_ends_every_loop_at_its_eighth_call(
    corpus_runs: list[Any], tau2_loops: dict[str, tuple[int, int]]
) -> None:
    assert Config().stop_after_denials == 3
    stopped = {s["task"]: s for s in stops(corpus_runs, Config())}
    for task, (start, length) in tau2_loops.items():
        # five identical calls ran, two were refused, the third refusal stops the agent
        assert stopped[task]["at"] - start + 1 == 8
        assert stopped[task]["saved"] == start + length - 1 - stopped[task]["at"]
    assert sum(s["saved"] for s in stopped.values()) == STOP_FIGURES[3][1]


# What the reports show of the stop (issue 14), checked against the raw JSON: with the
# defaults five identical calls run and three are refused, so a stop fires at the 8th call
# of a back-to-back streak, and saves every call the agent made after it, and the time from
# that call to its last one.
STREAK_TO_STOP = 6 - 1 + 3  # duplicateLimit - 1 (the copies that run) + stopAfterDenials


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


@pytest.fixture(scope="module")
def tau2_stops() -> dict[str, dict[str, Any]]:
    """task id -> where the default stop fires and what it saves, straight from the JSON:
    the 8th call of the run's longest back-to-back streak, if it reaches 8."""
    stops = {}
    for sim in json.loads(TAU2.read_text())["simulations"]:
        calls = [
            (tc["name"], json.dumps(tc["arguments"], sort_keys=True), m["timestamp"])
            for m in sim["messages"]
            for tc in m.get("tool_calls") or ()
        ]
        best, start = (0, 0), 0
        for i in range(len(calls)):
            if i and calls[i][:2] != calls[i - 1][:2]:
                start = i
            best = max(best, (i - start + 1, -start))
        length, first = best[0], -best[1]
        if length < STREAK_TO_STOP:
            continue
        at = first + STREAK_TO_STOP  # a call number: calls[at - 1] is the stopped call
        stops[sim["task_id"]] = {
            "call": at,
            "tool": calls[at - 1][0],
            "calls_saved": len(calls) - at,
            "time_saved_s": _stamp(calls[-1][2]) - _stamp(calls[at - 1][2]),
        }
    return stops


def test_replay_shows_each_stop_in_the_loops_and_what_it_saves(
    capsys: pytest.CaptureFixture[str],
    tau2_stops: dict[str, dict[str, Any]],
    tau2_loops: dict[str, tuple[int, int]],
) -> None:
    # the five max_steps loops, task 30's baggage update (15 in a row) and task 48's 8
    # transfers in a row, whose 8th is the third refusal
    assert sorted(tau2_stops) == sorted([*tau2_loops, "30", "48"])
    report = run_json(capsys, "replay", str(CORPUS), "--json")
    stopped = {r["meta"]["task_id"]: r for r in report["runs"] if r["stop"]}
    assert all(r["format"] == "tau2" for r in stopped.values())  # no healthy run is stopped
    assert sorted(stopped) == sorted(tau2_stops)
    for task, expected in tau2_stops.items():
        stop = stopped[task]["stop"]
        assert (stop["call"], stop["tool"], stop["kind"]) == (
            expected["call"],
            expected["tool"],
            "duplicate",
        ), task
        assert stop["calls_saved"] == expected["calls_saved"], task
        assert stop["time_saved_s"] == pytest.approx(expected["time_saved_s"], abs=0.002), task
    total = report["total"]
    assert total["runs_stopped"] == 7
    assert total["stop_calls_saved"] == sum(s["calls_saved"] for s in tau2_stops.values())
    assert total["stop_calls_saved"] == STOP_FIGURES[3][1] == 453
    assert total["stop_time_saved_s"] == pytest.approx(
        sum(s["time_saved_s"] for s in tau2_stops.values()), abs=0.01
    )
    assert total["runs_with_budget_denial"] == 0  # no toolLimits by default

    # analyze reports the same stops
    analyzed = run_json(capsys, "analyze", str(CORPUS), "--json")
    assert {k: analyzed["total"][k] for k in ("runs_stopped", "stop_calls_saved")} == {
        "runs_stopped": 7,
        "stop_calls_saved": 453,
    }
    assert analyzed["total"]["stop_time_saved_s"] == total["stop_time_saved_s"]
    assert [r["stop"] for r in analyzed["runs"]] == [r["stop"] for r in report["runs"]]


def test_replay_html_marks_the_stops(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "replay.html"
    assert main(["replay", str(TAU2), "--html", str(out_file)]) == 0
    capsys.readouterr()
    page = out_file.read_text()
    assert page.count('class="stop"/>') == 7  # one line per stopped run
    assert page.count('class="saved"/>') == 7  # and the shaded calls after it
    assert "stop: call #16" in page  # task 10: its loop starts at call 9
    assert "7 runs stopped, saving the 453 calls made after the stop" in page


def test_calibrate_stop_grid_on_the_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(
        capsys, "calibrate", str(CORPUS), "--json", "--limits", "6", "--windows", "200"
    )
    current = report["current"]
    assert (current["runs_stopped"], current["stop_calls_saved"]) == STOP_FIGURES[3]
    assert current["loops_ended_by_stop"] == 7
    assert current["stop_at_median"] == current["stop_at_max"] == STREAK_TO_STOP
    assert current["non_loop_runs_stopped"] == 0 and current["non_loop_runs_stopped_list"] == []
    by_n = {g["config"]["stopAfterDenials"]: g for g in report["stop_grid"]}
    assert sorted(by_n) == [1, 2, 4, 5, 6]  # --stop-after's default, the current 3 left out
    for n, entry in by_n.items():
        # calibrate resets at each user prompt, as the hooks do: task 9 is not stopped at N = 1
        expected = (7, STOP_FIGURES[1][1]) if n == 1 else STOP_FIGURES[n]
        assert (entry["runs_stopped"], entry["stop_calls_saved"]) == expected
        assert entry["non_loop_runs_stopped"] == 0
        assert entry["loops_kept_on"] == 7  # task 48 included: three refusals in its loop
        assert entry["loops_ended_by_stop"] == (7 if n <= 3 else 6)
        assert entry["stop_at_max"] == 5 + n


def test_a_budget_set_on_the_command_line_refuses_the_call_past_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # From the raw JSON: the 4th transfer_to_human_agents call of each run is the first one
    # a budget of 3 refuses (no transfer can be a duplicate denial before its 7th copy).
    fourth = {}
    for sim in json.loads(TAU2.read_text())["simulations"]:
        names = [tc["name"] for m in sim["messages"] for tc in m.get("tool_calls") or ()]
        numbers = [i for i, name in enumerate(names, start=1) if name == "transfer_to_human_agents"]
        if len(numbers) >= 4:
            fourth[sim["task_id"]] = numbers[3]
    assert len(fourth) >= 10

    budget = "toolLimits.transfer_to_human_agents=3"
    report = run_json(capsys, "replay", str(TAU2), "--json", "--set", budget)
    assert report["config"]["toolLimits"] == {"transfer_to_human_agents": 3}
    found = {r["meta"]["task_id"]: r["first_budget"] for r in report["runs"] if r["first_budget"]}
    assert {task: b["call"] for task, b in found.items()} == fourth
    assert all((b["kind"], b["count"], b["limit"]) == ("budget", 3, 3) for b in found.values())
    assert report["total"]["runs_with_budget_denial"] == len(fourth)
    # the JSON form of the same override gives the same report
    same = run_json(
        capsys, "replay", str(TAU2), "--json", "--set", 'toolLimits={"transfer_to_human_agents":3}'
    )
    assert same["runs"] == report["runs"]
