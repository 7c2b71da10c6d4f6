"""`dsh-circuit-breaker calibrate PATH...`: over many runs, the figures for choosing limits.

Every run is replayed through the real breaker once per config: the current one (from
--config/--set) and a small grid of duplicateLimit x window x resetOnNewCall. A run
*loops* when one identical call is repeated back to back at least --loop-streak times;
a loop is *stopped* when the breaker denies a call inside that streak. A denied run with
no such streak is listed as a possible false positive, for a person to look at.

A third set replays the current config with results observed (resultProgress, and
sameResultLimit from --same-result-limits: docs/results.md) beside it, and says whether the
transcripts favour it. Loops whose recorded results moved (a poll at work) are
counted apart: refusing them is what resultProgress is for.

A second grid, over stopAfterDenials (--stop-after) and the budgets given with --tool-limit,
each on top of the current config, shows the stops. A stop is for a loop the agent *kept
on*: it repeated the call more than --left-within times after the breaker's first refusal
inside the loop. One it left by itself within that (the refused call and one more, then
an answer to the user) is a run a stop would cut short, not a loop to end. A kept-on loop is *ended* when the stop falls inside its streak; a run
stopped anywhere else, a loop left by itself included, is listed as a possible false stop.
A stop saves the calls the agent went on to make after it, and the time to its last call.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..config import Config, ConfigError
from ..display import plural
from ..usage import int_in
from . import recommend
from .analysis import AgentRun, StopTotals
from .command import Command, runner
from .model import Problems, Writer
from .options import (
    ReplayConfig,
    add_config_arguments,
    add_input_arguments,
    config_summary,
    refuse_option,
    seconds,
    skipped,
)
from .output import Table
from .progress import Progress

LISTED = 200  # runs named per config in --json (false positives, loops)


MAX_CANDIDATE = 1_000_000  # past any transcript's length: the same as no limit


def _ints(text: str) -> list[int]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated whole numbers, got {text!r}"
        ) from None
    if not values or values[0] < 1 or values[-1] > MAX_CANDIDATE:
        raise argparse.ArgumentTypeError(
            f"expected numbers from 1 to {MAX_CANDIDATE}, got {text!r}"
        )
    return values


def _budget(text: str) -> tuple[str, list[int]]:
    pattern, sep, limits = text.rpartition("=")
    if not sep or not pattern:
        raise argparse.ArgumentTypeError(f"expected PATTERN=N,N (web_search=8,12), got {text!r}")
    return pattern, _ints(limits)


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
        "--stop-after",
        type=_ints,
        default=[1, 2, 3, 4, 5, 6],
        metavar="N,N",
        help="stopAfterDenials values to try, over the current config",
    )
    parser.add_argument(
        "--tool-limit",
        type=_budget,
        action="append",
        default=[],
        metavar="PATTERN=N,N",
        help="toolLimits entries to try with each --stop-after value (repeatable: every "
        "combination is tried)",
    )
    parser.add_argument(
        "--loop-streak",
        type=int_in(2, MAX_CANDIDATE),
        default=8,
        metavar="N",
        help="a run loops when one identical call runs N times back to back (default 8)",
    )
    parser.add_argument(
        "--left-within",
        type=int_in(1, MAX_CANDIDATE),
        default=2,
        metavar="N",
        help="a loop whose call the agent repeats at most N times from the first refusal on "
        "is one it left by itself: a stop there is a false stop (default 2)",
    )
    parser.add_argument(
        "--same-result-limits",
        type=_ints,
        default=[8, 12],
        metavar="N,N",
        help="sameResultLimit values to try with resultProgress, over the current config "
        "(the results comparison; each at least 2)",
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
    moving_loops: int = 0  # loops whose recorded results moved
    moving_loops_stopped: int = 0
    stop_after: Counter[int] = field(default_factory=Counter)  # calls from a loop's start
    loop_calls_saved: int = 0
    non_loop_denied: int = 0
    by_format: dict[str, Counter[str]] = field(default_factory=dict)
    non_loop_runs: list[dict[str, Any]] = field(default_factory=list)
    loop_runs: list[dict[str, Any]] = field(default_factory=list)
    stops: StopTotals = field(default_factory=StopTotals)
    loops_kept_on: int = 0  # loops the agent went on repeating after refusals (a stop's)
    loops_ended: int = 0  # kept-on loops whose streak holds the stop
    stop_at: Counter[int] = field(default_factory=Counter)  # calls from a loop's start
    non_loop_stopped: list[dict[str, Any]] = field(default_factory=list)
    non_loop_stopped_count: int = 0

    def add(self, run: AgentRun, index: int, loop: tuple[int, int] | None, left: int) -> None:
        track = run.tracks[index]
        self._add_stop(run, index, loop if self.kept_on(run, index, loop, left) else None)
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
            if run.streak_moved:
                self.moving_loops += 1
                self.moving_loops_stopped += stopped is not None
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

    @staticmethod
    def kept_on(run: AgentRun, index: int, loop: tuple[int, int] | None, left: int) -> bool:
        """Whether the agent repeated the loop's call more than `left` times from the first
        refusal inside it on (a loop it left by itself within that is none for a stop)."""
        if loop is None:
            return False
        first = run.tracks[index].first_in(*loop)
        return first is not None and loop[1] - first + 1 > left

    def _add_stop(self, run: AgentRun, index: int, loop: tuple[int, int] | None) -> None:
        """`loop`: the run's loop if the agent kept it on, else None."""
        track = run.tracks[index]
        self.stops.add(track)
        self.loops_kept_on += loop is not None
        if track.stop is None:
            return
        at = track.stop["call"]
        if loop is not None and loop[0] <= at <= loop[1]:
            self.loops_ended += 1
            self.stop_at[at - loop[0] + 1] += 1
            return
        self.non_loop_stopped_count += 1
        if len(self.non_loop_stopped) < LISTED:
            self.non_loop_stopped.append(
                {
                    "run": run.transcript.label,
                    "agent": run.agent,
                    "format": run.transcript.format,
                    "stop_call": at,
                    "which": track.stop["which"],
                    "kind": track.stop["kind"],
                    "calls_saved": track.after_stop,
                }
            )

    def median_stop(self) -> int | None:
        return _median(self.stop_after)

    def median_stop_at(self) -> int | None:
        return _median(self.stop_at)

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
            "moving_loops": self.moving_loops,
            "moving_loops_stopped": self.moving_loops_stopped,
            "stop_after_median": self.median_stop(),
            "stop_after_max": max(self.stop_after) if self.stop_after else None,
            "loop_calls_saved": self.loop_calls_saved,
            "non_loop_runs_denied": self.non_loop_denied,
            "by_format": {k: dict(v) for k, v in sorted(self.by_format.items())},
            **self.stops.to_json(),
            "loops_kept_on": self.loops_kept_on,
            "loops_ended_by_stop": self.loops_ended,
            "stop_at_median": self.median_stop_at(),
            "stop_at_max": max(self.stop_at) if self.stop_at else None,
            "non_loop_runs_stopped": self.non_loop_stopped_count,
        }
        if detail:
            out["loop_runs"] = self.loop_runs
            out["non_loop_runs_denied_list"] = self.non_loop_runs
            out["non_loop_runs_stopped_list"] = self.non_loop_stopped
        return out


def _median(counts: Counter[int]) -> int | None:
    total = sum(counts.values())
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen * 2 >= total:
            return value
    return None


def _key(config: Config) -> str:
    return json.dumps(config_summary(config), sort_keys=True)


def _distinct(current: Config, candidates: Iterable[Config]) -> list[Config]:
    """The candidates that differ from `current` and from each other, in order."""
    seen, kept = {_key(current)}, []
    for config in candidates:
        key = _key(config)
        if key not in seen:
            seen.add(key)
            kept.append(config)
    return kept


def grid(current: Config, limits: list[int], windows: list[int]) -> list[Config]:
    candidates = []
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
                candidates.append(config)
    return [current, *_distinct(current, candidates)]


def results_grid(current: Config, same_limits: list[int]) -> list[Config]:
    """The current config judged by calls alone (today's rule), with resultProgress alone,
    then with each sameResultLimit (a value below 2 is skipped: not one anyone can use);
    the current config itself left out (the first grid has it)."""
    configs = [current.replace(result_progress=False, same_result_limit=0)]
    configs.append(current.replace(result_progress=True, same_result_limit=0))
    configs += [
        current.replace(result_progress=True, same_result_limit=n) for n in same_limits if n >= 2
    ]
    return _distinct(current, configs)


def stop_grid(
    current: Config, stops: list[int], budgets: list[tuple[str, list[int]]]
) -> list[Config]:
    """Every stopAfterDenials value with every combination of the budgets to try, each on
    top of the current config; the current config itself left out (the first grid has it)."""
    patterns = [pattern for pattern, _ in budgets]
    candidates = []
    for after in stops:
        for limits in itertools.product(*(values for _, values in budgets)):
            tool_limits = {**current.tool_limits, **dict(zip(patterns, limits, strict=True))}
            candidates.append(current.replace(stop_after_denials=after, tool_limits=tool_limits))
    return _distinct(current, candidates)


COLUMNS = [
    ("LIMIT", 5, ">"),
    ("WINDOW", 6, ">"),
    ("RESET", 5, "<"),
    ("DENIED RUNS", 11, ">"),
    ("NO-LOOP DENIED", 14, ">"),
    ("LOOPS STOPPED", 13, ">"),
    ("STOP AFTER", 12, ">"),
    ("CALLS DENIED", 12, ">"),
    ("TIME SAVED", 10, ">"),
]
STOP_COLUMNS = [
    ("STOP AFTER DENIALS", 18, ">"),
    ("STOPPED RUNS", 12, ">"),
    ("NO-LOOP STOPPED", 15, ">"),
    ("LOOPS ENDED", 11, ">"),
    ("STOP AT", 12, ">"),
    ("CALLS SAVED", 11, ">"),
    ("TIME SAVED", 10, ">"),
]
BUDGET_COLUMNS = [("BUDGET RUNS", 11, ">"), ("TOOL LIMITS", 60, "<")]  # with toolLimits


class Calibrate(Command):
    name = "calibrate"

    def __init__(self, args: argparse.Namespace, configs: ReplayConfig) -> None:
        super().__init__(args, configs)
        self.show_args = False
        self.grids: dict[str, list[Config]] = {}
        self.progress = Progress("calibrate", sys.stderr)
        self.track_results = True
        self.outcomes = [Outcome(config) for config in self.both_grids(self.config)]
        self.first = len(grid(self.config, args.limits, args.windows))  # the stop grid's start
        # The results set's start, at the end: the stop grid ends there.
        self.results = len(self.outcomes) - len(results_grid(self.config, args.same_result_limits))

    def both_grids(self, config: Config) -> list[Config]:
        args = self.args
        return (
            grid(config, args.limits, args.windows)
            + stop_grid(config, args.stop_after, args.tool_limit)
            + results_grid(config, args.same_result_limits)
        )

    def configs_for(self, fmt: str) -> list[Config]:
        # The same grid for every format; only the exempt list its harness starts from differs.
        found = self.grids.get(fmt)
        if found is None:
            found = self.grids[fmt] = self.both_grids(self.configs.of(fmt))
        return found

    @property
    def log(self) -> Writer:
        return self.progress

    def head(self) -> dict[str, Any]:
        return {"loop_streak": self.args.loop_streak, "left_within": self.args.left_within}

    def add(self, run: AgentRun) -> dict[str, Any] | None:
        self.progress.tick()
        loop = run.loop(self.args.loop_streak)
        for index, outcome in enumerate(self.outcomes):
            outcome.add(run, index, loop, self.args.left_within)
        if not (self.args.json and self.args.runs):
            return None
        row = run.to_json()
        row["denied"] = [track.denied for track in run.tracks]
        row["stopped_at"] = [t.stop and t.stop["call"] for t in run.tracks]
        return row

    def done(self) -> None:
        self.progress.done()

    def tail(self) -> dict[str, Any]:
        outcomes, first = self.outcomes, self.first
        return {
            "current": outcomes[0].to_json(detail=True),
            "grid": [o.to_json(detail=False) for o in outcomes[1:first]],
            "stop_grid": [o.to_json(detail=True) for o in outcomes[first : self.results]],
            "results": [o.to_json(detail=True) for o in outcomes[self.results :]],
            "recommendation": self.recommendation(),
        }

    def recommendation(self) -> list[str]:
        """The rule and the stop the runs favour (recommend.py), one line each."""
        outcomes, first = self.outcomes, self.first
        rules, stops = outcomes[:first], [outcomes[0], *outcomes[first : self.results]]
        return [recommend.duplicate_rule(list(rules)), recommend.stop(list(stops))]

    def summary(self, problems: Problems) -> None:
        _print(self.outcomes[: self.first], self.args.loop_streak)
        _print_stops([self.outcomes[0], *self.outcomes[self.first : self.results]])
        _print_results(self.outcomes[0], self.outcomes[self.results :])
        print("\n" + "\n".join(self.recommendation()))
        if problems.count:
            print(f"\n{skipped(problems.count)} (listed on stderr)")


run = runner(Calibrate)


def _print(outcomes: list[Outcome], streak: int) -> None:
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
                f"{outcome.loops_stopped} of {outcome.loops}",
                "-" if median is None else f"{median} (max {worst})",
                str(outcome.denied),
                seconds(outcome.time_saved if outcome.denied else None),
            ]
        )
    print(
        "\nNO-LOOP DENIED: runs denied a call without any back-to-back loop (possible false "
        "positives; --json lists them). LOOPS STOPPED: loops with a denial inside them, of all "
        "loops. STOP AFTER: calls from a loop's start to its first denial, the median (and the "
        "most)."
    )
    formats = sorted({f for o in outcomes for f in o.by_format})
    if len(formats) > 1:
        print("\nNo-loop denied runs by format (runs in format):")
        for outcome in outcomes:
            c = outcome.config
            parts = [
                f"{f} {outcome.by_format[f]['non_loop_denied']} of {outcome.by_format[f]['runs']}"
                for f in formats
                if f in outcome.by_format
            ]
            print(
                f"  limit {c.duplicate_limit:>3} window {c.window:>4} reset "
                f"{str(c.reset_on_new_call).lower():<5}: " + ", ".join(parts)
            )


def _print_stops(outcomes: list[Outcome]) -> None:
    """The stop grid: the current config first, then each stopAfterDenials (and budgets)."""
    budgets = any(o.config.tool_limits for o in outcomes)
    print(
        "\nStops over the current config, for each stopAfterDenials"
        + (" and toolLimits" if budgets else "")
        + ". First row: the current config.\n"
    )
    table = Table(sys.stdout, STOP_COLUMNS + BUDGET_COLUMNS if budgets else STOP_COLUMNS)
    for outcome in outcomes:
        stops = outcome.stops
        median = outcome.median_stop_at()
        cells = [
            str(outcome.config.stop_after_denials),
            str(stops.runs_stopped),
            str(outcome.non_loop_stopped_count),
            f"{outcome.loops_ended} of {outcome.loops_kept_on}",
            "-" if median is None else f"{median} (max {max(outcome.stop_at)})",
            str(stops.calls_saved),
            seconds(stops.time_saved if stops.timed else None),
        ]
        if budgets:
            limits = outcome.config.tool_limits.items()
            text = " ".join(f"{pattern}={limit}" for pattern, limit in limits) or "-"
            cells += [str(stops.runs_with_budget_denial), text]
        table.row(cells)
    print(
        "\nNO-LOOP STOPPED: runs stopped outside a loop the agent kept on, a loop it left by "
        "itself included (possible false stops; --json lists them). LOOPS ENDED: loops with "
        "the stop inside them, of the loops the agent kept on (the call repeated more than "
        "--left-within times from the first refusal on). "
        "STOP AT: calls from a loop's start to the stop, the median (and the most). "
        "CALLS SAVED: calls the agents made after the stop; TIME SAVED: from the stop to the "
        "agent's last call."
        + (" BUDGET RUNS: runs with a call refused by a budget." if budgets else "")
    )


RESULT_COLUMNS = [
    ("RESULTS", 34, "<"),
    ("DENIED RUNS", 11, ">"),
    ("NO-LOOP DENIED", 14, ">"),
    ("LOOPS STOPPED", 13, ">"),
    ("MOVING", 6, ">"),
    ("STOP AFTER", 10, ">"),
    ("CALLS DENIED", 12, ">"),
]


def _results_name(config: Config) -> str:
    if not config.observes_results:
        return "off (calls alone)"
    name = "resultProgress" if config.result_progress else "results"
    return name + (
        f", sameResultLimit {config.same_result_limit}" if config.same_result_limit else ""
    )


def _print_results(current: Outcome, others: list[Outcome]) -> None:
    """The current config judged by calls alone beside it with results observed, and
    which the transcripts favour."""
    rows = [current, *others]
    off = next((o for o in rows if not o.config.observes_results), None)
    if off is None:
        return
    print("\nResults as progress (docs/results.md), over the current config (first row).\n")
    table = Table(sys.stdout, RESULT_COLUMNS)
    for outcome in rows:
        median = outcome.median_stop()
        table.row(
            [
                _results_name(outcome.config),
                str(outcome.runs_with_denial),
                str(outcome.non_loop_denied),
                f"{outcome.loops_stopped} of {outcome.loops}",
                f"{outcome.moving_loops_stopped} of {outcome.moving_loops}",
                "-" if median is None else f"median {median}",
                str(outcome.denied),
            ]
        )
    print(
        "\nMOVING: loops whose recorded results moved (a poll at work), of them "
        "stopped. A transcript without results gives the same figures on every row."
    )
    print(recommend.results(off, [o for o in rows if o.config.observes_results]))
