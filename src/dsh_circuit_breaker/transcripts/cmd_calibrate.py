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
an answer to the user) is a run a stop would cut short, not a loop to end. A kept-on loop
is *ended* when the stop falls inside its streak; a run stopped anywhere else, a loop left
by itself included, is listed as a possible false stop.
A stop saves the calls the agent went on to make after it, and the time to its last call.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..core.config import Config
from ..usage import int_in
from . import recommend
from .analysis import AgentRun
from .calibrate_tables import print_results, print_rules, print_stops
from .calibration import Tally, grid, results_grid, stop_grid
from .command import Command, runner
from .model import Problems, Writer
from .options import (
    ReplayConfig,
    add_config_arguments,
    add_input_arguments,
    refuse_option,
    skipped,
)
from .progress import Progress

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


class Calibrate(Command):
    name = "calibrate"

    def __init__(self, args: argparse.Namespace, configs: ReplayConfig) -> None:
        super().__init__(args, configs)
        self.show_args = False
        self.grids: dict[str, list[Config]] = {}
        self.progress = Progress("calibrate", sys.stderr)
        self.track_results = True
        self.outcomes = [Tally(config) for config in self.both_grids(self.config)]
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
        print_rules(self.outcomes[: self.first], self.args.loop_streak)
        print_stops([self.outcomes[0], *self.outcomes[self.first : self.results]])
        print_results(self.outcomes[0], self.outcomes[self.results :])
        print("\n" + "\n".join(self.recommendation()))
        if problems.count:
            print(f"\n{skipped(problems.count)} (listed on stderr)")


run = runner(Calibrate)
