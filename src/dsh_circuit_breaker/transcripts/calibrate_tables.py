"""calibrate's three tables: the rule grid, the stops, and results as progress (each with
the note that says what its columns count)."""

from __future__ import annotations

import sys

from ..core.config import Config
from ..core.display import plural
from . import recommend
from .calibration import Tally
from .options import seconds
from .output import Table

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


def print_rules(outcomes: list[Tally], streak: int) -> None:
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


def print_stops(outcomes: list[Tally]) -> None:
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


def print_results(current: Tally, others: list[Tally]) -> None:
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
