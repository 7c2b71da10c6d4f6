"""The replay page: one self-contained HTML file (inline CSS and SVG, no scripts).

Each run gets a timeline: calls left to right (by time where the transcript has
timestamps, else by call number), each call drawn at the height of how many times that
identical call has been made so far in the run. Healthy work stays near the floor; a loop is a
ramp climbing past the dashed limit line, and every call the breaker would have denied
is a red cross. Lines mark the first denial, the first budget denial and the stop; the calls
after the stop, which a stop saves, are shaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from html import escape
from typing import Any

from ..core.display import plural
from .analysis import Point
from .options import seconds

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#9c755f",
    "#bab0ac",
    "#ff9da7",
    "#86bcb6",
)
DENIED = "#d62728"
W, H = 920, 200
LEFT, RIGHT, TOP, BOTTOM = 46, 14, 14, 34


@dataclass
class RunPicture:
    row: dict[str, Any]
    points: list[Point]
    cut: bool
    start: float | None
    limit: int
    first_denial: int | None
    tools: dict[str, int] = field(default_factory=dict)
    first_budget: int | None = None
    stop: int | None = None


def timeline_svg(pic: RunPicture) -> str:
    points = pic.points
    if not points:
        return '<p class="empty">no tool calls</p>'
    timed = pic.start is not None and all(p[1] is not None for p in points)
    if timed:
        assert pic.start is not None
        xs = [float(p[1]) - pic.start for p in points]  # type: ignore[arg-type]
        if max(xs) <= 0:
            timed = False
    if not timed:
        xs = [float(p[0]) for p in points]
    # Time from the run's start, so the axis starts at 0 (call numbers at the first call).
    x0, x1 = (0.0 if timed else min(xs)), max(xs)
    span = (x1 - x0) or 1.0
    top = max(max(p[2] for p in points), pic.limit + 1)
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x0) / span * plot_w

    def sy(y: float) -> float:
        return TOP + plot_h - (y - 1) / max(top - 1, 1) * plot_h

    order = {tool: i for i, tool in enumerate(sorted(pic.tools, key=lambda t: -pic.tools[t]))}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        f'role="img" aria-label="timeline of {escape(run_name(pic.row)[1])}">',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="plot"/>',
    ]
    # Axes: y = copies of this identical call so far, x = time or call number.
    bottom = TOP + plot_h
    for value in _ticks(1, top):
        y = sy(value)
        out.append(_line(LEFT - 4, y, LEFT, y, "axis"))
        out.append(_text(LEFT - 6, y + 3, str(value), "tick", "end"))
    for value in _ticks(x0, x1, steps=TIME_STEPS if timed else COUNT_STEPS):
        x = sx(value)
        out.append(_line(x, bottom, x, bottom + 4, "axis"))
        out.append(_text(x, bottom + 15, seconds(value) if timed else f"#{int(value)}", "tick"))
    axis = "time since the run started" if timed else "call number"
    out.append(_text(LEFT + plot_w / 2, H - 3, axis, "label"))
    middle = TOP + plot_h / 2
    out.append(
        f'<text x="11" y="{middle}" class="label" text-anchor="middle" '
        f'transform="rotate(-90 11 {middle})">times this call was made</text>'
    )
    if pic.limit < top:
        y = sy(pic.limit)
        out.append(_line(LEFT, y, LEFT + plot_w, y, "limit"))
        out.append(_text(LEFT + plot_w - 2, y - 3, f"duplicateLimit {pic.limit}", "tick", "end"))
    at = {p[0]: sx(x) for x, p in zip(xs, points, strict=True)}
    if pic.stop in at:
        x = at[pic.stop]
        out.append(
            f'<rect x="{x:.1f}" y="{TOP}" width="{LEFT + plot_w - x:.1f}" height="{plot_h}" '
            'class="saved"/>'
        )
    marks = (
        (pic.first_denial, "first", "first denial"),
        (pic.first_budget, "budget", "first budget denial"),
        (pic.stop, "stop", "stop"),
    )
    for row, (number, cls, name) in enumerate(marks):
        if number in at:
            x = at[number]
            out.append(_line(x, TOP, x, bottom, cls))
            # One row per mark, so close marks never overlap; a label that would run
            # past the plot's right edge is drawn to the left of its line.
            y = TOP + 10 + 12 * row
            text = f"{name}: call #{number}"
            if x + 3 + LABEL_CHAR * len(text) > LEFT + plot_w:
                out.append(_text(x - 3, y, text, "tick", "end"))
            else:
                out.append(_text(x + 3, y, text, "tick", "start"))
    titles = len(points) <= 3000
    for x, (number, _, copies, tool, denied, name) in zip(xs, points, strict=True):
        cx, cy = sx(x), sy(copies)
        after = ' opacity=".45"' if pic.stop is not None and number > pic.stop else ""
        tip = ""
        if titles:
            verdict = " DENIED" if denied else ""
            verdict += " STOP" if number == pic.stop else " (after the stop)" if after else ""
            # The call as the tables name it: with --show-args, its arguments' preview.
            tip = f"<title>#{number} {escape(name)} (made {copies}x){verdict}</title>"
        if denied:
            d = 3.2
            cross = f"M{cx - d:.1f} {cy - d:.1f}L{cx + d:.1f} {cy + d:.1f}"
            cross += f"M{cx - d:.1f} {cy + d:.1f}L{cx + d:.1f} {cy - d:.1f}"
            out.append(f'<path d="{cross}" class="denied"{after}>{tip}</path>')
        else:
            color = PALETTE[order.get(tool, 0) % len(PALETTE)]
            out.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.6" fill="{color}"{after}>{tip}</circle>'
            )
    out.append("</svg>")
    legend = []
    for tool, i in sorted(order.items(), key=lambda kv: kv[1])[: len(PALETTE)]:
        dot = f'<i style="background:{PALETTE[i % len(PALETTE)]}"></i>'
        legend.append(f"<span>{dot}{escape(tool)} ({pic.tools[tool]})</span>")
    if any(p[4] for p in points):
        legend.append(f'<span><b style="color:{DENIED}">&#x2715;</b> denied</span>')
    if pic.stop in at:
        legend.append('<span><i class="saved"></i>after the stop (saved)</span>')
    note = '<p class="note">timeline cut after its first calls</p>' if pic.cut else ""
    return "".join(out) + f'<div class="legend">{"".join(legend)}</div>{note}'


LABEL_CHAR = 5.6  # px per character of a 10px tick label, a little generous


COUNT_STEPS = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 20000, 50000)
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400)


def _line(x1: float, y1: float, x2: float, y2: float, cls: str) -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" class="{cls}"/>'


def _text(x: float, y: float, text: str, cls: str, anchor: str = "middle") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" class="{cls}" text-anchor="{anchor}">{escape(text)}</text>'
    )


def _ticks(lo: float, hi: float, count: int = 6, steps: tuple[int, ...] = COUNT_STEPS) -> list[int]:
    if hi <= lo:
        return [int(lo)]
    raw = (hi - lo) / count
    step = 1
    for base in steps:
        step = base
        if base >= raw:
            break
    first = int(lo // step * step)
    if first < lo:
        first += step
    return list(range(first, int(hi) + 1, step)) or [int(lo)]


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:960px;
color:#222}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 4px}
.sub{color:#666;margin:0 0 16px} table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:3px 8px;border-bottom:1px solid #e4e4e4;text-align:right}
th:first-child,td:first-child{text-align:left} tr.hit td{background:#fff3f2}
.facts{color:#444;margin:2px 0 6px} .plot{fill:#fafafa;stroke:#ddd}
.axis{stroke:#999} .tick{font-size:10px;fill:#666} .label{font-size:11px;fill:#444}
.limit{stroke:#d62728;stroke-dasharray:5 4;opacity:.7} .first{stroke:#d62728;opacity:.5}
.budget{stroke:#f28e2b;opacity:.8} .stop{stroke:#000;stroke-width:1.5;opacity:.7}
.saved{fill:#d62728;opacity:.07} .legend i.saved{border-radius:0;opacity:.3;background:#d62728}
.denied{stroke:#d62728;stroke-width:1.6;fill:none}
.legend{font-size:12px;color:#444;margin:2px 0 0 46px} .legend span{margin-right:14px}
.legend i{display:inline-block;width:9px;height:9px;border-radius:50%;margin-right:4px}
details{margin-top:28px} summary{cursor:pointer;font-weight:600}
.note,.empty{color:#888;font-size:12px} .cfg{font-family:ui-monospace,monospace;font-size:12px}
p.file{color:#666;font-size:12px;margin:28px 0 -20px;font-family:ui-monospace,monospace}
tr.file td{color:#666;font-size:12px;font-family:ui-monospace,monospace;padding-top:8px}
"""


def page(
    title: str,
    config: str,
    totals: dict[str, Any],
    rows: list[dict[str, Any]],
    rows_left_out: int,
    pictures: list[RunPicture],
    pictures_left_out: int,
) -> str:
    """The whole page: the totals, the runs with a denial (most calls denied first) with
    their timelines, then the runs without one, folded away, and a table of every run.
    `config` is the config as `options.config_text` writes it."""
    denied_runs = totals.get("runs_with_denial", 0)
    stopped = totals.get("runs_stopped", 0)
    stops = (
        f"; {plural(stopped, 'run')} stopped, saving the "
        f"{plural(totals['stop_calls_saved'], 'call')} made after the stop"
        f"{_saved(totals.get('stop_time_saved_s'), ' and')}"
        if stopped
        else ""
    )
    head = (
        f"<h1>{escape(title)}</h1>"
        f'<p class="sub">{plural(totals["runs"], "run")}, '
        f"{plural(totals['calls'], 'tool call')}; "
        f"{plural(denied_runs, 'run')} would have had a call denied, "
        f"{plural(totals['denied'], 'call')} denied in all"
        f"{_saved(totals.get('time_saved_s'))}{stops}."
        f'<br><span class="cfg">{escape(config)}</span></p>'
        f'<p class="note">{SAVED_NOTE}</p>'
    )
    hits = sorted((row for row in rows if row.get("first_denial")), key=most_denied)
    anchors = {id(p.row): f"run-{i}" for i, p in enumerate(pictures, start=1)}
    table = []
    if hits:
        table.append("<h2>Runs with a denial, most calls denied first</h2>" + _table(hits, anchors))
    hit_pictures = sorted((p for p in pictures if p.row.get("first_denial")), key=_row_of)
    quiet = _sections([p for p in pictures if not p.row.get("first_denial")], anchors)
    sections = _sections(hit_pictures, anchors)
    if quiet:
        sections.append(
            f"<details><summary>{plural(len(quiet), 'run')} with nothing denied</summary>"
            f"{''.join(quiet)}</details>"
        )
    if pictures_left_out:
        sections.append(
            f'<p class="note">{plural(pictures_left_out, "more run")} without a picture.</p>'
        )
    more = (
        f'<p class="note">{plural(rows_left_out, "more run")} not listed (see --json).</p>'
        if rows_left_out
        else ""
    )
    sections.append(
        f"<details><summary>All {plural(len(rows), 'run')}</summary>"
        f"{_table(rows, anchors)}{more}</details>"
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        f"{head}{''.join(table)}{''.join(sections)}</body></html>\n"
    )


SAVED_NOTE = (
    "Two savings, counted apart: a <b>denied</b> call saves the time until the agent's "
    "next call (the tool would not have run; over a loop, the loop's remaining time); "
    "a <b>stop</b> saves the calls the agent made after it and the time from the stop "
    "to its last call. The first is there with the stop off; the second adds to it."
)


def most_denied(row: dict[str, Any]) -> tuple[int, str, str]:
    """The order of runs with a denial: most calls denied first, then by name."""
    return -row["denied"], row["run"], str(row.get("agent", ""))


def _row_of(pic: RunPicture) -> tuple[int, str, str]:
    return most_denied(pic.row)


def run_name(row: dict[str, Any]) -> tuple[str, str]:
    """(file, name): a run of a file that holds several (`results.json task 10 trial 0`) is
    named by what tells it apart (`task 10 trial 0`), its file said once above it; a run
    that is a whole file keeps the file's name (file "")."""
    file = os.path.basename(str(row.get("source") or ""))
    label = str(row["run"])
    if file and label.startswith(file + " "):
        return file, label[len(file) + 1 :]
    return "", label


def _sections(pictures: list[RunPicture], anchors: dict[int, str]) -> list[str]:
    out, last = [], ""
    for pic in pictures:
        file, _ = run_name(pic.row)
        if file and file != last:
            out.append(f'<p class="file">runs in {escape(file)}</p>')
        last = file
        out.append(_section(pic, anchors))
    return out


def _section(pic: RunPicture, anchors: dict[int, str]) -> str:
    row = pic.row
    first = row.get("first_denial")
    facts = f"{plural(row['calls'], 'call')}, {row['distinct']} distinct"
    if row.get("duration_s") is not None:
        facts += f", {seconds(row['duration_s'])}"
    if first:
        facts += (
            f"; first denial at call #{first['call']} ({escape(first['kind'])}: "
            f"{escape(first['which'])}), {plural(row['denied'], 'call')} denied"
            f"{_saved(row.get('time_saved_s'))}"
        )
    else:
        facts += "; nothing denied"
    budget, stop = row.get("first_budget"), row.get("stop")
    if budget:
        facts += f"; first budget denial at call #{budget['call']} ({escape(budget['which'])})"
    if stop:
        facts += (
            f"; stopped at call #{stop['call']}, saving the "
            f"{plural(stop['calls_saved'], 'call')} made after it"
            f"{_saved(stop['time_saved_s'], ' and')}"
        )
    heading = f'<h2 id="{anchors[id(row)]}">{escape(run_name(row)[1])}{_agent(row)}</h2>'
    return f'{heading}<p class="facts">{facts}</p>{timeline_svg(pic)}'


def _table(rows: list[dict[str, Any]], anchors: dict[int, str]) -> str:
    """The runs, each name linking to its chart (a run without one is plain text)."""
    out = [
        "<table><tr><th>run</th><th>calls</th><th>denied</th><th>first denial</th>"
        "<th>kind</th><th>time saved</th><th>stop</th><th>calls after it</th>"
        "<th>their time</th></tr>"
    ]
    last = ""
    for row in rows:
        first, stop = row.get("first_denial"), row.get("stop")
        cls = ' class="hit"' if first else ""
        file, name = run_name(row)
        if file and file != last:
            out.append(f'<tr class="file"><td colspan="9">{escape(file)}</td></tr>')
        last = file
        name = escape(name)
        if id(row) in anchors:
            name = f'<a href="#{anchors[id(row)]}">{name}</a>'
        out.append(
            f"<tr{cls}><td>{name}{_agent(row)}</td><td>{row['calls']}</td>"
            f"<td>{row['denied']}</td><td>{'#' + str(first['call']) if first else '-'}</td>"
            f"<td>{escape(first['kind']) if first else '-'}</td>"
            f"<td>{seconds(row.get('time_saved_s'))}</td>"
            f"<td>{'#' + str(stop['call']) if stop else '-'}</td>"
            f"<td>{stop['calls_saved'] if stop else '-'}</td>"
            f"<td>{seconds(stop['time_saved_s']) if stop else '-'}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def _agent(row: dict[str, Any]) -> str:
    agent = str(row.get("agent", ""))
    if "/" in agent and agent.rsplit("/", 1)[-1] not in row["run"]:
        return f" <small>[{escape(agent.rsplit('/', 1)[-1])}]</small>"
    return ""


def _saved(value: float | None, lead: str = ", saving") -> str:
    return "" if not value else f"{lead} {seconds(value)}"
