"""What a state store must do: run one decision atomically over one agent's state."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from ..state import AgentState
from .unavailable import StoreUnavailable as StoreUnavailable

T = TypeVar("T")


class Store(Protocol):
    """Per-agent state, keyed by a string agent id.

    `transact` loads the agent's state (a fresh one if unknown or expired), calls `step`
    on it, persists what `step` changed and returns its result, all as one atomic unit:
    concurrent callers for one agent never lose or double a count. The rules live in
    `step`; a store never decides anything.
    """

    def transact(self, agent: str, step: Callable[[AgentState], T]) -> T: ...

    def open(self) -> None:
        """Make sure the store can be used now (open the file, reach the server), or
        raise StoreUnavailable; the other methods open the store lazily anyway."""

    def reset(self, agent: str) -> None: ...

    def agents(self) -> Iterator[tuple[str, AgentState | None]]:
        """Every live agent; None for one whose record cannot be read."""
        ...

    def close(self) -> None: ...
