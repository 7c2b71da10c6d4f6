"""`dsh-circuit-breaker replay PATH...`: every run through the real breaker, as if it had
been installed: where it would first have denied a call, how many calls it would have
denied, and the calls and time that would have saved; where a budget would first have
refused a call, and where a stop would have ended the agent, with the calls it went on to
make after that and their time."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from typing import Any

from ..core.config import Config
from ..core.display import plural
from .analysis import AgentRun, Denials, StopTotals
from .command import Command, runner
from .html import RunPicture, page
from .model import Problems
from .options import (
    ReplayConfig,
    add_config_arguments,
    add_input_arguments,
    config_text,
    iso,
    seconds,
    skipped,
    stop_text,
    time_text,
)

HTML_ROWS = 2000  # table rows on the page
HTML_PICTURES = 120  # timelines on the page: runs with a denial first


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    add_config_arguments(parser)
    parser.add_argument(
        "--html", metavar="OUT", help="also write a self-contained HTML page with timelines"
    )


class ReplayTotals:
    def __init__(self) -> None:
        self.runs = 0
        self.calls = 0
        self.runs_with_denial = 0
        self.denied = 0
        self.kinds: Counter[str] = Counter()
        self.time_saved = 0.0
        self.timed = 0
        self.stops = StopTotals()

    def add(self, row: dict[str, Any], track: Denials) -> None:
        self.stops.add(track)
        self.runs += 1
        self.calls += row["calls"]
        if row["first_denial"]:
            self.runs_with_denial += 1
        self.denied += row["denied"]
        self.kinds.update(row["denied_by_kind"])
        if row["time_saved_s"] is not None:
            self.time_saved += row["time_saved_s"]
            self.timed += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "calls": self.calls,
            "runs_with_denial": self.runs_with_denial,
            "denied": self.denied,
            "denied_by_kind": dict(self.kinds),
            "calls_saved": self.denied,
            "time_saved_s": round(self.time_saved, 3) if self.timed else None,
            **self.stops.to_json(),
        }


def replay_row(run: AgentRun) -> dict[str, Any]:
    """A run's figures and what the breaker did to it, times as in the other reports."""
    row = run.to_json()
    row.update(run.tracks[0].to_json())
    for name in ("first_denial", "first_budget", "stop"):
        point = row[name]
        if point is not None:
            point = dict(point)
            point["time"] = iso(point["time"])
            if point["offset_s"] is not None:
                point["offset_s"] = round(point["offset_s"], 3)
            row[name] = point
    return row


COLUMNS = [
    ("RUN", 44, "<"),
    ("CALLS", 6, ">"),
    ("DENIED", 6, ">"),
    ("SAVED", 7, ">"),
    ("STOP", 6, ">"),
    ("AFTER STOP", 11, ">"),
    ("FIRST DENIAL", 70, "<"),
]
BUDGET_COLUMN = ("BUDGET", 6, ">")  # shown when a config has toolLimits


class Replay(Command):
    name = "replay"
    columns = COLUMNS
    budget_column = BUDGET_COLUMN

    def __init__(self, args: argparse.Namespace, configs: ReplayConfig) -> None:
        super().__init__(args, configs)
        self.totals = ReplayTotals()
        self.html = _HtmlCollector(self.config) if args.html else None
        self.keep_timeline = bool(self.html)
        self.written = True

    def ready(self) -> bool:
        return not self.args.html or _writable(self.args.html)

    def add(self, run: AgentRun) -> dict[str, Any]:
        row = replay_row(run)
        self.totals.add(row, run.tracks[0])
        if self.html is not None:
            self.html.add(run, row)
        return row

    def cells(self, row: dict[str, Any]) -> list[str]:
        return _cells(row, self.configs.budgets)

    def finish(self) -> int:
        if self.html is not None:
            self.written = self.html.write(self.args.html, self.args.paths, self.totals.to_json())
        return 0 if self.written else 1

    def tail(self) -> dict[str, Any]:
        return {"total": self.totals.to_json()}

    def summary(self, problems: Problems) -> None:
        summary = self.totals.to_json()
        print(
            f"\n{plural(summary['runs'], 'run')}, {plural(summary['calls'], 'tool call')}. With "
            f"{config_text(self.config)}: {plural(summary['runs_with_denial'], 'run')} "
            f"would have had a call denied; {plural(summary['denied'], 'call')} denied "
            f"({_kinds(summary['denied_by_kind'])}), "
            f"saving {plural(summary['calls_saved'], 'call')}"
            f"{time_text(summary['time_saved_s'])}."
        )
        print(stop_text(self.config, summary))
        if problems.count:
            print(f"{skipped(problems.count)} (listed on stderr)")
        if self.args.html and self.written:
            print(f"page written to {self.args.html}")


run = runner(Replay)


def _writable(path: str) -> bool:
    """Whether the page can be written, asked before the work rather than after it."""
    try:
        if os.path.exists(path) and not os.path.isfile(path):  # opening a FIFO would block
            raise OSError(0, "not a regular file")
        with open(path, "a", encoding="utf-8"):
            return True
    except OSError as exc:
        _cannot_write(path, exc)
        return False


def _cannot_write(path: str, exc: OSError) -> None:
    print(f"dsh-circuit-breaker: cannot write --html {path}: {exc.strerror}", file=sys.stderr)


def _cells(row: dict[str, Any], budgets: bool) -> list[str]:
    first = row["first_denial"]
    text = "-"
    if first:
        when = f" at +{seconds(first['offset_s'])}" if first["offset_s"] is not None else ""
        text = f"#{first['call']}{when} {first['kind']}: {first['which']}"
    label = row["run"]
    agent = str(row["agent"])
    if "/" in agent and agent.rsplit("/", 1)[-1] not in label:
        label = f"{label} [{agent.rsplit('/', 1)[-1]}]"
    stop, budget = row["stop"], row["first_budget"]
    cells = [label, str(row["calls"]), str(row["denied"]), seconds(row["time_saved_s"])]
    cells += [f"#{stop['call']}", after_stop(stop)] if stop else ["-", "-"]
    if budgets:
        cells.append(f"#{budget['call']}" if budget else "-")
    return [*cells, text]


def after_stop(stop: dict[str, Any]) -> str:
    """`85 / 55.2s`: the calls made after a stop and their time (`-` without timestamps)."""
    return f"{stop['calls_saved']} / {seconds(stop['time_saved_s'])}"


def _kinds(kinds: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none"


class _HtmlCollector:
    """Keeps what the page needs, bounded: a row per run (up to HTML_ROWS) and timelines
    for up to HTML_PICTURES runs, runs with a denial first."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.rows: list[dict[str, Any]] = []
        self.rows_left_out = 0
        self.hits: list[RunPicture] = []
        self.quiet: list[RunPicture] = []
        self.pictures_left_out = 0

    def add(self, run: AgentRun, row: dict[str, Any]) -> None:
        if len(self.rows) < HTML_ROWS:
            self.rows.append(row)
        else:
            self.rows_left_out += 1
        hit = row["first_denial"] is not None
        if hit and len(self.hits) < HTML_PICTURES:
            self.hits.append(self._picture(run, row))
            if len(self.hits) + len(self.quiet) > HTML_PICTURES:
                self.quiet.pop()
                self.pictures_left_out += 1
        elif not hit and len(self.hits) + len(self.quiet) < HTML_PICTURES:
            self.quiet.append(self._picture(run, row))
        else:
            self.pictures_left_out += 1

    def _picture(self, run: AgentRun, row: dict[str, Any]) -> RunPicture:
        tools: Counter[str] = Counter(p[3] for p in run.timeline)
        track = run.tracks[0]
        return RunPicture(
            row=row,
            points=run.timeline,
            cut=run.timeline_cut,
            start=run.transcript.start,
            limit=self.config.duplicate_limit,
            first_denial=None if track.first is None else track.first["call"],
            tools=dict(tools),
            first_budget=None if track.budget is None else track.budget["call"],
            stop=None if track.stop is None else track.stop["call"],
        )

    def write(self, path: str, inputs: list[str], totals: dict[str, Any]) -> bool:
        names = ", ".join(os.path.basename(os.path.normpath(p)) or p for p in inputs)
        text = page(
            f"Circuit breaker replay: {names}",
            config_text(self.config),
            totals,
            self.rows,
            self.rows_left_out,
            self.hits + self.quiet,
            self.pictures_left_out,
        )
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:  # checked before the work; it can still change meanwhile
            print(
                f"dsh-circuit-breaker: cannot write --html {path}: {exc.strerror}", file=sys.stderr
            )
            return False
        return True
