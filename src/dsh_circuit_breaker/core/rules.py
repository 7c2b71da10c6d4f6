"""SPEC's rules 2 to 5 and the stop after them: the one place where allow, deny and stop
are decided."""

from __future__ import annotations

from .state import RECENT_RESULTS, RESULT_DIGEST_SIZE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .config import Config
    from .state import AgentState


class Verdict:
    """The rules' answer. `seen`: copies of the call counted (duplicate, allowed), calls made
    (cap) or calls made under the budget (budget). `first_of_kind`: the agent's first denial
    of this kind, to log. Never changed once made: allowed ones are shared."""

    __slots__ = ("first_of_kind", "kind", "limit", "seen")

    def __init__(self, kind: str | None, seen: int, limit: int, first_of_kind: bool = False):
        self.kind = kind  # None (allowed), "cap", "budget" or "duplicate"
        self.seen = seen
        self.limit = limit
        self.first_of_kind = first_of_kind


class Refusal(Verdict):
    """A denial. `stop`: the harness should end the agent; `denials`: its refusals in a
    row; `first_stop`: its first stop, to log. (Its own class, so that an allowed call,
    the hot path, builds nothing it does not need.)"""

    __slots__ = ("cycle", "denials", "first_stop", "stop")

    def __init__(
        self,
        kind: str,
        seen: int,
        limit: int,
        first_of_kind: bool,
        stop: bool,
        denials: int,
        first_stop: bool,
        cycle: int = 0,
    ):
        super().__init__(kind, seen, limit, first_of_kind)
        self.stop = stop
        self.denials = denials
        self.first_stop = first_stop
        self.cycle = cycle  # the calls in a frozen cycle's block (rule 5), else 0


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
    if budgets:
        for pattern, limit in budgets:
            spent = state.spent.get(pattern, 0)
            if spent >= limit:
                return _deny(state, config, "budget", spent, limit)
    copies = state.since if config.reset_on_new_call else state.counts
    n = copies.get(key, 0) + 1  # this call is one of the copies: the limit-th is refused
    if n >= config.duplicate_limit:
        return _deny(state, config, "duplicate", n, config.duplicate_limit)
    same_limit = config.same_result_limit
    if same_limit and state.results:
        last = state.results.get(key)
        if last is not None and last[1] >= same_limit:  # stuck, new calls between or not
            return _deny(state, config, "duplicate", last[1], same_limit)
    rounds = config.cycle_rounds
    window = state.window
    if rounds and len(window) >= 2 * rounds and (window[-2] == key or window[-3] == key):
        block = frozen_cycle(state, key, rounds)
        if block:
            return _deny(state, config, "duplicate", rounds, rounds, block)
    state.record(key, config.window, 3 * rounds)
    if config.observes_results:
        # A copy issued while the last one's result is still out (parallel calls): neither
        # result can be told from the other, so both are judged as never having arrived.
        state.awaiting[key] = -1 if key in state.awaiting else state.calls - 1
    if budgets:
        for pattern, _ in budgets:
            state.spent[pattern] = state.spent.get(pattern, 0) + 1
    state.denials = 0  # an allowed call ends the run of refusals
    return _ALLOWED.get((n, config.duplicate_limit)) or _allowed(n, config.duplicate_limit)


# Allowed verdicts differ only in (seen, limit): the hot path shares them, built once.
_ALLOWED: dict[tuple[int, int], Verdict] = {}


def _allowed(seen: int, limit: int) -> Verdict:
    verdict = Verdict(None, seen, limit)
    if len(_ALLOWED) < 4096:  # bounded whatever limits a process runs with
        _ALLOWED[seen, limit] = verdict
    return verdict


def frozen_cycle(state: AgentState, key: bytes, rounds: int) -> int:
    """Rule 5: the size of the block (2 or 3 calls, at least two keys) that the agent's
    last `rounds` rounds repeated back to back, each call returning what its
    counterpart of the round before returned (a missing result counts as unchanged), and
    that `key` would continue; 0 when there is none."""
    window = state.window
    size = len(window)
    for block in (2, 3):
        span = block * rounds
        if size < span or window[-block] != key:
            continue
        # Newest first: in healthy work the period breaks within a call or two.
        for back in range(1, span - block + 1):
            if window[-back] != window[-back - block]:
                break
        else:
            if len({window[-j] for j in range(1, block + 1)}) > 1 and _unchanged(
                state, block, span
            ):
                return block  # (one key alone is rule 4's case, not a cycle)
    return 0


def _unchanged(state: AgentState, block: int, span: int) -> bool:
    """Whether each of the last `span` calls but the first round returned what the call
    `block` before it returned, where both results are known."""
    outcomes = state.outcomes
    if not outcomes:
        return True
    calls = state.calls
    for back in range(1, span - block + 1):
        after = outcomes.get(calls - back)
        before = outcomes.get(calls - back - block)
        if after is not None and before is not None and after != before:
            return False  # this call's result moved: the cycle is doing something
    return True


def observe(state: AgentState, key: bytes, digest: bytes, config: Config) -> None:
    """Record the result (its normalized digest) of the latest allowed copy of `key`.

    With `resultProgress`, a result unlike the key's last few (RECENT_RESULTS) is
    progress: the key's copies count from this one again, as after a new call. One seen
    among them is not (a result that flips between two answers is not moving). A result
    for a copy that was refused, or already had its result, or is not the latest, changes
    nothing.
    """
    position = state.awaiting.pop(key, None)
    if position is None or position < 0:  # none out, or one of parallel copies: unknown
        return
    if position >= state.calls - 3 * config.cycle_rounds:
        state.outcomes[position] = digest
    last = state.results.get(key)
    if last is None:
        state.results[key] = (digest, 1)
        return
    recent, same = last
    if recent[:RESULT_DIGEST_SIZE] == digest:
        state.results[key] = (recent, same + 1)
        return
    size = RESULT_DIGEST_SIZE
    others = [recent[i : i + size] for i in range(0, len(recent), size)]
    if digest not in others and config.result_progress:
        state.progress(key, position)
    kept = [digest, *(d for d in others if d != digest)][:RECENT_RESULTS]
    state.results[key] = (b"".join(kept), 1)


def _deny(
    state: AgentState, config: Config, kind: str, count: int, limit: int, cycle: int = 0
) -> Refusal:
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
    return Refusal(kind, count, limit, first, stop, state.denials, first_stop, cycle)
