"""A tool result as the rules compare it: normalized, then digested (never kept as text).

Two results of the same call are "the same" when they differ only in what changes on every
call without the work moving: clock times, dates, durations, elapsed and retry counters,
PIDs, temporary paths, object addresses, UUIDs, ANSI codes, spinner frames and redrawn
progress lines. What a moving poll moves (a percentage, a line count, a job's state, a new
line of output) is kept, so it stays progress.

Imported only where results are observed: a hook's pre-tool call never pays for `re`.
"""

from __future__ import annotations

import re

from .cjson import canonical
from .keys import digest

RESULT_DIGEST_SIZE = 8
# A result is judged by its head and its tail: a poll's news is at one end, and a digest of
# megabytes per call would cost more than the decision it feeds.
_EDGE = 32_768

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# A line redrawn in place keeps only what was drawn last.
_REDRAWN = re.compile(r"[^\n]*\r(?!\n)")
_SPINNER = re.compile(r"[\u2800-\u28ff\u25d0-\u25d3\u25f0-\u25f7\u2596-\u259f]")
# Order matters: the longer forms are masked before the shorter ones inside them.
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    # 2026-12-02T04:44:21.123Z, 2026-12-02 04:44:21+00:00, 2026/12/02
    (
        re.compile(
            r"\b\d{4}[-/]\d{2}[-/]\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?)?"
            r"(?:\s?(?:Z|UTC|GMT|[+-]\d{2}:?\d{2}))?"
        ),
        "<time>",
    ),
    # Wed, 02 Dec 2026 04:44:21 GMT; Dec  2 04:44:21; 02/Dec/2026:04:44:21
    (
        re.compile(
            r"\b(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,?\s+)?"
            r"(?:\d{1,2}[\s/-]+)?(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*"
            r"[\s/-]+\d{1,4}(?:,?[\s/:]+\d{2,4})?(?:[\s:]+\d{1,2}:\d{2}(?::\d{2})?)?"
            r"(?:\s?(?:Z|UTC|GMT|[+-]\d{2}:?\d{2}))?",
            re.I,
        ),
        "<time>",
    ),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?:\s?[AP]M)?\b", re.I), "<time>"),
    # Epoch seconds or milliseconds of 2001 to 2286.
    (re.compile(r"\b1\d{9}(?:\d{3})?(?:\.\d+)?\b"), "<time>"),
    # 1.5s, 230 ms, 2m30s, 4 seconds, 1h 2m; a bare number is kept.
    (
        re.compile(
            r"\b\d+(?:\.\d+)?\s?(?:ns|µs|us|ms|s|sec|secs|seconds?|m|mins?|minutes?|h|hrs?|"
            r"hours?|d|days?)\b(?:\s?\d+(?:\.\d+)?\s?(?:ms|s|secs?|seconds?|m|mins?|minutes?))*",
            re.I,
        ),
        "<duration>",
    ),
    # elapsed 12, attempt 3 of 5, retry #2, uptime: 30, pid 4242, PID=17, PGID: 23130
    (
        re.compile(
            r"\b(elapsed|uptime|age|attempts?|retr(?:y|ies)|tries|try|pid|ppid|pgid|tid|process)"
            r"(\s*[:=#]?\s*)\d+(?:\s*(?:/|of)\s*\d+)?",
            re.I,
        ),
        r"\1\2<n>",
    ),
    (re.compile(r"\b0x[0-9a-f]{6,16}\b", re.I), "<addr>"),
    (
        re.compile(r"(?:/tmp|/var/tmp|/private/var/folders|/var/folders|/dev/shm)/[^\s'\"]+"),
        "<tmp>",
    ),
    (re.compile(r"\btmp[a-z0-9_]{6,}\b", re.I), "<tmp>"),
)
_TRAILING = re.compile(r"[ \t]+$", re.M)
_BLANKS = re.compile(r"\n{3,}")


def normalize(text: str) -> str:
    """`text` with what changes on every call masked (see the module's docstring)."""
    if len(text) > 2 * _EDGE:
        text = text[:_EDGE] + "\n<cut>\n" + text[-_EDGE:]
    text = _ANSI.sub("", text)
    text = _REDRAWN.sub("", text.replace("\r\n", "\n"))
    text = _SPINNER.sub("", text)
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return _BLANKS.sub("\n\n", _TRAILING.sub("", text)).strip()


def result_text(result: object) -> str:
    """A result as text: a string as is; anything else as canonical JSON (its string
    fields normalized the same way once joined)."""
    if isinstance(result, str):
        return result
    if isinstance(result, bytes):
        return result.decode("utf-8", "replace")
    try:
        return canonical(result)
    except (TypeError, ValueError, RecursionError):
        return repr(result)


def result_digest(result: object) -> bytes:
    """The fixed-size digest of a result's normalized text: all that is kept of it."""
    text = normalize(result_text(result))
    data = text.encode("utf-8", "surrogatepass")
    return digest(data, RESULT_DIGEST_SIZE)
