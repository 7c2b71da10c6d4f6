"""Walking a large JSON document one value at a time.

A tau2-bench results file or a tau-bench list holds every run in one JSON document; loading
it whole would make memory grow with the file. This reader walks the outer object or array
itself and decodes one member at a time with the standard library's C decoder, so memory
is bounded by the largest single member (one run), not by the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TextIO

_WHITESPACE = " \t\n\r"
_decoder = json.JSONDecoder()
_NUMBER = frozenset("0123456789.eE+-")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class JsonStreamError(ValueError):
    """Invalid JSON at `line` (1-based) and `offset` (characters from the start)."""

    def __init__(self, message: str, line: int, offset: int) -> None:
        super().__init__(f"{message} at character {offset}")
        self.line = line
        self.offset = offset


class JsonStream:
    """A cursor over one JSON text read from `stream` in chunks."""

    def __init__(self, stream: TextIO, chunk: int = 1 << 16, max_value: int = 1 << 30) -> None:
        self._stream = stream
        self._chunk = chunk
        self._max_value = max_value  # a single member larger than this is refused, not buffered
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._line = 1  # line number of self._pos
        self._counted = 0  # self._line counts newlines in self._buf[:self._counted]
        self._dropped = 0  # characters already dropped from the front of the buffer

    @property
    def line(self) -> int:
        self._sync_line()
        return self._line

    def _sync_line(self) -> None:
        if self._counted < self._pos:
            self._line += self._buf.count("\n", self._counted, self._pos)
            self._counted = self._pos

    def _more(self, at_least: int) -> bool:
        if self._eof:
            return False
        self._sync_line()
        if self._pos > self._chunk:  # drop what was consumed so the buffer stays small
            self._buf = self._buf[self._pos :]
            self._dropped += self._pos
            self._counted -= self._pos
            self._pos = 0
        data = self._stream.read(max(self._chunk, at_least))
        if not data:
            self._eof = True
            return False
        self._buf += data
        return True

    def peek(self) -> str:
        """The next non-blank character ('' at the end), without consuming it."""
        while True:
            buf, pos, end = self._buf, self._pos, len(self._buf)
            while pos < end and buf[pos] in _WHITESPACE:
                pos += 1
            self._pos = pos
            if pos < end:
                return buf[pos]
            if not self._more(0):
                return ""

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise self.error(f"expected {char!r}, found {found or 'end of file'!r}")
        self._pos += 1

    def error(self, message: str) -> JsonStreamError:
        return JsonStreamError(message, self.line, self._dropped + self._pos)

    def value(self) -> Any:
        """Decode the next value whole."""
        if not self.peek():
            raise self.error("unexpected end of file")
        want = self._chunk
        while True:
            try:
                value, end = _decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                if self._eof or len(self._buf) - self._pos > self._max_value:
                    line = self.line + self._buf.count("\n", self._pos, exc.pos)
                    raise JsonStreamError(exc.msg, line, self._dropped + exc.pos) from None
                # Probably cut by the chunk boundary: read more, twice as much each time,
                # so a large member costs O(size) in total and not O(size^2).
                self._more(want)
                want *= 2
                continue
            if not self._eof and _number(value) and self._cut_number(end) and self._more(want):
                continue  # a number at the boundary ("12" of "123", "0" of "0.5") may go on
            self._pos = end
            return value

    def _cut_number(self, end: int) -> bool:
        """Whether only number characters follow `end` up to the end of the buffer."""
        buf = self._buf
        return all(char in _NUMBER for char in buf[end : end + 64]) and len(buf) - end <= 64

    def skip(self) -> None:
        self.value()

    def items(self) -> Iterator[None]:
        """After '[': yield once per element; the caller must consume it."""
        self.expect("[")
        if self.peek() == "]":
            self._pos += 1
            return
        while True:
            yield None
            nxt = self.peek()
            self._pos += 1
            if nxt == "]":
                return
            if nxt != ",":
                self._pos -= 1
                raise self.error(f"expected ',' or ']' in a list, found {nxt or 'end of file'!r}")

    def members(self) -> Iterator[str]:
        """After '{': yield each key; the caller must consume its value."""
        self.expect("{")
        if self.peek() == "}":
            self._pos += 1
            return
        while True:
            if self.peek() != '"':
                raise self.error("expected a key")
            key = self.value()
            self.expect(":")
            yield key
            nxt = self.peek()
            self._pos += 1
            if nxt == "}":
                return
            if nxt != ",":
                self._pos -= 1
                raise self.error(
                    f"expected ',' or '}}' in an object, found {nxt or 'end of file'!r}"
                )

    def end(self) -> None:
        if self.peek():
            raise self.error("unexpected data after the JSON value")
