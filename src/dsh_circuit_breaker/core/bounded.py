"""A big hook event read in bounded memory: what a call is judged on, not its whole tree.

Parsed whole, JSON of many small objects takes about 30 times its text in Python objects
(a 16 MiB event: over 300 MB in a hook process, gigabytes in `serve --http` with a few
at once). Yet the breaker needs little of it: the harness's small identity fields, the
tool's name, and digests of the arguments and of the result. So an event past
`judge.BIG_EVENT_BYTES` (1 MiB) is read here:

- the event object, and each object among its members (`tool_input`, `tool_response`),
  are read member by member, so that every field a harness looks up is there as usual,
  and `ignoreArgs` drops an argument of a big call as it does of any call;
- every other value is parsed whole (`cjson.loads`, else `lenient.read`) if it is a
  string or a number, or a container that fits what is left of its event member's
  BUDGET of built bytes; a container past it is one opaque value,
  `{"dsh-circuit-breaker/opaque": hex}`, the digest of its bytes as sent; so is a
  member object of more than MAX_MEMBERS members (an event of more is not a harness's).

The digest keeps the breaker's two promises: identical copies of a call stay identical
(the same bytes, the same digest), and calls that differ in a byte differ. It can only
tell more calls apart than a parse would (the same value spelled with other whitespace
or key order digests differently), so it can never merge two calls, never deny by
accident; a big result's clock times inside an opaque container are not masked
(results.py), so such a result moves on every call and its poll runs on. A member's
budget depends on its own bytes alone, so a call's arguments read alike in its pre-tool
event and its larger post-tool one; and an event at most that big has no member past its
budget, so it reads exactly as a parse would.

A container's end is found without building it: a regular expression (in C) takes runs
of text, strings and containers nested up to three deep, 4,096 at a time (a bounded
repeat: an unbounded one keeps a frame per item, hundreds of MB); deeper brackets are
counted in Python, a run of them at a time.
"""

from __future__ import annotations

import re
from typing import Any

from .cjson import loads
from .lenient import opaque
from .lenient import read as read_leniently

# Containers an event member may build: at least as much as a whole event read the usual
# way (`judge.BIG_EVENT_BYTES`, which cannot be imported from here: judge is a layer up),
# so that an event that size reads the same either way (tests/test_bounded.py).
BUDGET = 1024 * 1024
# Members of an object read member by member: a harness's event has a dozen, a tool's
# arguments a few; each costs Python objects whatever its size.
MAX_MEMBERS = 10_000
MEMBERS_BUDGET = 2 * BUDGET  # the whole event: its arguments and its result

_SPACE = re.compile(rb"[ \t\n\r]*")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(rb"[^ \t\n\r,\]}]+")
_SPACES = b" \t\n\r"
_OPENING = re.compile(rb"[\[{][\[{ \t\n\r]*")
_CLOSING = re.compile(rb"[\]}][\]} \t\n\r]*")
_TEXT = rb'[^"\[\]{}]'  # not a string, not a bracket


def _nested(inner: bytes) -> bytes:
    """A container whose items are `inner` (unrolled: one way to match each byte)."""
    return rb"[\[{]" + _TEXT + rb"*(?:(?:" + inner + rb")" + _TEXT + rb"*)*[\]}]"


_FLAT = _nested(_STRING.pattern)
_THREE_DEEP = _nested(_STRING.pattern + b"|" + _nested(_STRING.pattern + b"|" + _FLAT))
_RUN = re.compile(
    _TEXT + rb"*(?:(?:" + _STRING.pattern + b"|" + _THREE_DEEP + rb")" + _TEXT + rb"*){0,4096}",
    re.DOTALL,
)


class _Reader:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.view = memoryview(raw)  # digested in place, not copied
        self.notes: list[str] = []
        self.opaque = 0
        self.left = MEMBERS_BUDGET
        self.budget = BUDGET  # what the event member being read may still build

    def event(self) -> dict[str, Any]:
        pos = self._space(0)
        if self.raw[pos : pos + 1] != b"{":
            raise ValueError("not a JSON object")
        value, end = self._object(pos, opened=True)
        if self._space(end) != len(self.raw):
            raise ValueError("not JSON: data after the value")
        return value

    def _object(self, pos: int, opened: bool) -> tuple[dict[str, Any], int]:
        """The object at `pos` member by member; `opened`: the event itself, whose
        object members are read member by member too, each with a budget of its own.
        Past MAX_MEMBERS members an event is not a harness's; a member object is opaque."""
        raw, start = self.raw, pos
        found: dict[str, Any] = {}
        pos = self._space(pos + 1)
        if raw[pos : pos + 1] == b"}":
            return found, pos + 1
        for _ in range(MAX_MEMBERS):
            end = self._string_end(pos)
            key = self._small(pos, end)
            pos = self._space(end)
            if raw[pos : pos + 1] != b":":
                raise ValueError(f"not JSON at {pos}: ':' expected")
            pos = self._space(pos + 1)
            if opened:
                self.budget = BUDGET
            if opened and raw[pos : pos + 1] == b"{":
                found[key], pos = self._object(pos, opened=False)
            else:
                found[key], pos = self._value(pos)
            pos = self._space(pos)
            mark = raw[pos : pos + 1]
            if mark == b"}":
                return found, pos + 1
            if mark != b",":
                raise ValueError(f"not JSON at {pos}: ',' or '}}' expected")
            pos = self._space(pos + 1)
        if opened:
            raise ValueError(f"an event object of over {MAX_MEMBERS} members")
        found.clear()
        end = self._end(start)
        return self._opaque(start, end), end

    def _value(self, pos: int) -> tuple[Any, int]:
        end = self._end(pos)
        size = end - pos
        if self.raw[pos : pos + 1] not in (b"[", b"{"):
            return self._small(pos, end), end
        if size > min(self.budget, self.left):
            return self._opaque(pos, end), end
        self.budget -= size
        self.left -= size
        return self._small(pos, end), end

    def _opaque(self, pos: int, end: int) -> dict[str, str]:
        self.opaque += 1
        return opaque(self.view[pos:end])

    def _small(self, pos: int, end: int) -> Any:
        data = self.raw[pos:end]
        try:
            return loads(data)
        except (ValueError, RecursionError):
            value, notes = read_leniently(data)
            self.notes += notes
            return value

    def _end(self, pos: int) -> int:
        """Where the value at `pos` ends, nothing of it built."""
        raw = self.raw
        mark = raw[pos : pos + 1]
        if mark == b'"':
            return self._string_end(pos)
        if mark not in (b"[", b"{"):
            scalar = _SCALAR.match(raw, pos)
            if scalar is None:
                raise ValueError(f"not JSON at {pos}")
            return scalar.end()
        depth = 0
        while True:
            run = _OPENING.match(raw, pos)
            if run is not None:  # a run of them at once: hostile nesting is millions deep
                depth += len(run.group().translate(None, _SPACES))
                pos = run.end()
                continue
            run = _CLOSING.match(raw, pos)
            if run is not None:
                closed = len(run.group().translate(None, _SPACES))
                if closed >= depth:
                    return self._closed(pos, run.end(), depth)
                depth -= closed
                pos = run.end()
                continue
            run = _RUN.match(raw, pos)
            if run is None or run.end() == pos:  # an unclosed string, or the end
                raise ValueError(f"not JSON at {pos}: a container is not closed")
            pos = run.end()

    def _closed(self, pos: int, end: int, depth: int) -> int:
        """Where the `depth`-th closing bracket of the run from `pos` to `end` ends."""
        while True:
            chunk = self.raw[pos : min(end, pos + 4096)]
            found = len(chunk.translate(None, _SPACES))
            if found >= depth:
                for i, byte in enumerate(chunk):
                    depth -= byte in b"]}"
                    if depth == 0:
                        return pos + i + 1
            depth -= found
            pos += len(chunk)

    def _string_end(self, pos: int) -> int:
        string = _STRING.match(self.raw, pos)
        if string is None:
            raise ValueError(f"not JSON at {pos}: a string expected")
        return string.end()

    def _space(self, pos: int) -> int:
        space = _SPACE.match(self.raw, pos)
        return space.end() if space else pos


def read(raw: bytes) -> tuple[dict[str, Any], list[str]]:
    """The event object in `raw`, its big containers opaque (see the module's docstring),
    and what was unusual about it (a phrase each); ValueError if it is not an object."""
    reader = _Reader(raw)
    event = reader.event()
    if reader.opaque:
        reader.notes.append(
            f"{reader.opaque} containers past {BUDGET} bytes judged by a digest of their bytes"
        )
    return event, reader.notes
