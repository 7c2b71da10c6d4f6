"""One agent's memory: the window of recent call keys, its call count, its budgets' counts,
its refusals in a row and, where results are observed, each key's last result digest."""

from __future__ import annotations

import time

from .cjson import canonical, loads
from .keys import DIGEST_SIZE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable, Iterable
    from typing import Any

    _count: Callable[[dict[bytes, int], Iterable[bytes]], None]
else:  # the C parts `collections` uses: the package costs a hook process an import
    from _collections import _count_elements as _count  # what Counter(iterable) runs
    from _collections import deque

FORMAT_VERSION = 1
RESULT_DIGEST_SIZE = 8  # bytes of a result's digest (results.py)
RECENT_RESULTS = 4  # distinct results remembered per key: one seen again is not progress


class AgentState:
    """What the rules need about one agent, kept so that every step costs O(1).

    `counts` holds how often each key is in the window; `since` how often since the most
    recent new call, or since the key's last progress (`restart`), whichever came later.
    Both can be rebuilt from `window`, `last_new` and `restart`, which is all a persistent
    store has to save (see `to_record`).

    With results observed (`resultProgress`, `sameResultLimit`), `awaiting` holds the call
    number of each key's latest copy whose result has not come back (-1: copies issued
    before the result of the one before came back, whose results cannot be told apart),
    `outcomes` the result digests of the last few calls (rule 5), and `results` each
    key's last RECENT_RESULTS distinct result digests (newest first, joined) with how many
    results in a row the newest was. Every key in them is in the window: they are as
    bounded as it is.
    """

    __slots__ = (
        "awaiting",
        "calls",
        "counts",
        "denials",
        "last_new",
        "outcomes",
        "reported",
        "restart",
        "results",
        "since",
        "spent",
        "updated",
        "window",
    )

    def __init__(self) -> None:
        self.window: deque[bytes] = deque()
        self.counts: dict[bytes, int] = {}
        self.since: dict[bytes, int] = {}
        self.calls = 0  # allowed guarded calls over the agent's lifetime
        self.last_new = -1  # position (0-based call number) of the most recent new call
        self.reported: set[str] = set()  # kinds already written to the incident log
        self.spent: dict[str, int] = {}  # toolLimits pattern -> allowed calls it counted
        self.denials = 0  # guarded calls denied since the last allowed one
        self.updated = 0.0
        self.awaiting: dict[bytes, int] = {}
        self.results: dict[bytes, tuple[bytes, int]] = {}
        self.restart: dict[bytes, int] = {}  # key -> call number its count restarts from
        # call number -> its result's digest, for the calls rule 5 compares (its last 3 x
        # cycleRounds): `record` drops older ones
        self.outcomes: dict[int, bytes] = {}

    def record(self, key: bytes, window: int, span: int = 0) -> None:
        """Append an allowed call, evicting the oldest past `window` (and any result of
        `outcomes` older than the last `span` calls)."""
        counts, since = self.counts, self.since
        is_new = key not in counts
        while len(self.window) >= window:
            self._evict()
        self.window.append(key)
        counts[key] = counts.get(key, 0) + 1
        if is_new:
            since.clear()
            if self.restart:
                self.restart.clear()  # all before the new call: it outranks them
            self.last_new = self.calls
            since[key] = 1
        else:
            since[key] = since.get(key, 0) + 1
        self.calls += 1
        outcomes = self.outcomes
        if outcomes:
            old = self.calls - span - 1
            if old in outcomes:
                del outcomes[old]

    def progress(self, key: bytes, position: int) -> None:
        """The copy of `key` made at call `position` returned something new: count its
        copies from that one on, as a new call would (that copy was the latest)."""
        if position >= self.last_new:
            self.restart[key] = position
            self.since[key] = 1

    def _evict(self) -> None:
        position = self.calls - len(self.window)
        old = self.window.popleft()
        restart = self.restart
        if position >= self.last_new and position >= (restart.get(old, -1) if restart else -1):
            since = self.since
            left = since[old] - 1
            if left:
                since[old] = left
            else:
                del since[old]
        counts = self.counts
        left = counts[old] - 1
        if left:
            counts[old] = left
            return
        del counts[old]
        # Out of the window: nothing left to compare with. (Only results fill these.)
        if self.awaiting or self.results or restart:
            self.awaiting.pop(old, None)
            self.results.pop(old, None)
            restart.pop(old, None)

    def to_record(self) -> dict[str, Any]:
        record = {
            "v": FORMAT_VERSION,
            "calls": self.calls,
            "last_new": self.last_new,
            "window": b"".join(self.window).hex(),
            "reported": sorted(self.reported),
            "updated": self.updated,
            "budgets": self.spent,
            "denials": self.denials,
        }
        # Written only where results are observed: every other record stays as it was.
        if self.awaiting:
            record["awaiting"] = {k.hex(): n for k, n in self.awaiting.items()}
        if self.results:
            record["results"] = {k.hex(): [d.hex(), n] for k, (d, n) in self.results.items()}
        if self.restart:
            record["restart"] = {k.hex(): n for k, n in self.restart.items()}
        if self.outcomes:
            record["outcomes"] = {str(n): d.hex() for n, d in self.outcomes.items()}
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> AgentState:
        if record.get("v") != FORMAT_VERSION:
            raise ValueError(f"unknown agent state format {record.get('v')!r}")
        state = cls()
        state.calls = int(record["calls"])
        state.last_new = int(record["last_new"])
        state.reported = set(record["reported"])
        state.updated = float(record.get("updated", 0.0))
        # Absent from records written before budgets and stop existed: those start at zero.
        state.denials = int(record.get("denials", 0))
        budgets = record.get("budgets", {})
        if not isinstance(budgets, dict):
            raise ValueError(f"agent state budgets must be a mapping, got {budgets!r}")
        state.spent = {str(pattern): int(n) for pattern, n in budgets.items()}
        raw = bytes.fromhex(record["window"])
        keys = [raw[i : i + DIGEST_SIZE] for i in range(0, len(raw), DIGEST_SIZE)]
        state.window.extend(keys)
        state.awaiting = {_key(k): int(n) for k, n in _mapping(record, "awaiting").items()}
        state.restart = {_key(k): int(n) for k, n in _mapping(record, "restart").items()}
        state.results = {
            _key(k): (bytes.fromhex(d), int(n)) for k, (d, n) in _mapping(record, "results").items()
        }
        state.outcomes = {int(n): bytes.fromhex(d) for n, d in _mapping(record, "outcomes").items()}
        # A full window is 200 keys on every load: counted in C, not key by key.
        first = state.calls - len(keys)
        _count(state.counts, keys)
        _count(state.since, keys[max(state.last_new - first, 0) :])
        for key, position in state.restart.items():
            if position > state.last_new:  # its copies count from a later call still
                copies = keys[max(position - first, 0) :].count(key)
                if copies:
                    state.since[key] = copies
                else:
                    state.since.pop(key, None)
        return state

    def dumps(self) -> bytes:
        return canonical(self.to_record()).encode()

    @classmethod
    def loads(cls, data: bytes | str) -> AgentState:
        return cls.from_record(loads(data))

    @classmethod
    def readable(cls, data: bytes | str) -> AgentState | None:
        """`loads`, or None for a record that cannot be read: a store lists it as such, so
        that one corrupt record does not hide every other agent."""
        try:
            return cls.loads(data)
        except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, RecursionError):
            return None

    def touch(self) -> None:
        self.updated = time.time()


def _mapping(record: dict[str, Any], name: str) -> dict[str, Any]:
    value = record.get(name, {})
    if not isinstance(value, dict):
        raise ValueError(f"agent state {name} must be a mapping, got {value!r}")
    return value


def _key(text: str) -> bytes:
    key = bytes.fromhex(text)
    if len(key) != DIGEST_SIZE:
        raise ValueError(f"agent state key of {len(key)} bytes")
    return key
