"""calibrate's counting: what each config did over all runs (`Tally`), and the grids of
configs it replays (the rule grid, the stop grid, the results set). The tables that print
them are `calibrate_tables.py`; the command, `cmd_calibrate.py`."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..core.config import Config, ConfigError
from .analysis import AgentRun, StopTotals
from .options import config_summary

LISTED = 200  # runs named per config in --json (false positives, loops)


@dataclass
class Tally:
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
