"""calibrate's last lines: which of the configs it tried the runs favour, in words a person
can act on (the keys to set, and why).

The results line: whether observing results (docs/results.md) does better than the calls
alone, by the same measures, loops whose results moved counted apart.

The duplicate rule: the fewest runs denied without a loop (possible false positives)
first, then the most loops stopped. The stop: the fewest runs stopped outside a loop the
agent kept on (one it left by itself is no loop for a stop), then the most such loops
ended. A tie keeps the current config, else takes the most lenient (the
larger duplicateLimit, the larger stopAfterDenials): runs that hold no healthy repetition
cannot show what a tighter setting would deny, so stopping sooner is no reason alone.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..core.config import Config
from ..core.display import plural
from .options import BUDGETS, config_summary


class Tried(Protocol):
    """What calibrate measured for one config (calibration.Tally)."""

    config: Config
    loops: int
    loops_stopped: int
    non_loop_denied: int
    loops_kept_on: int  # loops the agent went on repeating after refusals
    loops_ended: int
    non_loop_stopped_count: int
    moving_loops: int  # loops whose recorded results moved
    moving_loops_stopped: int
    runs_with_denial: int
    denied: int

    def median_stop(self) -> int | None: ...

    def median_stop_at(self) -> int | None: ...


def duplicate_rule(tried: list[Tried]) -> str:
    """The line for the first grid; `tried[0]` is the current config."""
    if not tried[0].loops:
        return (
            "Recommendation: none of these runs loops, so they cannot tell which limit catches "
            "a loop; keep the current config unless it denies runs you see as healthy."
        )
    best = min(
        range(len(tried)),
        key=lambda i: (
            tried[i].non_loop_denied,
            -tried[i].loops_stopped,
            i != 0,
            -tried[i].config.duplicate_limit,
            -tried[i].config.window,
            not tried[i].config.reset_on_new_call,
        ),
    )
    pick = tried[best]
    why = (
        f"it stops {pick.loops_stopped} of {pick.loops} loops"
        + (f", {pick.median_stop()} calls in (median)" if pick.loops_stopped else "")
        + f", and {_denied_outside(pick.non_loop_denied)}"
    )
    return _line(tried[0].config, pick.config, ("duplicateLimit", "window", "resetOnNewCall"), why)


def stop(tried: list[Tried]) -> str:
    """The line for the stop grid; `tried[0]` is the current config."""
    if not tried[0].loops_kept_on:
        return (
            "Stop: no agent in these runs kept on looping after refusals, so they cannot tell "
            "which stopAfterDenials suits."
        )
    best = min(
        range(len(tried)),
        key=lambda i: (
            tried[i].non_loop_stopped_count,
            -tried[i].loops_ended,
            i != 0,
            -tried[i].config.stop_after_denials,
        ),
    )
    pick = tried[best]
    why = (
        f"it ends {pick.loops_ended} of {pick.loops_kept_on} loops the agent kept on"
        + (f", {pick.median_stop_at()} calls in (median)" if pick.loops_ended else "")
        + ", and "
        + (
            "stops no run outside a loop"
            if not pick.non_loop_stopped_count
            else f"stops {plural(pick.non_loop_stopped_count, 'run')} outside a loop "
            "(--json lists them: look at them before you choose)"
        )
    )
    return _line(tried[0].config, pick.config, ("stopAfterDenials", BUDGETS), why, "Stop")


def _denied_outside(count: int) -> str:
    if not count:
        return "denies no run without a loop"
    return (
        f"denies {plural(count, 'run')} without a loop, the fewest of any tried "
        "(--json lists them: look at them before you choose)"
    )


def _line(current: Config, pick: Config, keys: tuple[str, ...], why: str, lead: str = "") -> str:
    lead = f"{lead}: " if lead else "Recommendation: "
    now, then = config_summary(current), config_summary(pick)
    changed = [s for key in keys if then[key] != now[key] for s in _settings(key, then[key])]
    if not changed:
        return f"{lead}keep the current config ({', '.join(_shown(keys, then))}): {why}."
    sets = " ".join(f"--set {setting}" for setting in changed)
    return (
        f"{lead}{', '.join(changed)}: {why}. Try it with `{sets}`, then put it in your config file."
    )


def _shown(keys: tuple[str, ...], summary: dict[str, Any]) -> list[str]:
    shown = [key for key in keys if key != BUDGETS or summary[key]]
    return [setting for key in shown for setting in _settings(key, summary[key])]


def _settings(key: str, value: Any) -> list[str]:
    """`key=value` as --set takes it; toolLimits one entry each (none: `toolLimits={}`)."""
    if isinstance(value, dict):
        return [f"{key}.{pattern}={limit}" for pattern, limit in value.items()] or [f"{key}={{}}"]
    return [f"{key}={str(value).lower() if isinstance(value, bool) else value}"]


def results(current: Tried, with_results: list[Tried]) -> str:
    """One line: the results setting the transcripts favour over `current` (the calls
    alone), if any. It must deny no more runs outside loops and stop as many real (not
    moving) loops; then fewer false denials, fewer moving polls refused, or more loops
    stopped decide."""

    def real_stopped(o: Tried) -> int:
        return o.loops_stopped - o.moving_loops_stopped

    better = [
        o
        for o in with_results
        if o.non_loop_denied <= current.non_loop_denied
        and real_stopped(o) >= real_stopped(current)
        and (
            o.non_loop_denied < current.non_loop_denied
            or o.moving_loops_stopped < current.moving_loops_stopped
            or real_stopped(o) > real_stopped(current)
        )
    ]
    if not better:
        same = all(
            (o.runs_with_denial, o.denied) == (current.runs_with_denial, current.denied)
            for o in with_results
        )
        if same:
            return (
                "Verdict: results change nothing on these transcripts (none recorded, or "
                "none that moved)."
            )
        return (
            "Verdict: these transcripts do not favour observing results: set "
            "resultProgress = false and sameResultLimit = 0."
        )
    best = max(better, key=lambda o: (real_stopped(o), -o.non_loop_denied, -o.moving_loops_stopped))
    c = best.config
    keys = "resultProgress = true" + (
        f", sameResultLimit = {c.same_result_limit}" if c.same_result_limit else ""
    )
    return (
        f"Verdict: these transcripts favour {keys}: it refuses {best.moving_loops_stopped} of "
        f"{best.moving_loops} moving polls (against {current.moving_loops_stopped}), denies "
        f"{best.non_loop_denied} runs outside a loop (against {current.non_loop_denied}) and "
        f"stops {real_stopped(best)} loops whose results did not move (against "
        f"{real_stopped(current)})."
    )
