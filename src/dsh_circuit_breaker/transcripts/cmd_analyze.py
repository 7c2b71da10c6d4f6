"""`dsh-circuit-breaker analyze PATH...`: per run and in total, what the agents did, and
where the breaker (its defaults, or --config/--set) would have stopped them or refused a
call for a budget."""

from __future__ import annotations

import argparse
from typing import Any

from ..core.display import plural
from .analysis import AgentRun, StopTotals
from .cmd_replay import replay_row
from .command import Command, runner
from .model import Problems
from .options import (
    ReplayConfig,
    add_config_arguments,
    add_input_arguments,
    refuse_option,
    seconds,
    skipped,
    stop_text,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    add_config_arguments(parser)
    refuse_option(parser, "--html", "replay")


class Totals:
    def __init__(self) -> None:
        self.runs = 0
        self.calls = 0
        self.distinct = 0
        self.failed = 0
        self.duration = 0.0
        self.timed_runs = 0
        self.worst: dict[str, Any] | None = None
        self.streak: dict[str, Any] | None = None
        self.stops = StopTotals()

    def add(self, run: AgentRun) -> None:
        self.stops.add(run.tracks[0])
        self.runs += 1
        self.calls += run.calls
        self.distinct += len(run.counts)
        self.failed += run.failed
        if run.duration is not None:
            self.duration += run.duration
            self.timed_runs += 1
        worst = run.worst()
        if worst and (self.worst is None or worst[1] > self.worst["times"]):
            self.worst = {"run": run.transcript.label, "call": worst[0], "times": worst[1]}
        length, _, key = run.streak
        if key is not None and (self.streak is None or length > self.streak["length"]):
            self.streak = {"run": run.transcript.label, "call": run.names[key], "length": length}

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "calls": self.calls,
            "distinct": self.distinct,
            "failed": self.failed,
            "duration_s": round(self.duration, 3) if self.timed_runs else None,
            "runs_with_duration": self.timed_runs,
            "worst_repeat": self.worst,
            "longest_streak": self.streak,
            **self.stops.to_json(),
        }


COLUMNS = [
    ("RUN", 44, "<"),
    ("TIME", 7, ">"),
    ("CALLS", 6, ">"),
    ("DIST", 6, ">"),
    ("FAIL", 5, ">"),
    ("STREAK", 6, ">"),
    ("STOP", 6, ">"),
    ("WORST REPEAT", 60, "<"),
]
BUDGET_COLUMN = ("BUDGET", 6, ">")  # shown when the config has toolLimits


class Analyze(Command):
    name = "analyze"
    columns = COLUMNS
    budget_column = BUDGET_COLUMN

    def __init__(self, args: argparse.Namespace, configs: ReplayConfig) -> None:
        super().__init__(args, configs)
        self.totals = Totals()

    def add(self, run: AgentRun) -> AgentRun:
        self.totals.add(run)
        return run

    def json_row(self, row: AgentRun) -> dict[str, Any]:
        return row_json(row)

    def cells(self, row: AgentRun) -> list[str]:
        return row_cells(row, self.configs.budgets)

    def tail(self) -> dict[str, Any]:
        return {"total": self.totals.to_json()}

    def summary(self, problems: Problems) -> None:
        t = self.totals.to_json()
        print(
            f"\n{plural(t['runs'], 'run')}, {plural(t['calls'], 'tool call')} "
            f"({t['distinct']} distinct per run, summed), "
            f"{t['failed']} failed, total time {seconds(t['duration_s'])}"
        )
        if self.totals.worst:
            w = self.totals.worst
            print(f"worst repeat: {w['times']}x {w['call']} in {w['run']}")
        if self.totals.streak:
            s = self.totals.streak
            print(f"longest back-to-back run: {s['length']}x {s['call']} in {s['run']}")
        print(stop_text(self.config, t))
        if problems.count:
            print(f"{skipped(problems.count)} (listed on stderr)")


run = runner(Analyze)


def row_json(agent_run: AgentRun) -> dict[str, Any]:
    """The run's figures, and where the breaker would have refused a call for a budget and
    stopped the agent (as `replay` reports them)."""
    row = agent_run.to_json()
    breaker = replay_row(agent_run)
    row["first_budget"], row["stop"] = breaker["first_budget"], breaker["stop"]
    return row


def row_cells(agent_run: AgentRun, budgets: bool) -> list[str]:
    label = agent_run.transcript.label
    if agent_run.agent not in label and agent_run.agent != label and "/" in agent_run.agent:
        label = f"{label} [{agent_run.agent.rsplit('/', 1)[-1]}]"  # a subagent of this session
    worst = agent_run.worst()
    track = agent_run.tracks[0]
    cells = [
        label,
        seconds(agent_run.duration),
        str(agent_run.calls),
        str(len(agent_run.counts)),
        str(agent_run.failed),
        str(agent_run.streak[0]),
        "-" if track.stop is None else f"#{track.stop['call']}",
    ]
    if budgets:
        cells.append("-" if track.budget is None else f"#{track.budget['call']}")
    return [*cells, "-" if worst is None else f"{worst[1]}x {worst[0]}"]
