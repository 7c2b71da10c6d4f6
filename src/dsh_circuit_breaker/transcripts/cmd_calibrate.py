"""`dsh-circuit-breaker calibrate PATH...`: over many runs, the figures for choosing limits.

Every run is replayed through the real breaker once per config: the current one (from
--config/--set) and a small grid of duplicateLimit x window x resetOnNewCall. A run
*loops* when one identical call is repeated back to back at least --loop-streak times;
a loop is *stopped* when the breaker denies a call inside that streak. A denied run with
no such streak is listed as a possible false positive, for a person to look at.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..config import Config, ConfigError
from ..display import plural
from .analysis import AgentRun, runs_of
from .model import Problems
from .options import (
    add_config_arguments,
    add_input_arguments,
    config_or_exit,
    config_summary,
    inputs_or_exit,
    pipe_safe,
    refuse_option,
    seconds,
    skipped,
    transcripts,
)
from .output import JsonReport, Table
from .progress import Progress

LISTED = 200  # runs named per config in --json (false positives, loops)


def _ints(text: str) -> list[int]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated whole numbers, got {text!r}"
        ) from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected numbers of at least 1, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    add_config_arguments(parser)
    parser.add_argument(
        "--limits",
        type=_ints,
        default=[3, 4, 6, 8, 12],
        metavar="N,N",
        help="duplicateLimit values to try",
    )
    parser.add_argument(
        "--windows", type=_ints, default=[50, 200], metavar="N,N", help="window values to try"
    )
    parser.add_argument(
        "--loop-streak",
        type=int,
        default=8,
        metavar="N",
        help="a run loops when one identical call runs N times back to back (default 8)",
    )
    parser.add_argument(
        "--runs", action="store_true", help="with --json: also list every run's figures"
    )
    refuse_option(parser, "--html", "replay")


@dataclass
class Outcome:
    """What one config did over all runs."""

    config: Config
    runs: int = 0
    runs_with_denial: int = 0
    denied: int = 0
    time_saved: float = 0.0
    loops: int = 0
    loops_stopped: int = 0
    stop_after: Counter[int] = field(default_factory=Counter)  # calls from a loop's start
    loop_calls_saved: int = 0
    non_loop_denied: int = 0
    by_format: dict[str, Counter[str]] = field(default_factory=dict)
    non_loop_runs: list[dict[str, Any]] = field(default_factory=list)
    loop_runs: list[dict[str, Any]] = field(default_factory=list)

    def add(self, run: AgentRun, index: int, loop: tuple[int, int] | None) -> None:
        track = run.tracks[index]
        fmt = self.by_format.setdefault(run.transcript.format, Counter())
        self.runs += 1
        fmt["runs"] += 1
        self.denied += track.denied
        self.time_saved += track.time_saved
        if track.first is not None:
            self.runs_with_denial += 1
            fmt["runs_with_denial"] += 1
        if loop is not None:
            self.loops += 1
            fmt["loops"] += 1
            stopped = track.first_in(*loop)
            entry: dict[str, Any] = {
                "run": run.transcript.label,
                "agent": run.agent,
                "loop_first_call": loop[0],
                "loop_length": loop[1] - loop[0] + 1,
                "loop_call": run.names[run.streak[2]] if run.streak[2] else None,
                "stopped_at_call": stopped,
                "stopped_after": None if stopped is None else stopped - loop[0] + 1,
            }
            if stopped is not None:
                self.loops_stopped += 1
                fmt["loops_stopped"] += 1
                self.stop_after[stopped - loop[0] + 1] += 1
                self.loop_calls_saved += loop[1] - stopped + 1
            if len(self.loop_runs) < LISTED:
                self.loop_runs.append(entry)
        elif track.first is not None:
            self.non_loop_denied += 1
            fmt["non_loop_denied"] += 1
            if len(self.non_loop_runs) < LISTED:
                first = track.first
                self.non_loop_runs.append(
                    {
                        "run": run.transcript.label,
                        "agent": run.agent,
                        "format": run.transcript.format,
                        "first_denial_call": first["call"],
                        "which": first["which"],
                        "kind": first["kind"],
                        "denied": track.denied,
                    }
                )

    def median_stop(self) -> int | None:
        total = sum(self.stop_after.values())
        if not total:
            return None
        seen = 0
        for after in sorted(self.stop_after):
            seen += self.stop_after[after]
            if seen * 2 >= total:
                return after
        return None

    def to_json(self, detail: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "config": config_summary(self.config),
            "runs": self.runs,
            "runs_with_denial": self.runs_with_denial,
            "denied": self.denied,
            "calls_saved": self.denied,
            "time_saved_s": round(self.time_saved, 3),
            "loops": self.loops,
            "loops_stopped": self.loops_stopped,
            "stop_after_median": self.median_stop(),
            "stop_after_max": max(self.stop_after) if self.stop_after else None,
            "loop_calls_saved": self.loop_calls_saved,
            "non_loop_runs_denied": self.non_loop_denied,
            "by_format": {k: dict(v) for k, v in sorted(self.by_format.items())},
        }
        if detail:
            out["loop_runs"] = self.loop_runs
            out["non_loop_runs_denied_list"] = self.non_loop_runs
        return out


def grid(current: Config, limits: list[int], windows: list[int]) -> list[Config]:
    configs = [current]
    seen = {tuple(config_summary(current).values())}
    for reset in (True, False):
        for window in windows:
            for limit in limits:
                try:
                    config = Config.from_mapping(
                        {"duplicateLimit": limit, "window": window, "resetOnNewCall": reset},
                        base=current,
                    )
                except ConfigError:
                    continue  # a window smaller than the limit: not a config anyone can use
                key = tuple(config_summary(config).values())
                if key not in seen:
                    seen.add(key)
                    configs.append(config)
    return configs


COLUMNS = [
    ("LIMIT", 5, ">"),
    ("WINDOW", 6, ">"),
    ("RESET", 5, "<"),
    ("DENIED RUNS", 11, ">"),
    ("NO-LOOP DENIED", 14, ">"),
    ("LOOPS STOPPED", 13, ">"),
    ("STOP AFTER", 10, ">"),
    ("CALLS DENIED", 12, ">"),
    ("TIME SAVED", 10, ">"),
]


@pipe_safe
def run(args: argparse.Namespace) -> int:
    configs = config_or_exit(args)
    if configs is None or not inputs_or_exit(args):
        return 2
    current = configs.default
    grids: dict[str, list[Config]] = {}

    def grid_for(fmt: str) -> list[Config]:
        # The same grid for every format; only the exempt list its harness starts from differs.
        found = grids.get(fmt)
        if found is None:
            found = grids[fmt] = grid(configs.of(fmt), args.limits, args.windows)
        return found

    progress = Progress("calibrate", sys.stderr)
    problems = Problems(stream=progress)
    outcomes = [Outcome(config) for config in grid(current, args.limits, args.windows)]
    report = (
        JsonReport(sys.stdout, "calibrate", {"loop_streak": args.loop_streak})
        if args.json
        else None
    )
    try:
        for agent_run in runs_of(transcripts(args, problems), grid_for, stats_config=current):
            progress.tick()
            loop = agent_run.loop(args.loop_streak)
            for index, outcome in enumerate(outcomes):
                outcome.add(agent_run, index, loop)
            if report is not None and args.runs:
                row = agent_run.to_json()
                row["denied"] = [track.denied for track in agent_run.tracks]
                report.run(row)
    finally:
        progress.done()
    if report is not None:
        report.close(
            {
                "current": outcomes[0].to_json(detail=True),
                "grid": [o.to_json(detail=False) for o in outcomes[1:]],
                "problems": problems.to_json(),
            }
        )
        return 0
    _print(outcomes, args.loop_streak, problems)
    return 0


def _print(outcomes: list[Outcome], streak: int, problems: Problems) -> None:
    head = outcomes[0]
    print(
        f"{plural(head.runs, 'run')}; {head.loops} with a loop "
        f"(one identical call {streak}+ times back to back). "
        "First row: the current config.\n"
    )
    table = Table(sys.stdout, COLUMNS)
    for outcome in outcomes:
        c = outcome.config
        median, worst = (
            outcome.median_stop(),
            max(outcome.stop_after) if outcome.stop_after else None,
        )
        table.row(
            [
                str(c.duplicate_limit),
                str(c.window),
                str(c.reset_on_new_call).lower(),
                f"{outcome.runs_with_denial}",
                f"{outcome.non_loop_denied}",
                f"{outcome.loops_stopped}/{outcome.loops}",
                "-" if median is None else f"{median}/{worst}",
                str(outcome.denied),
                seconds(outcome.time_saved if outcome.denied else None),
            ]
        )
    print(
        "\nNO-LOOP DENIED: runs denied a call without any back-to-back loop (possible false "
        "positives; --json lists them). STOP AFTER: calls from a loop's start to its first "
        "denial, median/max."
    )
    formats = sorted({f for o in outcomes for f in o.by_format})
    if len(formats) > 1:
        print("\nNo-loop denied runs by format (runs in format):")
        for outcome in outcomes:
            c = outcome.config
            parts = [
                f"{f} {outcome.by_format[f]['non_loop_denied']}/{outcome.by_format[f]['runs']}"
                for f in formats
                if f in outcome.by_format
            ]
            print(
                f"  limit {c.duplicate_limit:>3} window {c.window:>4} reset "
                f"{str(c.reset_on_new_call).lower():<5}: " + ", ".join(parts)
            )
    if problems.count:
        print(f"\n{skipped(problems.count)} (listed on stderr)")
