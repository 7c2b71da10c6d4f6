"""In-process state: a dict of live AgentState objects behind one lock."""

from __future__ import annotations

import _thread

from ..state import AgentState

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import TypeVar

    T = TypeVar("T")


class MemoryStore:
    """`memory://`: state lives and dies with this process.

    One lock for all agents: a decision takes microseconds, so contention costs less than
    a lock per agent would (and agents still never see each other's state).
    """

    def __init__(self) -> None:
        self._states: dict[str, AgentState] = {}
        self._lock = _thread.allocate_lock()  # `threading` costs a hook process an import

    def transact(self, agent: str, step: Callable[[AgentState], T]) -> T:
        with self._lock:
            state = self._states.get(agent)
            if state is None:
                state = self._states[agent] = AgentState()
            return step(state)

    def open(self) -> None:
        pass

    def reset(self, agent: str) -> None:
        with self._lock:
            self._states.pop(agent, None)

    def agents(self) -> Iterator[tuple[str, AgentState]]:
        with self._lock:
            items = list(self._states.items())
        yield from items

    def close(self) -> None:
        with self._lock:
            self._states.clear()
