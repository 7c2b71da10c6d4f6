"""Which reader a file needs (auto-detected, or forced with --format), and reading many."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator

from .formats import claude_code, dsh, mini_swe, openai_chat, tau2
from .jsonstream import JsonStream, JsonStreamError
from .model import Call, Problems, Transcript
from .sources import ZSTD_HINT, MissingZstandard, open_text

Reader = Callable[[str, Problems], Iterator[Transcript]]

FORMATS: dict[str, Reader] = {
    dsh.NAME: dsh.read,
    claude_code.NAME: claude_code.read,
    openai_chat.NAME: openai_chat.read,
    tau2.NAME: tau2.read,
    mini_swe.NAME: mini_swe.read,
}
JSONL_SCAN = 50  # lines looked at to recognize a JSONL transcript


def detect(path: str) -> str | None:
    """The format of one file, from its name and first records; None if unrecognized."""
    name = os.path.basename(path)
    if name.endswith(".traj.json"):
        return mini_swe.NAME
    with open_text(path) as fh:
        head = fh.read(1)
        while head and head.isspace():
            head = fh.read(1)
        if head == "{":
            # A JSON document may be one long line: read at most 1 MiB of it here, unless
            # the name says JSONL (where one event line can be that long).
            limit = -1 if ".jsonl" in name else 1 << 20
            lines = [head + fh.readline(limit)]
            while lines[-1].endswith("\n") and len(lines) <= JSONL_SCAN:
                lines.append(fh.readline(limit))
            found = _detect_jsonl([line for line in lines if line.strip()])
            if found is not None:
                return found
    if ".jsonl" in name:
        return None
    return _detect_json(path)


def _detect_jsonl(lines: list[str]) -> str | None:
    for index, line in enumerate(lines):
        try:
            obj = json.loads(line)
        except ValueError:
            return None  # the first line was not a whole JSON value: a JSON document
        if index == 0 and dsh.is_header(obj):
            return dsh.NAME
        if claude_code.is_entry(obj):
            return claude_code.NAME
    return None


def _detect_json(path: str) -> str | None:
    with open_text(path) as fh:
        stream = JsonStream(fh)
        try:
            first = stream.peek()
            if first == "[":
                for _ in stream.items():
                    item = stream.value()
                    if openai_chat.is_record(item) or openai_chat.is_message(item):
                        return openai_chat.NAME
                    return None
                return None
            if first != "{":
                return None
            keys = set()
            for key in stream.members():
                if key == "simulations":
                    return tau2.NAME
                keys.add(key)
                stream.skip()
        except JsonStreamError:
            return None
    if "trajectory_format" in keys or "instance_id" in keys:
        return mini_swe.NAME
    if "traj" in keys or "messages" in keys:
        return openai_chat.NAME
    return None


def read_transcripts(
    files: Iterator[str] | list[str], problems: Problems, fmt: str | None = None
) -> Iterator[Transcript]:
    """Every transcript in `files`. Nothing here raises for bad input: an unreadable or
    malformed file or line is reported to `problems` and skipped."""
    for path in files:
        try:
            chosen = fmt if fmt not in (None, "auto") else detect(path)
        except MissingZstandard:
            _missing_zstd(path, problems)
            continue
        except OSError as exc:
            problems.report(path, None, f"cannot read: {exc.strerror or exc}")
            continue
        if chosen is None:
            problems.report(path, None, "transcript format not recognized (try --format)")
            continue
        reader = FORMATS[chosen]
        try:
            for transcript in reader(path, problems):
                yield _guarded(transcript, problems)
        except MissingZstandard:
            _missing_zstd(path, problems)
        except OSError as exc:
            problems.report(path, None, f"cannot read: {exc.strerror or exc}")
        except Exception as exc:  # a shape no reader foresaw: skip the file, keep the report
            problems.report(path, None, f"skipped: {type(exc).__name__}: {exc}")


def _missing_zstd(path: str, problems: Problems) -> None:
    problems.note(ZSTD_HINT)
    problems.report(path, None, "zstd-compressed and the 'zstandard' package is not installed")


def _guarded(transcript: Transcript, problems: Problems) -> Transcript:
    """Calls are read lazily, so a read error surfaces while they are iterated: catch it
    there, report it, and end that transcript's calls instead of the whole report."""
    produce = transcript._calls
    if produce is None:
        return transcript

    def guarded(t: Transcript) -> Iterator[Call]:
        try:
            yield from produce(t)
        except MissingZstandard:
            _missing_zstd(t.source, problems)
        except OSError as exc:
            problems.report(t.source, None, f"cannot read: {exc.strerror or exc}")
        except Exception as exc:
            problems.report(t.source, None, f"rest skipped: {type(exc).__name__}: {exc}")

    transcript._calls = guarded
    return transcript
