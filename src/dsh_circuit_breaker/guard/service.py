"""The guard: hook events judged by the harness modules over one long-lived store, and
what a supervisor's page reads (agents, their timelines, incidents, a reset).

A hook event goes through exactly the command hook's path (`hook.judge`): the harness
module parses it, the breaker decides, the module writes the answer. Only the process
differs: here the config is loaded once, at start, and the store stays open.

State is the configured store and nothing else: every decision is one store transaction
(SQLite's `BEGIN IMMEDIATE`, Redis' script), so a restarted service, command-hook
processes and other machines on the same store see the same counts, exactly, under any
concurrency. No cache answers in the store's place: the stores keep, per agent, the state
this process last wrote, and use it only when the store shows that very record is still
the current one (SQLite compares the row it reads inside the transaction with the record
it wrote; Redis' compare-and-set script compares the stored record's digest before it
writes). A write by another process is therefore always seen; what is saved is parsing
the record (SQLite) and the read's round trip (Redis). What this process keeps in memory
for itself is only what the page shows besides the store (each agent's harness, recent
calls and denials, as this service saw them).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..agents import describe, forget
from ..core._log import warn
from ..core.breaker import Decision
from ..core.config import Config
from ..core.files import open_private, private_directory
from ..core.incidents import record_of
from ..core.state import AgentState
from ..core.stores import StoreUnavailable
from ..core.stores.base import Store
from ..core.telemetry import meters
from ..harnesses import HARNESSES
from ..judge import Call, Malformed, Prompt, event_of, judge
from .core import Harnesses
from .metrics import Metrics
from .preview import Repeat, preview

T = TypeVar("T")

TIMELINE = 200  # calls per agent the page can show
AGENTS_REMEMBERED = 2000  # agents whose activity is kept (least recently active dropped)
AGENTS_LISTED = 500  # most recently active agents /api/agents returns
INCIDENTS_LISTED = 200  # incidents a first /api/incidents returns
INCIDENT_READ = 1024 * 1024  # bytes of the incident log read per request, at most
TOOL_NAME_KEPT = 200
PATH_KEPT = 1000  # characters of a working directory or transcript path the page shows


class CountingStore:
    """A store that counts its failures for /metrics; everything else passes through."""

    def __init__(self, store: Store, on_error: Callable[[], None]) -> None:
        self.store = store
        self._on_error = on_error

    def _call(self, operation: Callable[[], T]) -> T:
        try:
            return operation()
        except StoreUnavailable:
            self._on_error()
            raise

    def transact(self, agent: str, step: Callable[[AgentState], T]) -> T:
        return self._call(lambda: self.store.transact(agent, step))

    def open(self) -> None:
        self._call(self.store.open)

    def reset(self, agent: str) -> None:
        self._call(lambda: self.store.reset(agent))

    def agents(self) -> Iterator[tuple[str, AgentState | None]]:
        return iter(self._call(lambda: list(self.store.agents())))

    def close(self) -> None:
        self.store.close()


class Activity:
    """One agent as this service saw it: for the page, never for a decision."""

    __slots__ = ("cwd", "denials", "harness", "last_denied", "repeat", "timeline", "transcript")

    def __init__(self, harness: str) -> None:
        self.harness = harness
        self.cwd = self.transcript = ""  # as its harness's events gave them: memory only
        self.denials = 0
        self.last_denied = False
        self.repeat = Repeat()  # its last call's preview (preview.py): memory only
        # (time, tool, kind, count, limit, stop, preview) per call, (time, why) per reset:
        # tuples, since AGENTS_REMEMBERED x TIMELINE of them may be held (a repeated
        # call's preview is one string object, shared).
        self.timeline: deque[tuple[Any, ...]] = deque(maxlen=TIMELINE)


class Answer:
    """What the HTTP transport sends back for one hook event."""

    __slots__ = ("body", "warning")

    def __init__(self, body: bytes, warning: str | None = None) -> None:
        self.body = body
        self.warning = warning


class Guard:
    """The service's state and operations; thread-safe."""

    def __init__(
        self, config_path: str | None, state: str | None, metrics: Metrics | None = None
    ) -> None:
        self.metrics = metrics or Metrics()
        self.config_path = config_path
        # A bad file fails here, at start, and is never read again.
        self.harnesses = Harnesses(
            config_path, state, lambda store: CountingStore(store, self.metrics.store_error)
        )
        self.metrics.seed(HARNESSES)
        self.config = config = self.harnesses.config
        self.url = self.harnesses.url
        self.store = self.harnesses.store
        if config.incident_log:
            _private_parent(config.incident_log)
        self._lock = threading.Lock()
        self._activity: OrderedDict[str, Activity] = OrderedDict()
        exported = meters()  # the breakers' decision metrics, when the operator asked
        if exported is not None:
            exported.track_agents(self.tracked)

    def open(self) -> str | None:
        """Reach the store now; a warning to print if it cannot be used (each decision
        then fails open, or closed with failClosed, until it can)."""
        try:
            self.store.open()
        except StoreUnavailable as exc:
            return f"state store unavailable ({exc})"
        return None

    def close(self) -> None:
        self.store.close()

    def tracked(self) -> int | None:
        """The store's live agents; None when it cannot be read now."""
        try:
            return sum(1 for _ in self.store.agents())
        except StoreUnavailable:
            return None

    # -- hook events ---------------------------------------------------------------------
    def hook(self, name: str, body: bytes, probe: bool = False) -> Answer:
        """Judge one event of harness `name` (already known to exist): the bytes the
        command hook would print. Anything malformed, and any error of our own, allows.
        A `probe` (doctor's) is judged the same way, over the same store, but counted
        apart and forgotten: it is no agent's work, for the metrics or the page."""
        harness = self.harnesses.get(name)
        module, config = harness.module, harness.config
        started = time.perf_counter()
        try:
            event = event_of(body)
            what = module.parse(event)
            if what is None:
                return Answer(b"")
            answer, decision = judge(module, what, config, lambda: harness.breaker)
        except Malformed as exc:
            self.metrics.count("malformed", name)
            return Answer(b"", f"{name}: {exc}; allowed")
        except StoreUnavailable as exc:  # a prompt's reset (a call's check fails open itself)
            return Answer(b"", f"{name}: state store unavailable ({exc}); allowed")
        except Exception as exc:  # our own bug: never block the agent
            self.metrics.count("malformed", name)
            return Answer(b"", f"{name}: {type(exc).__name__}: {exc}; call allowed")
        seconds = time.perf_counter() - started
        if probe:
            self.metrics.count("probes", name)
            with contextlib.suppress(StoreUnavailable):  # the answer is what doctor checks
                self.store.reset(what.agent)
        elif isinstance(what, Call):
            if decision is not None:
                self.metrics.decision(name, decision.kind, seconds, decision.stop)
                self._saw(name, what, decision, event)
        elif isinstance(what, Prompt):  # a result (Outcome) was recorded: nothing to show
            self.metrics.prompt(name, seconds)
            self._saw_prompt(name, what.agent, config)
        return Answer(b"" if answer is None else answer.encode())

    def _saw(self, harness: str, call: Call, decision: Decision, event: dict[str, Any]) -> None:
        config = self.harnesses.get(harness).config
        text = preview(call.arguments, config.ignore_args) if config.preview_arguments else ""
        with self._lock:
            activity = self._activity_of(call.agent, harness)
            for field, key in (("cwd", "cwd"), ("transcript", "transcript_path")):
                value = event.get(key)
                if isinstance(value, str) and value:
                    setattr(activity, field, value[:PATH_KEPT])
            activity.repeat.saw(call.tool[:TOOL_NAME_KEPT], text, decision.allowed)
            text = activity.repeat.text  # the same string for every copy of the call
            activity.last_denied = not decision.allowed
            if not decision.allowed:
                activity.denials += 1
            activity.timeline.append(
                (
                    time.time(),
                    call.tool[:TOOL_NAME_KEPT],
                    decision.kind,
                    decision.count,
                    decision.limit,
                    decision.stop,
                    text,
                )
            )

    def _saw_prompt(self, harness: str, agent: str, config: Config) -> None:
        if config.reset_on_user_prompt:
            self._mark_reset(agent, harness, "prompt")

    def _mark_reset(self, agent: str, harness: str | None, why: str) -> None:
        with self._lock:
            activity = self._activity.get(agent)
            if activity is None and harness is None:
                return
            activity = self._activity_of(agent, harness or "")
            activity.last_denied = False
            activity.timeline.append((time.time(), why))

    def _activity_of(self, agent: str, harness: str) -> Activity:
        activity = self._activity.get(agent)
        if activity is None:
            activity = self._activity[agent] = Activity(harness)
            while len(self._activity) > AGENTS_REMEMBERED:
                self._activity.popitem(last=False)
        else:
            self._activity.move_to_end(agent)
            if harness:
                activity.harness = harness
        return activity

    # -- what the page reads -------------------------------------------------------------
    def agents(self) -> dict[str, Any]:
        """The store's live agents, most recently active first, with what this service
        saw of each; StoreUnavailable if the store cannot be read."""
        rows, unreadable = [], 0
        for agent, state in self.store.agents():
            if state is None:
                unreadable += 1
            else:
                rows.append(self._row(agent, state))
        rows.sort(key=lambda r: r["updated"], reverse=True)
        self._from_incidents(rows[:AGENTS_LISTED])
        return {
            "state": redacted(self.url),
            "total": len(rows),
            "unreadable": unreadable,
            "agents": rows[:AGENTS_LISTED],
        }

    def agent(self, agent: str) -> dict[str, Any]:
        """One agent (None when the store does not hold it: reset, expired, never seen)
        and its timeline as this service saw it."""
        row = None
        for stored, state in self.store.agents():
            if stored == agent and state is not None:
                row = self._row(agent, state)
                break
        with self._lock:
            activity = self._activity.get(agent)
            timeline = [_event_json(e) for e in activity.timeline] if activity else []
        return {"agent": row, "timeline": timeline}

    def _from_incidents(self, rows: list[dict[str, Any]]) -> None:
        """For refused agents this service never saw (command hooks share its store), what
        the incident log says: the tool of their latest refusal, and that a command hook
        made their calls (the log names no harness)."""
        unseen = {r["agent"]: r for r in rows if r["harness"] is None and r["tripped"]}
        if not unseen:
            return
        for record in self.incidents(None)["incidents"]:
            row = unseen.get(str(record.get("agent")))
            if row is not None and record.get("kind") != "stop":
                row["harness"] = record.get("harness") or "command hook"
                row["lastTool"] = record.get("tool")

    def _row(self, agent: str, state: AgentState) -> dict[str, Any]:
        row = describe(agent, state, self.config)
        with self._lock:
            activity = self._activity.get(agent)
            seen = (activity.harness, activity.denials, activity.last_denied) if activity else None
            repeat = activity.repeat.to_json() if activity and activity.repeat.tool else None
            timeline = reversed(activity.timeline) if activity else iter(())
            last_tool = next((e[1] for e in timeline if len(e) > 2), None)
            cwd, transcript = (activity.cwd, activity.transcript) if activity else ("", "")
        session, _, subagent = agent.partition("/")
        row.update(
            session=session,
            subagent=subagent or None,
            cwd=cwd or None,
            project=os.path.basename(cwd.rstrip("/\\")) or cwd or None,
            transcript=transcript or None,
            harness=seen[0] if seen else None,
            denials=seen[1] if seen else None,
            lastTool=last_tool,
            repeat=repeat,
            status=_status(row["tripped"], bool(seen and seen[2])),
        )
        return row

    def reset(self, agent: str) -> dict[str, Any] | None:
        """Forget one agent's state in the store (as `reset AGENT` does); None if the
        store does not hold it."""
        found, _ = forget(self.store, [agent])
        if agent not in found:
            return None
        self.metrics.reset()
        self._mark_reset(agent, None, "api")
        state = found[agent]
        before = describe(agent, state, self.config) if state is not None else None
        return {"agent": agent, "reset": True, "before": before}

    def incidents(self, after: int | None) -> dict[str, Any]:
        """Incident log records after byte `after` (None: the most recent ones), and the
        offset to ask from next time."""
        path = self.config.incident_log
        if not path:
            return {"log": None, "offset": 0, "incidents": []}

        path = os.path.expanduser(path)
        try:
            fd = open_private(path, os.O_RDONLY)
        except OSError as exc:
            if not os.path.lexists(path):
                return {"log": path, "offset": 0, "incidents": []}
            return {"log": path, "offset": 0, "incidents": [], "error": str(exc)}
        try:
            size = os.fstat(fd).st_size
            fresh = after is None or not 0 <= after <= size  # truncated or replaced: anew
            start = max(size - INCIDENT_READ, 0) if fresh else max(after or 0, size - INCIDENT_READ)
            data = os.pread(fd, size - start, start)
        finally:
            os.close(fd)
        if start > 0 and (fresh or start != after):  # the read began inside a line
            newline = data.find(b"\n")
            start, data = (
                (start + newline + 1, data[newline + 1 :]) if newline >= 0 else (size, b"")
            )
        end = data.rfind(b"\n") + 1  # a line still being written waits for its newline
        lines = data[:end].decode("utf-8", "replace").splitlines()
        records = [r for r in map(record_of, lines) if r is not None]
        if fresh:
            records = records[-INCIDENTS_LISTED:]
        return {"log": path, "offset": start + end, "incidents": records}


def _event_json(event: tuple[Any, ...]) -> dict[str, Any]:
    if len(event) == 2:
        return {"time": event[0], "reset": event[1]}
    when, tool, kind, count, limit, stop, text = event
    return {
        "time": when,
        "tool": tool,
        "call": text,
        "allowed": kind is None,
        "kind": kind,
        "count": count,
        "limit": limit,
        "stop": stop,
    }


def _status(tripped: list[str], last_denied: bool) -> str:
    """stopped (refused stopAfterDenials times in a row: its harness was told to end it),
    capped, denied (its last call was, or its next repeat would be) or ok."""
    if "stop" in tripped:
        return "stopped"
    if "cap" in tripped:
        return "capped"
    if "duplicate" in tripped or last_denied:
        return "denied"
    return "ok"


def redacted(url: str) -> str:
    """A state URL without its password (a Redis URL may carry one)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.partition("@")
    if not sep or not at or "/" in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user + ':***' if user else '***'}@{host}"


def _private_parent(path: str) -> None:
    directory = os.path.dirname(os.path.expanduser(path))
    if directory and not os.path.isdir(directory):
        try:
            private_directory(directory)
        except OSError as exc:  # the append reports it too; decisions stand
            warn("dsh-circuit-breaker serve: cannot create %s: %s", directory, exc)
