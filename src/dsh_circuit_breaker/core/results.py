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

from .cjson import canonical, loads
from .keys import digest
from .state import RESULT_DIGEST_SIZE

# A result is judged by its head and its tail: a poll's news is at one end, and a digest of
# megabytes per call would cost more than the decision it feeds.
_EDGE = 32_768

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_SPINNER = re.compile(r"[\u2800-\u28ff\u25d0-\u25d3\u25f0-\u25f7\u2596-\u259f]")
# JSON fields (also as escaped JSON inside a JSON string) whose values change on every call
# by what their name says: ids and nonces, times and dates, durations, PIDs. camelCase or
# snake_case suffixes only, so that `valid` or `items` are not taken for `id` or `ms`.
_KEY_NAMES = (
    r"[A-Za-z_]*(?:Id|ID|_id|Ids|_ids|Uuid|_uuid|Nonce|_nonce|Pid|_pid)"
    r"|[A-Za-z_]*(?:At|_at|Time|_time|Timestamp|_timestamp|Date|_date|Ms|_ms|Seconds|_seconds)"
    r"|[A-Za-z_]*(?:Duration|_duration|Elapsed|_elapsed|Latency|_latency|Uptime|_uptime)[A-Za-z]*"
    r"|id|ids|uuid|guid|nonce|pid|ppid|at|time|timestamp|ts|date|ms|seconds|took"
    r"|duration\w*|elapsed\w*|latency\w*|uptime\w*"
)
_KEYED = re.compile(
    r'(\\?")(' + _KEY_NAMES + r")\1\s*:\s*"
    r"(?:\1.*?\1|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
)
# Order matters: the longer forms are masked before the shorter ones inside them.
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (_KEYED, r"\1\2\1:<v>"),
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
    # 1/2/2026, 12/31/26, 31.12.2026
    (re.compile(r"\b\d{1,2}/\d{1,2}/(?:\d{4}|\d{2})\b|\b\d{1,2}\.\d{1,2}\.\d{4}\b"), "<time>"),
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
            r'(\s*"?\s*[:=#]?\s*)\d+(?:\s*(?:/|of)\s*\d+)?',
            re.I,
        ),
        r"\1\2<n>",
    ),
    # session sess-3, request id: r-17 (a job or task number may be news: kept)
    (
        re.compile(
            r"\b(session|request|trace|span|correlation)(\s*(?:id)?\s*[:=#]?\s*)"
            r"[A-Za-z0-9_.-]*\d[A-Za-z0-9_.-]*",
            re.I,
        ),
        r"\1\2<id>",
    ),
    (re.compile(r"\b0x[0-9a-f]{6,16}\b", re.I), "<addr>"),
    (
        re.compile(r"(?:/tmp|/var/tmp|/private/var/folders|/var/folders|/dev/shm)/[^\s'\"]+"),
        "<tmp>",
    ),
    (re.compile(r"\btmp[a-z0-9_]{6,}\b", re.I), "<tmp>"),
)
_BLANKS = re.compile(r"\n{3,}")


def normalize(text: str) -> str:
    """`text` with what changes on every call masked (see the module's docstring)."""
    if len(text) > 2 * _EDGE:
        text = text[:_EDGE] + "\n<cut>\n" + text[-_EDGE:]
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    # A line redrawn in place (\r) keeps what was drawn last; trailing blanks go. Line by
    # line, not by a regex: `[^\n]*\r` or `[ \t]+$` is quadratic on one long line.
    lines = [line.rpartition("\r")[2].rstrip(" \t") for line in text.split("\n")]
    text = _SPINNER.sub("", "\n".join(lines))
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return _BLANKS.sub("\n\n", text).strip()


def result_text(result: object) -> str:
    """A result as text: a string as is; anything else as canonical JSON (its string
    fields normalized the same way once joined)."""
    if isinstance(result, str):
        return _canonical_json(result)
    if isinstance(result, bytes):
        return result.decode("utf-8", "replace")
    try:
        return canonical(result)
    except (TypeError, ValueError, RecursionError):
        return repr(result)


def _canonical_json(text: str) -> str:
    """A result that is JSON text, as canonical JSON: its key order is not news."""
    if len(text) > 2 * _EDGE or text.lstrip()[:1] not in ("{", "["):
        return text
    try:
        return canonical(loads(text))
    except (TypeError, ValueError, RecursionError):
        return text


def result_digest(result: object) -> bytes:
    """The fixed-size digest of a result's normalized text: all that is kept of it."""
    text = normalize(result_text(result))
    data = text.encode("utf-8", "surrogatepass")
    return digest(data, RESULT_DIGEST_SIZE)
