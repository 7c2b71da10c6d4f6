"""How an agent, given as an object or an id, maps to a state key and an incident label."""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections.abc import Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Not `name`: two subagents can share one, and a supervisor cannot interrupt an agent by it.
ID_FIELDS = ("id", "agent_id", "agentId", "session_id", "sessionId", "uuid", "thread_id")


def agent_id(agent: Any) -> str | None:
    """The id a harness knows the agent by, if the object has a recognizable one."""
    if isinstance(agent, str):
        return agent
    for name in ID_FIELDS:
        try:
            value = agent.get(name) if isinstance(agent, Mapping) else getattr(agent, name, None)
        except Exception:
            continue
        if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "":
            return str(value)
    return None


def agent_label(agent: Any) -> dict[str, Any]:
    """`{"agent": id}` for the incident log, or `{"agentKeys": [...]}` when there is no id."""
    found = agent_id(agent)
    if found is not None:
        return {"agent": found}
    return {"agentKeys": field_names(agent)}


def field_names(agent: Any) -> list[str]:
    if isinstance(agent, Mapping):
        return [str(k) for k in agent]
    names = list(getattr(agent, "__dict__", {}) or {})
    for cls in type(agent).__mro__:
        names.extend(s for s in getattr(cls, "__slots__", ()) if s not in names)
    return names


class ObjectKeys:
    """Gives each agent object a private state key; when the object is collected, the key
    is handed to `on_collect` so its state goes too (a WeakMap, in JavaScript terms)."""

    def __init__(self, on_collect: Callable[[str], None]) -> None:
        self._by_id: dict[int, str] = {}
        self._strong: dict[int, Any] = {}  # objects that cannot be weakly referenced
        self._lock = threading.Lock()
        self._serial = itertools.count(1)
        # Unique across processes, for stores that several processes share.
        self._prefix = os.urandom(6).hex()
        self._on_collect = on_collect

    def key(self, agent: Any) -> str:
        oid = id(agent)
        with self._lock:
            found = self._by_id.get(oid)
            if found is not None:
                return found
            key = f"object:{self._prefix}:{next(self._serial)}"
            try:
                weakref.finalize(agent, self._collected, oid, key)
            except TypeError:
                # Cannot be weakly referenced: keep the object alive so its id stays unique.
                self._strong[oid] = agent
            self._by_id[oid] = key
            return key

    def _collected(self, oid: int, key: str) -> None:
        with self._lock:
            if self._by_id.get(oid) == key:
                del self._by_id[oid]
        self._on_collect(key)
