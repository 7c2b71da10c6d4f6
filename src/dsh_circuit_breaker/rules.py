"""SPEC's rules 2 to 4: the one place where allow or deny is decided."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .config import Config
    from .state import AgentState


class Verdict:
    """The rules' answer. `seen`: copies of the call counted (duplicate, allowed) or
    calls made (cap). `first_of_kind`: the agent's first denial of this kind, to log."""

    __slots__ = ("first_of_kind", "kind", "limit", "seen")

    def __init__(self, kind: str | None, seen: int, limit: int, first_of_kind: bool = False):
        self.kind = kind  # None (allowed), "duplicate" or "cap"
        self.seen = seen
        self.limit = limit
        self.first_of_kind = first_of_kind


def decide(state: AgentState, key: bytes, config: Config) -> Verdict:
    """Judge one guarded call and, if it is allowed, record it in `state`.

    Denied calls are never recorded: a call that did not run must not raise its own count
    or push a real call out of the window, or the breaker would latch on for good.
    """
    cap = config.max_calls_per_agent
    if cap and state.calls >= cap:
        return _deny(state, "cap", state.calls, cap)
    copies = state.since if config.reset_on_new_call else state.counts
    n = copies.get(key, 0)
    if n >= config.duplicate_limit:
        return _deny(state, "duplicate", n, config.duplicate_limit)
    state.record(key, config.window)
    return Verdict(None, n + 1, config.duplicate_limit)


def _deny(state: AgentState, kind: str, count: int, limit: int) -> Verdict:
    first = kind not in state.reported
    if first:
        state.reported.add(kind)
    return Verdict(kind, count, limit, first)
