"""The replay page's chart and table (transcripts/html.py), from pictures built by hand:
the time axis starts at 0, a mark's label near the right edge stays inside the plot, each
table row links to its run's chart, and the two kinds of saving are explained."""

from __future__ import annotations

import re

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
    points = [(i, first + i, min(i, 9), "Bash", int(i >= n - 3)) for i in range(1, n + 1)]
    return RunPicture("session-a", row, points, False, start, 6, n - 3, {"Bash": n}, stop=n - 1)


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
