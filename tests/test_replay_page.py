"""The replay page's chart and table (transcripts/html.py), from pictures built by hand:
the time axis starts at 0, a mark's label near the right edge stays inside the plot, each
table row links to its run's chart, and the two kinds of saving are explained; runs of one
file are named by what tells them apart, the file said once; a point's tooltip names the
call as the tables do (with --show-args, its arguments' preview)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dsh_circuit_breaker.cli import main
from dsh_circuit_breaker.transcripts.html import RIGHT, RunPicture, W, page, timeline_svg


def picture(n: int = 40, *, start: float = 100.0, first: float = 110.0) -> RunPicture:
    row = {
        "run": "session-a",
        "calls": n,
        "distinct": 2,
        "denied": 3,
        "first_denial": {"call": n - 3, "kind": "duplicate", "which": "Bash"},
        "stop": {"call": n - 1, "calls_saved": 1, "time_saved_s": 1.0},
        "time_saved_s": 3.0,
    }
    name = "Bash(command) #16a524b6"
    points = [(i, first + i, min(i, 9), "Bash", int(i >= n - 3), name) for i in range(1, n + 1)]
    return RunPicture(row, points, False, start, 6, n - 3, {"Bash": n}, stop=n - 1)


def test_the_time_axis_starts_at_zero() -> None:
    svg = timeline_svg(picture(start=100.0, first=110.0))  # the first call 11 s in
    ticks = re.findall(
        r'<text x="[\d.]+" y="[\d.]+" class="tick" text-anchor="middle">([^<]+)', svg
    )
    assert ticks[0] == "0.0s", ticks  # was the first call's time, 11.0s


def test_close_marks_near_the_right_edge_keep_their_labels_inside() -> None:
    svg = timeline_svg(picture())
    for name in ("first denial: call #37", "stop: call #39"):
        (found,) = re.findall(
            rf'<text x="([\d.]+)" y="([\d.]+)" class="tick" text-anchor="(\w+)">{name}<', svg
        )
        x, _, anchor = found
        assert anchor == "end" and float(x) <= W - RIGHT, found  # was "start", off the plot
    ys = re.findall(r'y="([\d.]+)" class="tick" text-anchor="end">(?:first denial|stop):', svg)
    assert len(set(ys)) == 2  # one row each, so they never overlap


def test_table_rows_link_to_their_charts_and_the_savings_are_explained() -> None:
    pic = picture()
    totals = {"runs": 1, "calls": 40, "runs_with_denial": 1, "denied": 3, "time_saved_s": 3.0}
    html = page("replay", "config", totals, [pic.row], 0, [pic], 0)
    assert '<h2 id="run-1">session-a' in html
    assert html.count('<a href="#run-1">session-a</a>') == 2  # the denied runs' and all runs'
    assert "Two savings, counted apart" in html


def tau_bench_results(path: Path, tasks: int) -> Path:
    """A tau-bench results file: each task's agent calls one tool 9 times in a row."""

    def record(task: int) -> dict[str, object]:
        call = {"function": {"name": "transfer", "arguments": json.dumps({"to": f"desk {task}"})}}
        traj = [{"role": "assistant", "tool_calls": [dict(call, id=f"c{i}")]} for i in range(9)]
        return {"task_id": task, "trial": 0, "traj": traj}

    path.write_text(json.dumps([record(task) for task in range(tasks)]))
    return path


def test_runs_of_one_file_name_the_file_once_and_tooltips_show_the_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tau_bench_results(tmp_path / "gpt-4o-airline-results.json", 3)
    out = tmp_path / "replay.html"
    assert main(["replay", str(results), "--html", str(out), "--show-args"]) == 0
    html = out.read_text()
    # In the page's title (<title> and <h1>), then once above the charts, once in the
    # table of denied runs, once in the table of all (it was in every run's heading, table
    # cells and chart label: 2 + 3 runs x 4).
    assert html.count(results.name) == 5, html.count(results.name)
    assert re.findall(r'<h2 id="run-\d+">([^<]+)</h2>', html) == [
        "task 0 trial 0",
        "task 1 trial 0",
        "task 2 trial 0",
    ]
    assert '<a href="#run-1">task 0 trial 0</a>' in html
    tips = re.findall(r"<title>([^<]+)</title>", html)[1:]
    # --show-args: the call's arguments in its tooltip (was only the tool's name)
    assert tips[6].startswith("#7 transfer {&quot;to&quot;: &quot;desk 0&quot;} #"), tips[6]
    assert tips[6].endswith("(made 7x) DENIED"), tips[6]
    capsys.readouterr()
    assert main(["replay", str(results), "--html", str(out)]) == 0
    tip = re.findall(r"<title>([^<]+)</title>", out.read_text())[7]
    assert re.fullmatch(r"#7 transfer\(to\) #[0-9a-f]{8} \(made 7x\) DENIED", tip), tip
    assert "desk" not in out.read_text()  # no argument content without --show-args
