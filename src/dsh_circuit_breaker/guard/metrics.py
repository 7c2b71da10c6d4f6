"""The guard's counters, rendered in Prometheus' text exposition format (version 0.0.4),
every name prefixed `dsh_circuit_breaker_`.

The counters are this process's since it started (Prometheus' `rate()` handles a
restart); the agents gauge is the store's, so it counts agents that command hooks and
other machines track too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

PREFIX = "dsh_circuit_breaker_"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds. A decision is a store transaction: tens of microseconds in memory, a few
# hundred on SQLite, a network round trip on Redis, up to storeTimeout when it is stuck.
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics:
    """Thread-safe counters; `render` is the /metrics body."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.decisions: dict[tuple[str, str], int] = {}
        self.denials: dict[str, int] = {}
        self.stops: dict[str, int] = {}
        self.prompts: dict[str, int] = {}
        self.malformed: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        self.probes: dict[str, int] = {}
        self.resets = 0
        self.store_errors = 0
        self._buckets = [0] * len(BUCKETS)
        self._count = 0
        self._sum = 0.0

    def decision(self, harness: str, kind: str | None, seconds: float, stop: bool = False) -> None:
        """One judged call: `kind` None when allowed; `stop`: the refusal asked the harness
        to end the agent."""
        with self._lock:
            key = (harness, kind or "allow")
            self.decisions[key] = self.decisions.get(key, 0) + 1
            if kind is not None:
                self.denials[harness] = self.denials.get(harness, 0) + 1
            if stop:
                self.stops[harness] = self.stops.get(harness, 0) + 1
            self._observe(seconds)

    def seed(self, harnesses: Iterable[str]) -> None:
        """Start each harness's denial and stop counters at 0: Prometheus' `increase()`
        sees no increase in a series that first appears at 1, so without this a harness's
        first stop since the guard started would count for nothing."""
        with self._lock:
            for harness in harnesses:
                self.denials.setdefault(harness, 0)
                self.stops.setdefault(harness, 0)

    def prompt(self, harness: str, seconds: float) -> None:
        with self._lock:
            self.prompts[harness] = self.prompts.get(harness, 0) + 1
            self._observe(seconds)

    def count(self, table: str, key: str) -> None:
        """One more in `malformed` or `probes` (by harness), or `refused` (by reason)."""
        with self._lock:
            counter: dict[str, int] = getattr(self, table)
            counter[key] = counter.get(key, 0) + 1

    def store_error(self) -> None:
        with self._lock:
            self.store_errors += 1

    def reset(self) -> None:
        with self._lock:
            self.resets += 1

    def _observe(self, seconds: float) -> None:
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self._buckets[i] += 1
                break
        self._count += 1
        self._sum += seconds

    def render(self, agents: Callable[[], int | None]) -> str:
        """The exposition text; `agents` counts the store's live agents (None: the store
        cannot be read now, and the gauge is left out rather than reported as 0)."""
        tracked = agents()
        with self._lock:
            out: list[str] = []
            _family(
                out,
                "decisions_total",
                "counter",
                "Tool calls judged, by harness and kind (allow, or the denial's kind).",
                (({"harness": h, "kind": k}, n) for (h, k), n in sorted(self.decisions.items())),
            )
            _family(
                out,
                "denials_total",
                "counter",
                "Tool calls denied, by harness.",
                (({"harness": h}, n) for h, n in sorted(self.denials.items())),
            )
            _family(
                out,
                "stops_total",
                "counter",
                "Denials that told the harness to end the agent (stopAfterDenials), by harness.",
                (({"harness": h}, n) for h, n in sorted(self.stops.items())),
            )
            _family(
                out,
                "prompts_total",
                "counter",
                "New user prompts seen, by harness (each starts its main agent afresh "
                "with resetOnUserPrompt).",
                (({"harness": h}, n) for h, n in sorted(self.prompts.items())),
            )
            _family(
                out,
                "malformed_events_total",
                "counter",
                "Hook events that could not be judged (allowed), by harness.",
                (({"harness": h}, n) for h, n in sorted(self.malformed.items())),
            )
            _family(
                out,
                "probes_total",
                "counter",
                "Doctor's probe events, by harness: judged as any event, and counted here "
                "instead of under decisions or prompts.",
                (({"harness": h}, n) for h, n in sorted(self.probes.items())),
            )
            _family(
                out,
                "resets_total",
                "counter",
                "Agents reset through the API (the page's reset button).",
                [({}, self.resets)],
            )
            _family(
                out,
                "store_errors_total",
                "counter",
                "Store operations that failed (each decision then failed open, or "
                "closed with failClosed).",
                [({}, self.store_errors)],
            )
            _family(
                out,
                "http_refused_total",
                "counter",
                "HTTP requests refused, by reason.",
                (({"reason": r}, n) for r, n in sorted(self.refused.items())),
            )
            if tracked is not None:
                _family(
                    out,
                    "agents_tracked",
                    "gauge",
                    "Live agents in the state store (every process and machine that shares it).",
                    [({}, tracked)],
                )
            self._render_histogram(out)
        return "\n".join(out) + "\n"

    def _render_histogram(self, out: list[str]) -> None:
        name = PREFIX + "decision_seconds"
        out.append(f"# HELP {name} Time to judge one hook event, store included.")
        out.append(f"# TYPE {name} histogram")
        cumulative = 0
        for bound, n in zip(BUCKETS, self._buckets, strict=True):
            cumulative += n
            out.append(f'{name}_bucket{{le="{bound!r}"}} {cumulative}')
        out.append(f'{name}_bucket{{le="+Inf"}} {self._count}')
        out.append(f"{name}_sum {self._sum!r}")
        out.append(f"{name}_count {self._count}")


def _family(
    out: list[str],
    name: str,
    kind: str,
    help_text: str,
    samples: Iterable[tuple[dict[str, str], int]],
) -> None:
    full = PREFIX + name
    out.append(f"# HELP {full} {help_text}")
    out.append(f"# TYPE {full} {kind}")
    for labels, value in samples:
        out.append(f"{full}{_labels(labels)} {value}")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
