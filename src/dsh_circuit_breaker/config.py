"""The breaker's configuration: defaults from SPEC, validation at load, tool matching."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

DEFAULT_EXEMPT = ("todo_write", "ask_user_question", "exit_plan_mode")
DEFAULT_IGNORE_ARGS = ("description", "explanation", "reason", "thought", "purpose")
PLACEHOLDERS = frozenset({"tool", "count", "limit", "kind"})
KINDS = ("duplicate", "cap")
SEVEN_DAYS = 7 * 24 * 3600


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the offending key."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass(frozen=True)
class Config:
    """What the breaker enforces. Field names are snake_case; files may use camelCase."""

    duplicate_limit: int = 6
    window: int = 200
    reset_on_new_call: bool = True
    max_calls_per_agent: int = 300
    exempt: tuple[str, ...] = DEFAULT_EXEMPT
    only: tuple[str, ...] = ()
    ignore_args: tuple[str, ...] = DEFAULT_IGNORE_ARGS
    deny_message: str | Mapping[str, str] | None = None
    incident_log: str | None = None
    enabled: bool = True
    # For harnesses whose state outlives a process (command hooks, shared stores).
    reset_on_user_prompt: bool = True
    idle_expiry_seconds: int = SEVEN_DAYS
    fail_closed: bool = False
    store_timeout: float = 2.0
    _matcher: _ToolMatcher = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.init:
                _check_type(f.name, getattr(self, f.name))
        for name in ("exempt", "only", "ignore_args"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.incident_log == "":
            object.__setattr__(self, "incident_log", None)
        if self.duplicate_limit < 1:
            raise _error("duplicate_limit", f"must be at least 1, got {self.duplicate_limit}")
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
        if self.idle_expiry_seconds < 1:
            raise _error(
                "idle_expiry_seconds", f"must be at least 1, got {self.idle_expiry_seconds}"
            )
        if self.store_timeout <= 0:
            raise _error("store_timeout", f"must be above 0, got {self.store_timeout}")
        _check_messages(self.deny_message)
        object.__setattr__(self, "_matcher", _ToolMatcher(self.exempt, self.only))

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], base: Config | None = None) -> Config:
        """Build from a config file's mapping (camelCase or snake_case keys) over `base`."""
        if not isinstance(mapping, Mapping):
            raise ConfigError(f"config must be a mapping, got {type(mapping).__name__}")
        names = {f.name: f.name for f in fields(cls) if f.init}
        names.update({_camel(n): n for n in list(names)})
        values: dict[str, Any] = {}
        for key, value in mapping.items():
            name = names.get(key) if isinstance(key, str) else None
            if name is None:
                known = ", ".join(sorted(_camel(n) for n in set(names.values())))
                raise ConfigError(f"unknown config key {key!r} (known keys: {known})")
            if name in values:
                raise ConfigError(f"config key {_camel(name)} given twice")
            if name in ("exempt", "only", "ignore_args") and isinstance(value, list):
                value = tuple(value)
            values[name] = value
        start = base if base is not None else cls()
        merged = {f.name: getattr(start, f.name) for f in fields(cls) if f.init}
        merged.update(values)
        return cls(**merged)

    def to_mapping(self) -> dict[str, Any]:
        """The camelCase form a config file would hold."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.init:
                value = getattr(self, f.name)
                if isinstance(value, tuple):
                    value = list(value)
                elif isinstance(value, Mapping):
                    value = dict(value)
                out[_camel(f.name)] = value
        return out

    def guards(self, tool: str) -> bool:
        """Whether the breaker looks at calls of `tool` at all."""
        return self._matcher(tool)

    def message_template(self, kind: str) -> str:
        from .messages import DEFAULT_MESSAGES

        if self.deny_message is None:
            return DEFAULT_MESSAGES[kind]
        if isinstance(self.deny_message, str):
            return self.deny_message
        return self.deny_message.get(kind, DEFAULT_MESSAGES[kind])


_TYPES: dict[str, tuple[type, ...]] = {
    "duplicate_limit": (int,),
    "window": (int,),
    "reset_on_new_call": (bool,),
    "max_calls_per_agent": (int,),
    "exempt": (tuple, list),
    "only": (tuple, list),
    "ignore_args": (tuple, list),
    "deny_message": (str, Mapping, type(None)),
    "incident_log": (str, type(None)),
    "enabled": (bool,),
    "reset_on_user_prompt": (bool,),
    "idle_expiry_seconds": (int,),
    "fail_closed": (bool,),
    "store_timeout": (int, float),
}


def _error(name: str, problem: str) -> ConfigError:
    return ConfigError(f"config key {_camel(name)}: {problem}")


def _check_type(name: str, value: Any) -> None:
    allowed = _TYPES[name]
    # bool is an int in Python; a limit of `true` is a typo, not a number.
    is_bool_for_number = isinstance(value, bool) and bool not in allowed
    if is_bool_for_number or not isinstance(value, allowed):
        wanted = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
        raise _error(name, f"must be {wanted}, got {type(value).__name__} {value!r}")
    if isinstance(value, (tuple, list)):
        for item in value:
            if not isinstance(item, str) or not item:
                raise _error(name, f"must be a list of tool or argument names, got {item!r}")


def _check_messages(message: str | Mapping[str, str] | None) -> None:
    if message is None:
        return
    if isinstance(message, str):
        _check_template(message)
        return
    for kind, text in message.items():
        if kind not in KINDS:
            raise _error("deny_message", f"unknown kind {kind!r} (use 'duplicate' and 'cap')")
        if not isinstance(text, str):
            raise _error("deny_message", f"{kind} must be a string, got {type(text).__name__}")
        _check_template(text)


def _check_template(text: str) -> None:
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise _error("deny_message", f"is not a valid template: {exc}") from None
    for _, name, _, _ in parsed:
        if name is not None and name not in PLACEHOLDERS:
            known = ", ".join("{" + p + "}" for p in sorted(PLACEHOLDERS))
            raise _error("deny_message", f"unknown placeholder {{{name}}} (known: {known})")


class _ToolMatcher:
    """Answers 'is this tool guarded?' once per tool name; `*` is the only wildcard."""

    __slots__ = ("_cache", "_exempt", "_only")

    def __init__(self, exempt: Iterable[str], only: Iterable[str]) -> None:
        self._only = _compile(only)
        self._exempt = _compile(exempt)
        self._cache: dict[str, bool] = {}

    def __call__(self, tool: str) -> bool:
        hit = self._cache.get(tool)
        if hit is None:
            if self._only is not None:
                hit = self._only.fullmatch(tool) is not None
            else:
                hit = self._exempt is None or self._exempt.fullmatch(tool) is None
            if len(self._cache) < 4096:
                self._cache[tool] = hit
        return hit


def _compile(patterns: Iterable[str]) -> re.Pattern[str] | None:
    parts = [".*".join(re.escape(piece) for piece in p.split("*")) for p in patterns]
    return re.compile("|".join(parts), re.DOTALL) if parts else None
