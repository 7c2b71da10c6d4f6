"""What format detection reads of a file, for each format's `sniff` to look at: its name,
its first JSONL records, and the top of its JSON document, each read only when a format
asks for it, the file opened once for each.

A file is one or the other: its first records are tried first (a file that starts with a
JSON object), and it is a JSON document only when no format claimed those records and its
name does not say JSONL. So a format's `sniff` looks at the records or at the document
without knowing of the others; `readers.detect` asks the formats in turn.
"""

from __future__ import annotations

import json
import os
from typing import Any, TextIO

from .jsonstream import JsonStream, JsonStreamError
from .sources import open_text

JSONL_SCAN = 50  # lines looked at to recognize a JSONL transcript
DOCUMENT_HEAD = 1 << 20  # characters of a first line read, unless the name says JSONL
NO_ITEM = object()  # `first_item()` of a document that is no array, or an empty one


class Head:
    """The beginning of one file. `name` is its base name; `records()` its first JSONL
    records; `keys(until)`, `first_item()` the top of it as a JSON document."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self._records: list[Any] | None = None
        self._document: _Document | None = None

    def records(self) -> list[Any]:
        """The first records of a file that starts with a JSON object, one per line, up to
        the first line that is not a whole JSON value ([] for any other file)."""
        if self._records is None:
            self._records = _first_records(self.path, self.name)
        return self._records

    @property
    def is_document(self) -> bool:
        """Whether the file may be one JSON document: not named JSONL."""
        return ".jsonl" not in self.name

    def keys(self, until: str | None = None) -> set[str]:
        """The top-level keys of the JSON object the file is, read as far as `until` (all
        of them without it, or when it is not there); empty for a file that is no such
        object, or whose keys cannot be read to there."""
        return self._doc().keys(until) if self.is_document else set()

    def first_item(self) -> Any:
        """The first item of the JSON array the file is, else NO_ITEM."""
        return self._doc().first_item() if self.is_document else NO_ITEM

    def _doc(self) -> _Document:
        if self._document is None:
            self._document = _Document(self.path)
        return self._document

    def close(self) -> None:
        if self._document is not None:
            self._document.close()

    def __enter__(self) -> Head:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_records(path: str, name: str) -> list[Any]:
    with open_text(path) as fh:
        head = fh.read(1)
        while head and head.isspace():
            head = fh.read(1)
        if head != "{":
            return []
        # A JSON document may be one long line: read at most 1 MiB of it here, unless the
        # name says JSONL (where one event line can be that long).
        limit = -1 if ".jsonl" in name else DOCUMENT_HEAD
        lines = [head + fh.readline(limit)]
        while lines[-1].endswith("\n") and len(lines) <= JSONL_SCAN:
            lines.append(fh.readline(limit))
    records = []
    for line in (line for line in lines if line.strip()):
        try:
            records.append(json.loads(line))
        except ValueError:
            break  # not a whole JSON value: a JSON document, or the end of what was read
    return records


class _Document:
    """The top of a JSON document, walked as far as asked (and no further), once."""

    def __init__(self, path: str) -> None:
        self._fh: TextIO | None = open_text(path)
        self._stream = JsonStream(self._fh)
        self._seen: set[str] = set()
        self._members: Any = None  # the walk over the object's keys, while it goes on
        self._unread = False  # the last key's value is still to be skipped
        self._broken = False
        self._first = NO_ITEM
        try:
            self._top = self._stream.peek()
            if self._top == "{":
                self._members = self._stream.members()
            elif self._top == "[":
                for _ in self._stream.items():
                    self._first = self._stream.value()
                    break
        except JsonStreamError:
            self._top, self._broken = "", True

    def keys(self, until: str | None) -> set[str]:
        if self._top != "{":
            return set()
        while not self._broken and self._members is not None and until not in self._seen:
            try:
                if self._unread:
                    self._stream.skip()
                key = next(self._members)
                self._seen.add(key)
                self._unread = key == until  # stop before a value no one asked for
                if not self._unread:
                    self._stream.skip()
            except StopIteration:
                self._members = None
            except JsonStreamError:
                self._broken = True
        if self._broken and until not in self._seen:
            return set()  # the keys could not be read as far as asked
        return set(self._seen)

    def first_item(self) -> Any:
        return self._first

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
