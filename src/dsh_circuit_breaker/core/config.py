"""The breaker's configuration: defaults from SPEC, validation at load, tool matching.

Written without dataclasses, typing or re at run time: a command hook imports this in a
fresh process for every tool call, and those imports would cost more than the decision.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any

DEFAULT_EXEMPT = ("todo_write", "ask_user_question", "exit_plan_mode")
DEFAULT_IGNORE_ARGS = ("description", "explanation", "reason", "thought", "purpose")
PLACEHOLDERS = frozenset({"tool", "count", "limit", "kind", "calls"})
KINDS = ("duplicate", "cycle", "cap", "budget", "stop")
SEVEN_DAYS = 7 * 24 * 3600
# Upper bounds, so that no accepted value switches the breaker off later: past an hour a
# budget no longer bounds anything (and SQLite's busy timeout overflows at ~24.8 days);
# past a century an expiry no longer fits Redis's TTL or a float timestamp.
MAX_STORE_TIMEOUT = 3600.0
MAX_IDLE_EXPIRY = 100 * 365 * 24 * 3600
# A denyMessage placeholder may pad or cut to this many characters at most, and a
# rendered message may be this long (rendered once at load with the longest values).
MAX_SPEC_NUMBER = 100
MAX_MESSAGE = 20_000
# Chosen by replaying ../shared/corpus (tests/test_transcripts_corpus.py holds the figures).
STOP_AFTER_DENIALS = 3
CYCLE_ROUNDS = 3
MAX_CYCLE_ROUNDS = 10  # past it a cycle is long caught by rule 4: 3 x 10 calls, 10 copies each

# field -> (default, accepted types). The order is the order of Config's keyword arguments.
_FIELDS: dict[str, tuple[Any, tuple[type, ...]]] = {
    "duplicate_limit": (6, (int,)),
    "window": (200, (int,)),
    "reset_on_new_call": (True, (bool,)),
    "max_calls_per_agent": (300, (int,)),
    "exempt": (DEFAULT_EXEMPT, (tuple, list)),
    "only": ((), (tuple, list)),
    "ignore_args": (DEFAULT_IGNORE_ARGS, (tuple, list)),
    "deny_message": (None, (str, dict, type(None))),
    "incident_log": (None, (str, type(None))),
    "enabled": (True, (bool,)),
    # For harnesses whose state outlives a process (command hooks, shared stores).
    "reset_on_user_prompt": (True, (bool,)),
    "idle_expiry_seconds": (SEVEN_DAYS, (int,)),
    "fail_closed": (False, (bool,)),
    "store_timeout": (2.0, (int, float)),
    "tool_limits": ({}, (dict,)),
    "stop_after_denials": (STOP_AFTER_DENIALS, (int,)),
    # The HTTP guard's live page: a short, masked preview of each agent's repeated call,
    # held in the guard's memory only (never in the store or on disk).
    "preview_arguments": (True, (bool,)),
    # Results, where the harness reports them (docs/results.md). Progress is on: replaying
    # real runs it removed every moving poll's false denial and lost no loop; the same-result
    # rule refused healthy runs (docs/results.md, "Measured").
    "result_progress": (True, (bool,)),
    "same_result_limit": (0, (int,)),
    # Rule 5: a block of 2 or 3 calls repeated this many rounds back to back, nothing
    # changing, is refused. Replaying real runs (docs/results.md): 2 refused healthy runs.
    "cycle_rounds": (CYCLE_ROUNDS, (int,)),
}
_LISTS = ("exempt", "only", "ignore_args")
_MAPPINGS = ("deny_message", "tool_limits")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the offending key."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


_KEYS = {**{name: name for name in _FIELDS}, **{_camel(name): name for name in _FIELDS}}


class Config:
    """What the breaker enforces. Arguments are snake_case; files may use camelCase.

    Immutable once built; every value is validated here, so a bad one fails at load,
    naming its key, and never falls back to a default.
    """

    __slots__ = ("budgets", "guards", "observes_results", *_FIELDS)

    duplicate_limit: int
    window: int
    reset_on_new_call: bool
    max_calls_per_agent: int
    exempt: tuple[str, ...]
    only: tuple[str, ...]
    ignore_args: tuple[str, ...]
    deny_message: str | Mapping[str, str] | None
    incident_log: str | None
    enabled: bool
    reset_on_user_prompt: bool
    idle_expiry_seconds: int
    fail_closed: bool
    store_timeout: float
    tool_limits: Mapping[str, int]
    stop_after_denials: int
    preview_arguments: bool
    result_progress: bool
    same_result_limit: int
    cycle_rounds: int
    observes_results: bool  # either of the two above: results are worth recording
    # `guards(tool)`: whether the breaker looks at calls of `tool` at all; `budgets(tool)`:
    # the `tool_limits` entries (pattern, limit) that count its calls. Each is its
    # matcher's own method, not one calling it: they run before every call.
    guards: Callable[[str], bool]
    budgets: Callable[[str], tuple[tuple[str, int], ...]]

    def __init__(
        self,
        duplicate_limit: int = 6,
        window: int = 200,
        reset_on_new_call: bool = True,
        max_calls_per_agent: int = 300,
        exempt: Iterable[str] = DEFAULT_EXEMPT,
        only: Iterable[str] = (),
        ignore_args: Iterable[str] = DEFAULT_IGNORE_ARGS,
        deny_message: str | Mapping[str, str] | None = None,
        incident_log: str | None = None,
        enabled: bool = True,
        reset_on_user_prompt: bool = True,
        idle_expiry_seconds: int = SEVEN_DAYS,
        fail_closed: bool = False,
        store_timeout: float = 2.0,
        tool_limits: Mapping[str, int] | None = None,
        stop_after_denials: int = STOP_AFTER_DENIALS,
        preview_arguments: bool = True,
        result_progress: bool = True,
        same_result_limit: int = 0,
        cycle_rounds: int = CYCLE_ROUNDS,
    ) -> None:
        values = dict(locals())
        del values["self"]
        if tool_limits is None:
            values["tool_limits"] = {}
        for name, value in values.items():
            _check_type(name, value)
            if name in _LISTS:
                value = tuple(value)
            elif name in _MAPPINGS and value is not None and not isinstance(value, str):
                value = dict(value)
            elif name == "incident_log" and value == "":
                value = None
            object.__setattr__(self, name, value)
        self._validate()
        object.__setattr__(self, "guards", _ToolMatcher(self.exempt, self.only).matches)
        object.__setattr__(self, "budgets", _BudgetMatcher(self.tool_limits).matches)
        observes = self.result_progress or self.same_result_limit > 0
        object.__setattr__(self, "observes_results", observes)

    def _validate(self) -> None:
        if self.duplicate_limit < 2:  # the limit-th copy is refused: 1 would refuse every call
            raise _error("duplicate_limit", f"must be at least 2, got {self.duplicate_limit}")
        if self.window < 1:
            raise _error("window", f"must be at least 1, got {self.window}")
        if self.window < self.duplicate_limit:
            raise _error(
                "window",
                f"({self.window}) must not be smaller than duplicateLimit ({self.duplicate_limit})",
            )
        if self.max_calls_per_agent < 0:
            raise _error(
                "max_calls_per_agent", f"must be 0 (off) or more, got {self.max_calls_per_agent}"
            )
        if not 1 <= self.idle_expiry_seconds <= MAX_IDLE_EXPIRY:
            raise _error(
                "idle_expiry_seconds",
                f"must be 1 to {MAX_IDLE_EXPIRY} (100 years), "
                f"got {shown(self.idle_expiry_seconds)}",
            )
        if not 0 < self.store_timeout <= MAX_STORE_TIMEOUT:  # also refuses nan
            raise _error(
                "store_timeout",
                f"must be above 0 and at most {MAX_STORE_TIMEOUT:g} seconds, "
                f"got {shown(self.store_timeout)}",
            )
        _check_limits(self.tool_limits)
        if self.stop_after_denials < 0:
            raise _error(
                "stop_after_denials",
                f"must be 0 (off) or more, got {shown(self.stop_after_denials)}",
            )
        if self.same_result_limit < 0 or self.same_result_limit == 1:
            raise _error(
                "same_result_limit",
                f"must be 0 (off) or at least 2, got {shown(self.same_result_limit)}",
            )
        if self.cycle_rounds != 0 and not 2 <= self.cycle_rounds <= MAX_CYCLE_ROUNDS:
            raise _error(
                "cycle_rounds",
                f"must be 0 (off) or 2 to {MAX_CYCLE_ROUNDS}, got {shown(self.cycle_rounds)}",
            )
        largest = max(
            self.same_result_limit,
            self.duplicate_limit,
            self.max_calls_per_agent,
            self.stop_after_denials,
            *self.tool_limits.values(),
        )
        _check_messages(self.deny_message, largest)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Config is immutable; use .replace({name}=...)")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in _FIELDS)

    __hash__ = None  # type: ignore[assignment]  # deny_message may be a dict

    def __repr__(self) -> str:
        changed = ", ".join(
            f"{n}={getattr(self, n)!r}" for n, (d, _) in _FIELDS.items() if getattr(self, n) != d
        )
        return f"Config({changed})"

    def replace(self, **changes: Any) -> Config:
        """A copy with some values changed (validated like any other)."""
        values = {name: getattr(self, name) for name in _FIELDS}
        values.update(changes)
        return Config(**values)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], base: Config | None = None) -> Config:
        """Build from a config file's mapping (camelCase or snake_case keys) over `base`."""
        if not isinstance(mapping, dict):
            raise ConfigError(f"config must be a mapping, got {type(mapping).__name__}")
        values: dict[str, Any] = {}
        for key, value in mapping.items():
            name = _KEYS.get(key) if isinstance(key, str) else None
            if name is None:
                raise ConfigError(f"unknown config key {shown(key)}{_suggestion(key)}")
            if name in values:
                raise ConfigError(f"config key {_camel(name)} given twice")
            values[name] = value
        return (base or cls()).replace(**values)

    def to_mapping(self) -> dict[str, Any]:
        """The camelCase form a config file would hold."""
        out: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, dict):
                value = dict(value)
            out[_camel(name)] = value
        return out

    def message_template(self, kind: str) -> str:
        from .messages import DEFAULT_MESSAGES

        if self.deny_message is None:
            return DEFAULT_MESSAGES[kind]
        if isinstance(self.deny_message, str):
            return self.deny_message
        return self.deny_message.get(kind, DEFAULT_MESSAGES[kind])


def _suggestion(key: object) -> str:
    """`; did you mean duplicateLimit?` for `duplicateLimt`, else where the keys are
    listed: naming all sixteen hides the one that was meant."""
    import difflib  # only on a bad key: the hook's happy path never pays for it

    known = sorted(_camel(n) for n in _FIELDS)
    near = difflib.get_close_matches(_camel(str(key)), known, n=1, cutoff=0.6)
    return f"; did you mean {near[0]}?" if near else " (the README's config table lists the keys)"


def _error(name: str, problem: str) -> ConfigError:
    return ConfigError(f"config key {_camel(name)}: {problem}")


def _check_type(name: str, value: Any) -> None:
    allowed = _FIELDS[name][1]
    # bool is an int in Python; a limit of `true` is a typo, not a number.
    is_bool_for_number = isinstance(value, bool) and bool not in allowed
    if is_bool_for_number or not isinstance(value, allowed):
        wanted = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
        raise _error(name, f"must be {wanted}, got {type(value).__name__} {shown(value)}")
    if isinstance(value, (tuple, list)):
        for item in value:
            if not isinstance(item, str) or not item:
                raise _error(name, f"must be a list of tool or argument names, got {shown(item)}")


def shown(value: Any) -> str:
    """`repr(value)`, cut short: an error message must not print, or even build, a huge
    value (a YAML alias bomb's repr runs to hundreds of megabytes)."""
    import reprlib  # only on an error path

    cut = reprlib.Repr()
    cut.maxlevel, cut.maxstring, cut.maxother, cut.maxlong = 2, 80, 80, 40
    cut.maxlist = cut.maxtuple = cut.maxdict = cut.maxset = 4
    try:
        text = cut.repr(value)
    except Exception:  # e.g. an int past str()'s digit limit
        return f"<{type(value).__name__}>"
    return text if len(text) <= 120 else text[:117] + "..."


def _check_messages(message: str | Mapping[str, str] | None, largest: int) -> None:
    if message is None:
        return
    if isinstance(message, str):
        _check_template(message, largest)
        return
    for kind, text in message.items():
        if kind not in KINDS:
            known = ", ".join(repr(k) for k in KINDS)
            raise _error("deny_message", f"unknown kind {shown(kind)} (known: {known})")
        if not isinstance(text, str):
            raise _error("deny_message", f"{kind} must be a string, got {type(text).__name__}")
        _check_template(text, largest)


def _check_limits(limits: Mapping[str, int]) -> None:
    for pattern, limit in limits.items():
        if not isinstance(pattern, str) or not pattern:
            raise _error(
                "tool_limits", f"keys must be tool names or patterns, got {shown(pattern)}"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise _error(
                "tool_limits", f"{pattern}: must be a positive integer, got {shown(limit)}"
            )


def _check_template(text: str, largest: int) -> None:
    """Valid placeholders only, with small widths, and a render that works and stays
    short: `{tool:d}` would make every denial an internal error, `{count:>100000000}`
    a 100 MB message."""
    import string  # only for a custom message; it pulls in `re`

    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise _error("deny_message", f"is not a valid template: {exc}") from None
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            known = ", ".join("{" + p + "}" for p in sorted(PLACEHOLDERS))
            raise _error("deny_message", f"unknown placeholder {shown(name)} (known: {known})")
        if spec and ("{" in spec or any(n > MAX_SPEC_NUMBER for n in _numbers(spec))):
            raise _error(
                "deny_message",
                f"placeholder {shown(name + ':' + spec)}: a width or precision above "
                f"{MAX_SPEC_NUMBER}, or a nested placeholder, is not accepted",
            )
        if spec and spec.endswith("c"):  # past 0x10FFFF (refusals in a row) no character
            raise _error(
                "deny_message",
                f"placeholder {shown(name + ':' + spec)}: the c (character) format renders "
                "only some numbers; use d",
            )
    from .messages import MAX_TOOL, render

    try:  # the smallest and the longest values a denial can carry
        render(text, "", "cap", 0, 0)
        rendered = render(text, "t" * MAX_TOOL, "unavailable", largest, largest, 3)
    except (ValueError, TypeError, OverflowError) as exc:
        raise _error("deny_message", f"cannot be rendered: {exc}") from None
    if len(rendered) > MAX_MESSAGE:
        raise _error(
            "deny_message", f"renders to {len(rendered)} characters (at most {MAX_MESSAGE})"
        )


def _numbers(spec: str) -> list[int]:
    """The runs of digits in a format spec (fill, width, precision), capped in length so
    that a run of a million digits costs nothing to read."""
    runs, run = [], ""
    for char in spec + " ":
        if char.isdigit():
            run += char
        elif run:
            runs.append(int(run[:6]) if len(run) <= 6 else MAX_SPEC_NUMBER + 1)
            run = ""
    return runs


class _ToolMatcher:
    """Answers 'is this tool guarded?' once per tool name; `*` is the only wildcard."""

    __slots__ = ("_cache", "_exempt", "_only")

    def __init__(self, exempt: Iterable[str], only: Iterable[str]) -> None:
        self._only = [p.split("*") for p in only]
        self._exempt = [p.split("*") for p in exempt]
        self._cache: dict[str, bool] = {}

    def matches(self, tool: str) -> bool:
        hit = self._cache.get(tool)
        if hit is None:
            if self._only:
                hit = any(_matches(tool, parts) for parts in self._only)
            else:
                hit = not any(_matches(tool, parts) for parts in self._exempt)
            if len(self._cache) < 4096:
                self._cache[tool] = hit
        return hit


class _BudgetMatcher:
    """Answers 'which budgets count this tool?' once per tool name."""

    __slots__ = ("_cache", "_entries")

    def __init__(self, limits: Mapping[str, int]) -> None:
        self._entries = [(p, limit, p.split("*")) for p, limit in limits.items()]
        self._cache: dict[str, tuple[tuple[str, int], ...]] = {}

    def matches(self, tool: str) -> tuple[tuple[str, int], ...]:
        hit = self._cache.get(tool)
        if hit is None:
            hit = tuple((p, limit) for p, limit, parts in self._entries if _matches(tool, parts))
            if len(self._cache) < 4096:
                self._cache[tool] = hit
        return hit


def _matches(name: str, parts: list[str]) -> bool:
    """Whether `name` matches a pattern split on `*` (greedy leftmost matching of the
    middle pieces is exact for a pattern whose only wildcard is `*`)."""
    if len(parts) == 1:
        return name == parts[0]
    first, *middle, last = parts
    if len(name) < len(first) + len(last) or not name.startswith(first):
        return False
    if not name.endswith(last):
        return False
    position, end = len(first), len(name) - len(last)
    for piece in middle:
        found = name.find(piece, position, end)
        if found < 0:
            return False
        position = found + len(piece)
    return True
