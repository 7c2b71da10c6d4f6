"""Per-run figures (analyze) and what the breaker would have done (replay, calibrate).

Replay drives the real engine: one `CircuitBreaker(config)` with the memory store per
transcript, `check(agent, tool, arguments)` for every call in order, each subagent under
its own agent id. Nothing here decides allow or deny; it only counts what `check` said.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Any

from ..core.breaker import CircuitBreaker, Decision
from ..core.config import Config
from ..core.keys import call_key
from ..core.results import result_digest
from .model import RecordedCall, Transcript

TIMELINE_LIMIT = 10_000  # points kept per run for the HTML picture


# One call on the replay page's timeline: its number, time, copies of it so far, tool,
# 1 if denied, and its name as the reports give it (`describe`).
Point = tuple[int, float | None, int, str, int, str]


def describe(tool: str, arguments: Any, key: bytes, show_args: bool) -> str:
    """How a report names a call. By default: the tool, its argument names and a short
    digest of the key, so no argument content leaves the transcript; `show_args` adds a
    short preview of the arguments for a person reading their own transcripts."""
    digest = key.hex()[:8]
    if show_args:
        try:
            text = json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)
        except (TypeError, ValueError, RecursionError):
            text = repr(arguments)
        text = " ".join(text.split())
        if len(text) > 80:
            text = text[:77] + "..."
        return f"{tool} {text} #{digest}"
    if isinstance(arguments, dict):
        names = ",".join(str(k) for k in list(arguments)[:6])
        if len(arguments) > 6:
            names += ",..."
        return f"{tool}({names}) #{digest}"
    return f"{tool}(<{type(arguments).__name__}>) #{digest}"


def stats_key(call: RecordedCall, ignore: frozenset[str]) -> bytes:
    key = call_key(call.tool, call.arguments, ignore)
    if key is None:  # unserializable arguments: still one call to count, keyed by its text
        text = f"{call.tool}\x00{call.arguments!r}".encode("utf-8", "replace")
        key = blake2b(text, digest_size=16).digest()
    return key


@dataclass
class Denials:
    """What one breaker did to one agent's calls: its denials, its first budget denial, and
    where it would have stopped the agent (`Decision.stop`) with what that stop saves."""

    first: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None  # the first denial of kind "budget"
    stop: dict[str, Any] | None = None  # the first call that carried `stop`
    after_stop: int = 0  # calls the agent went on to make after it: what the stop saves
    denied: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    time_saved: float = 0.0
    timed: bool = True  # every denied call had a time to measure from
    ranges: list[list[int]] = field(default_factory=list)  # [first, last] call numbers
    _open_since: float | None = None
    _last_after_stop: float | None = None

    def add(
        self, number: int, call: RecordedCall, decision: Decision, which: str, start: float | None
    ) -> None:
        self._close(call.time)
        if self.stop is not None:
            self.after_stop += 1
            if call.time is not None:
                self._last_after_stop = call.time
        if decision.allowed:
            return
        kind = decision.kind or "denied"
        self.denied += 1
        self.kinds[kind] += 1
        if self.ranges and self.ranges[-1][1] == number - 1:
            self.ranges[-1][1] = number
        else:
            self.ranges.append([number, number])
        if self.first is None:
            self.first = _point(number, call, decision, which, start)
        if kind == "budget" and self.budget is None:
            self.budget = _point(number, call, decision, which, start)
        if decision.stop and self.stop is None:
            self.stop = _point(number, call, decision, which, start)
            self._last_after_stop = call.time
        if call.time is None:
            self.timed = False
        self._open_since = call.time

    def _close(self, when: float | None) -> None:
        # A denied call saves the time until the agent's next call (or the run's end): the
        # tool would not have run. For a loop this adds up to the loop's remaining time.
        if self._open_since is not None and when is not None:
            self.time_saved += max(0.0, when - self._open_since)
        self._open_since = None

    def finish(self, end: float | None) -> None:
        self._close(end)

    @property
    def stop_time_saved(self) -> float | None:
        """The wall time from the stopped call to the agent's last call: the time the run
        went on for after a stop would have ended it (None without timestamps)."""
        at: float | None = None if self.stop is None else self.stop["time"]
        if at is None or self._last_after_stop is None:
            return None
        return max(0.0, self._last_after_stop - at)

    def first_in(self, first: int, last: int) -> int | None:
        """The first denied call number within [first, last], if any."""
        for lo, hi in self.ranges:
            if hi >= first and lo <= last:
                return max(lo, first)
        return None

    def to_json(self) -> dict[str, Any]:
        stop = None
        if self.stop is not None:
            saved = self.stop_time_saved
            stop = {
                **self.stop,
                "calls_saved": self.after_stop,
                "time_saved_s": None if saved is None else round(saved, 3),
            }
        return {
            "first_denial": self.first,
            "denied": self.denied,
            "denied_by_kind": dict(self.kinds),
            "calls_saved": self.denied,
            "time_saved_s": round(self.time_saved, 3) if self.denied and self.timed else None,
            "first_budget": self.budget,
            "stop": stop,
        }


def _point(
    number: int, call: RecordedCall, decision: Decision, which: str, start: float | None
) -> dict[str, Any]:
    """Where a report marks a denial: the call, when, and what the breaker said."""
    return {
        "call": number,
        "time": call.time,
        "offset_s": None if call.time is None or start is None else call.time - start,
        "tool": call.tool,
        "which": which,
        "kind": decision.kind or "denied",
        "count": decision.count,
        "limit": decision.limit,
    }


@dataclass
class AgentRun:
    """One agent's calls in one transcript: the unit every report has one row for."""

    transcript: Transcript
    agent: str
    show_args: bool = False
    keep_timeline: bool = False
    calls: int = 0
    failed: int = 0
    first_time: float | None = None
    last_time: float | None = None
    counts: dict[bytes, int] = field(default_factory=dict)
    names: dict[bytes, str] = field(default_factory=dict)
    streak: tuple[int, int, bytes | None] = (0, 0, None)  # length, first call number, key
    tracks: list[Denials] = field(default_factory=list)
    timeline: list[Point] = field(default_factory=list)
    timeline_cut: bool = False
    # With `track_results`: whether the longest streak's recorded results moved (a poll
    # at work, not a loop), as results.py compares them.
    track_results: bool = False
    streak_moved: bool = False
    _run: tuple[int, int, bytes | None] = (0, 0, None)
    _run_moved: bool = False
    _last_result: bytes | None = None

    def add(self, call: RecordedCall, key: bytes, decisions: list[Decision]) -> None:
        self.calls += 1
        number = self.calls
        if call.failed:
            self.failed += 1
        if call.time is not None:
            if self.first_time is None:
                self.first_time = call.time
            self.last_time = call.time
        seen = self.counts.get(key, 0) + 1
        self.counts[key] = seen
        if seen == 1:
            self.names[key] = describe(call.tool, call.arguments, key, self.show_args)
        length, begin, last = self._run
        self._run = (length + 1, begin, key) if last == key else (1, number, key)
        if self.track_results:
            self._follow_result(call, last == key)
        if self._run[0] > self.streak[0]:
            self.streak, self.streak_moved = self._run, self._run_moved
        start = self.transcript.start
        for track, decision in zip(self.tracks, decisions, strict=True):
            track.add(number, call, decision, self.names[key], start)
        if self.keep_timeline:
            if len(self.timeline) < TIMELINE_LIMIT:
                denied = 0 if not decisions or decisions[0].allowed else 1
                self.timeline.append((number, call.time, seen, call.tool, denied, self.names[key]))
            else:
                self.timeline_cut = True

    def _follow_result(self, call: RecordedCall, same_call: bool) -> None:
        # A failed result is left out: in a run the breaker guarded, a refused call's
        # result is the refusal, which is not the tool moving.
        digest = None if call.failed else call.digest
        if not same_call:
            self._run_moved = False
        elif digest is not None and self._last_result not in (None, digest):
            self._run_moved = True
        self._last_result = digest

    def finish(self) -> None:
        for track in self.tracks:
            track.finish(self.transcript.end)

    @property
    def duration(self) -> float | None:
        t = self.transcript
        if t.duration is not None:
            return t.duration
        if self.first_time is not None and self.last_time is not None:
            return self.last_time - self.first_time
        return None

    def worst(self) -> tuple[str, int] | None:
        if not self.counts:
            return None
        key = max(self.counts, key=lambda k: self.counts[k])  # first-seen wins ties
        return self.names[key], self.counts[key]

    def loop(self, min_streak: int) -> tuple[int, int] | None:
        """(first, last) call numbers of the longest back-to-back streak of one identical
        call, if it is at least `min_streak` long: what calibrate counts as a loop."""
        length, begin, _ = self.streak
        if min_streak > 0 and length >= min_streak:
            return begin, begin + length - 1
        return None

    def to_json(self) -> dict[str, Any]:
        t = self.transcript
        worst = self.worst()
        length, begin, key = self.streak
        row: dict[str, Any] = {
            "run": t.label,
            "agent": self.agent,
            "format": t.format,
            "source": t.source,
            "line": t.line,
            "duration_s": None if self.duration is None else round(self.duration, 3),
            "calls": self.calls,
            "distinct": len(self.counts),
            "failed": self.failed,
            "worst_repeat": None if worst is None else {"call": worst[0], "times": worst[1]},
            "longest_streak": None
            if key is None
            else {"call": self.names[key], "length": length, "first_call": begin},
        }
        if t.meta:
            row["meta"] = t.meta
        return row


def runs_of(
    transcripts: Iterable[Transcript],
    configs: Sequence[Config] | Callable[[str], Sequence[Config]],
    stats_config: Config | None = None,
    show_args: bool = False,
    keep_timeline: bool = False,
    track_results: bool = False,
) -> Iterator[AgentRun]:
    """Every agent of every transcript, with one `Denials` track per config in `configs`
    (none: analyze only), or per config `configs(format)` gives for the transcript's format
    (each harness's installed breaker has its own exempt list). Memory is bounded by one
    transcript's distinct calls."""
    if stats_config is None and not callable(configs) and configs:
        stats_config = configs[0]
    ignore = frozenset((stats_config or Config()).ignore_args)
    for transcript in transcripts:
        configs_here = configs(transcript.format) if callable(configs) else configs
        # A replay is no agent's work: nothing of it is exported.
        breakers = [CircuitBreaker(config, export=False) for config in configs_here]
        observing = any(config.observes_results for config in configs_here)
        agents: dict[str, AgentRun] = {}
        try:
            for call in transcript.calls():
                run = agents.get(call.agent)
                if run is None:
                    run = agents[call.agent] = AgentRun(
                        transcript,
                        call.agent,
                        show_args,
                        keep_timeline,
                        tracks=[Denials() for _ in configs_here],
                        track_results=track_results,
                    )
                decisions = [b.check(call.agent, call.tool, call.arguments) for b in breakers]
                if call.result is not None and (track_results or observing):
                    call.digest = result_digest(call.result)
                    _observe(breakers, decisions, call)
                run.add(call, stats_key(call, ignore), decisions)
        finally:
            for breaker in breakers:
                breaker.close()
        if not agents:  # a run without tool calls is still a run
            agents[transcript.label] = AgentRun(
                transcript,
                transcript.label,
                show_args,
                keep_timeline,
                tracks=[Denials() for _ in configs_here],
            )
        for run in agents.values():
            run.finish()
            yield run


def _observe(breakers: list[CircuitBreaker], decisions: list[Decision], call: RecordedCall) -> None:
    """The call's recorded result, for each breaker that would have let it run (one that
    refused it never saw a result)."""
    assert call.digest is not None
    for breaker, decision in zip(breakers, decisions, strict=True):
        if decision.allowed:
            breaker.observe_digest(call.agent, call.tool, call.arguments, call.digest)


@dataclass
class StopTotals:
    """Over many runs, for one config: the runs a budget would have refused a call in, and
    the runs a stop would have ended, with the calls and time that stop saves."""

    runs_with_budget_denial: int = 0
    runs_stopped: int = 0
    calls_saved: int = 0
    time_saved: float = 0.0
    timed: int = 0  # stopped runs with timestamps to measure the time from

    def add(self, track: Denials) -> None:
        if track.budget is not None:
            self.runs_with_budget_denial += 1
        if track.stop is None:
            return
        self.runs_stopped += 1
        self.calls_saved += track.after_stop
        saved = track.stop_time_saved
        if saved is not None:
            self.time_saved += saved
            self.timed += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "runs_with_budget_denial": self.runs_with_budget_denial,
            "runs_stopped": self.runs_stopped,
            "stop_calls_saved": self.calls_saved,
            "stop_time_saved_s": round(self.time_saved, 3) if self.timed else None,
        }
