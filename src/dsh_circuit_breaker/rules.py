"""SPEC's rules 2 to 4 and the stop after them: the one place where allow, deny and stop
are decided."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .config import Config
    from .state import AgentState


class Verdict:
    """The rules' answer. `seen`: copies of the call counted (duplicate, allowed), calls made
    (cap) or calls made under the budget (budget). `first_of_kind`: the agent's first denial
    of this kind, to log. `stop`: the harness should end the agent; `denials`: its refusals
    in a row; `first_stop`: its first stop, to log."""

    __slots__ = ("denials", "first_of_kind", "first_stop", "kind", "limit", "seen", "stop")

    def __init__(
        self,
        kind: str | None,
        seen: int,
        limit: int,
        first_of_kind: bool = False,
        stop: bool = False,
        denials: int = 0,
        first_stop: bool = False,
    ):
        self.kind = kind  # None (allowed), "cap", "budget" or "duplicate"
        self.seen = seen
        self.limit = limit
        self.first_of_kind = first_of_kind
        self.stop = stop
        self.denials = denials
        self.first_stop = first_stop


def decide(
    state: AgentState, key: bytes, config: Config, budgets: tuple[tuple[str, int], ...] = ()
) -> Verdict:
    """Judge one guarded call and, if it is allowed, record it in `state`. `budgets`: the
    `toolLimits` entries (pattern, limit) that match the call's tool.

    Denied calls are never recorded: a call that did not run must not raise its own count
    or push a real call out of the window, or the breaker would latch on for good.
    """
    cap = config.max_calls_per_agent
    if cap and state.calls >= cap:
        return _deny(state, config, "cap", state.calls, cap)
    for pattern, limit in budgets:
        spent = state.spent.get(pattern, 0)
        if spent >= limit:
            return _deny(state, config, "budget", spent, limit)
    copies = state.since if config.reset_on_new_call else state.counts
    n = copies.get(key, 0)
    if n >= config.duplicate_limit:
        return _deny(state, config, "duplicate", n, config.duplicate_limit)
    state.record(key, config.window)
    for pattern, _ in budgets:
        state.spent[pattern] = state.spent.get(pattern, 0) + 1
    state.denials = 0  # an allowed call ends the run of refusals
    return Verdict(None, n + 1, config.duplicate_limit)


def _deny(state: AgentState, config: Config, kind: str, count: int, limit: int) -> Verdict:
    first = kind not in state.reported
    if first:
        state.reported.add(kind)
    state.denials += 1
    # A model that repeats refused calls N times in a row no longer reads its results.
    after = config.stop_after_denials
    stop = 0 < after <= state.denials
    first_stop = stop and "stop" not in state.reported
    if first_stop:
        state.reported.add("stop")
    return Verdict(kind, count, limit, first, stop, state.denials, first_stop)
