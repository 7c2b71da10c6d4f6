"""One agent's memory: the window of recent call keys, its call count, its budgets' counts
and its refusals in a row."""

from __future__ import annotations

import time

from .cjson import canonical, loads
from .keys import DIGEST_SIZE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import deque
    from typing import Any
else:  # the C type `collections` re-exports: the package costs a hook process an import
    from _collections import deque

FORMAT_VERSION = 1


class AgentState:
    """What the rules need about one agent, kept so that every step costs O(1).

    `counts` holds how often each key is in the window; `since` how often since the most
    recent new call. Both can be rebuilt from `window` and `last_new`, which is all a
    persistent store has to save (see `to_record`).
    """

    __slots__ = (
        "calls",
        "counts",
        "denials",
        "last_new",
        "reported",
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

    def record(self, key: bytes, window: int) -> None:
        """Append an allowed call, evicting the oldest past `window`."""
        is_new = key not in self.counts
        while len(self.window) >= window:
            self._evict()
        self.window.append(key)
        self.counts[key] = self.counts.get(key, 0) + 1
        if is_new:
            self.since.clear()
            self.last_new = self.calls
            self.since[key] = 1
        else:
            self.since[key] = self.since.get(key, 0) + 1
        self.calls += 1

    def _evict(self) -> None:
        position = self.calls - len(self.window)
        old = self.window.popleft()
        _decrement(self.counts, old)
        if position >= self.last_new:
            _decrement(self.since, old)

    def to_record(self) -> dict[str, Any]:
        return {
            "v": FORMAT_VERSION,
            "calls": self.calls,
            "last_new": self.last_new,
            "window": b"".join(self.window).hex(),
            "reported": sorted(self.reported),
            "updated": self.updated,
            "budgets": self.spent,
            "denials": self.denials,
        }

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
        first = state.calls - len(keys)
        for offset, key in enumerate(keys):
            state.counts[key] = state.counts.get(key, 0) + 1
            if first + offset >= state.last_new:
                state.since[key] = state.since.get(key, 0) + 1
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


def _decrement(counter: dict[bytes, int], key: bytes) -> None:
    left = counter[key] - 1
    if left:
        counter[key] = left
    else:
        del counter[key]
