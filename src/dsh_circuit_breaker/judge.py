"""One hook event in, the harness's answer out: the translation every transport shares,
and what a harness module's `parse` makes of an event (`Call`, `Outcome`, `Prompt`, or
`Malformed` raised): here, not in the registry (`harnesses/__init__.py`), so that a
harness module never imports the registry that imports it. The command hook (`hook.py`,
a process per event) and the HTTP guard (`guard/`, one process for all) both read an
event with `event_of` and answer it with `judge`; only the process around them differs.
"""

from __future__ import annotations

from .core.cjson import loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .core.breaker import Decision
    from .core.config import Config
    from .harnesses._contract import Answers


class Malformed(ValueError):
    """An event the hook cannot judge: allowed, with one line on stderr."""


class Call:
    """A tool call to judge: `agent` (the store key), `tool`, `arguments`, and `call_id`,
    the harness's id for the call where it gives one (it only labels exported telemetry)."""

    __slots__ = ("agent", "arguments", "call_id", "tool")

    def __init__(self, agent: str, tool: str, arguments: Any, call_id: str | None = None) -> None:
        self.agent = agent
        self.tool = tool
        self.arguments = arguments
        self.call_id = call_id


class Outcome:
    """What an allowed call returned, from the harness's post-tool event: `agent` (the key
    its pre-tool event had), `tool`, `arguments` (as the call had them), `result` (the
    part of the event that says what the model got back; only its digest is kept)."""

    __slots__ = ("agent", "arguments", "result", "tool")

    def __init__(self, agent: str, tool: str, arguments: Any, result: Any) -> None:
        self.agent = agent
        self.tool = tool
        self.arguments = arguments
        self.result = result


class Prompt:
    """A new user prompt: `agent` (the main agent) starts afresh with resetOnUserPrompt."""

    __slots__ = ("agent",)

    def __init__(self, agent: str) -> None:
        self.agent = agent


def subagent_key(parent: str, sub: str) -> str:
    """`parent/sub`, each part with `%` and `/` escaped: session `a/b` must not be taken
    for subagent `b` of session `a` (ids without either, UUIDs, stay as they are)."""
    return f"{escaped_id(parent)}/{escaped_id(sub)}"


def escaped_id(part: str) -> str:
    if "/" not in part and "%" not in part:
        return part
    return part.replace("%", "%25").replace("/", "%2F")


# A hook event is a few kilobytes; a Write of a large file can reach megabytes. Past this
# the event is not judged (allowed), rather than letting one call eat memory and time.
MAX_EVENT_BYTES = 16 * 1024 * 1024
# Past this an event is read by `bounded.read` (its value as bounded.BIG): parsed whole, a
# tree of small objects takes 30 times its text.
BIG_EVENT_BYTES = 1024 * 1024


def event_of(raw: bytes) -> dict[str, Any]:
    """The hook event `raw` holds; `Malformed` for anything that is not one."""
    if len(raw) > MAX_EVENT_BYTES:
        raise Malformed(f"event larger than {MAX_EVENT_BYTES} bytes, not judged")
    if len(raw) > BIG_EVENT_BYTES:
        return _read_in_bounded_memory(raw)
    try:
        event = loads(raw)
    except (ValueError, RecursionError):
        event = _read_as_the_harness_does(raw)
    if not isinstance(event, dict):
        raise Malformed(f"a hook event must be a JSON object, got {type(event).__name__}")
    return event


def _read_in_bounded_memory(raw: bytes) -> dict[str, Any]:
    """A big event with its big containers digested (`bounded`), one line if any was."""
    from .core._log import warn
    from .core.bounded import read

    try:
        event, notes = read(raw)
    except ValueError:
        raise Malformed("the input is not a JSON hook event") from None
    if notes:
        warn("dsh-circuit-breaker: big hook event judged as read: %s", "; ".join(notes))
    return event


def _read_as_the_harness_does(raw: bytes) -> Any:
    """An event our strict parser refused but its harness sent, so its call will run (bad
    UTF-8, deep nesting, a long integer): read as the harness reads it, with one line."""
    from .core._log import warn
    from .core.lenient import read

    try:
        event, notes = read(raw)
    except ValueError:
        raise Malformed("the input is not a JSON hook event") from None
    warn(
        "dsh-circuit-breaker: unusual hook event judged as read: %s",
        "; ".join(notes) or "read leniently",
    )
    return event


def judge(
    harness: Answers, what: Call | Prompt | Outcome, config: Config, breaker: Callable[[], Any]
) -> tuple[str | None, Decision | None]:
    """What the harness gets back for one parsed event, and the decision behind it (None
    for an event that is not a judged call).

    `breaker` returns the breaker to use; it is called only when the event needs one,
    so an unguarded call, and a result no rule reads, opens no store. A result is
    recorded and answered with nothing: the call ran already, there is nothing to say.
    """
    if isinstance(what, Call):
        if not config.enabled or not config.guards(what.tool):
            return None, None
        decision: Decision = breaker().check(what.agent, what.tool, what.arguments, what.call_id)
        answer: str | None = harness.answer(decision)
        return answer, decision
    if isinstance(what, Outcome):
        if config.observes_results and config.enabled and config.guards(what.tool):
            breaker().observe(what.agent, what.tool, what.arguments, what.result)
        return None, None
    if config.reset_on_user_prompt:
        breaker().reset(what.agent)
    return None, None
