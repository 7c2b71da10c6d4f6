"""Finding transcript files and opening them (plain or zstd-compressed) as text streams."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from typing import TextIO

from ..core.files import open_regular
from .model import Problems

ZSTD_SUFFIXES = (".zstd", ".zst")
SUFFIXES = (".jsonl", ".json", *(f".jsonl{s}" for s in ZSTD_SUFFIXES))
ZSTD_HINT = (
    "note: zstd-compressed transcripts need the optional 'zstandard' package: "
    "pip install 'dsh-circuit-breaker[transcripts]'"
)


class MissingZstandard(RuntimeError):
    pass


# Files that sit beside transcripts and copy some of their rows: reading them too would
# count those calls twice (Claude Code keeps a resume cache in the session's folder).
NOT_TRANSCRIPTS = frozenset({"resume-head.jsonl"})


def is_transcript_name(name: str) -> bool:
    return name.endswith(SUFFIXES) and name not in NOT_TRANSCRIPTS


def walk(paths: list[str], problems: Problems) -> Iterator[str]:
    """Every transcript file under `paths`, in a stable order. A file named on the command
    line is always read (whatever its name); in a directory, only .json/.jsonl(.zstd)."""
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path, onerror=lambda e: _walk_error(e, problems)):
                dirs.sort()
                for name in sorted(files):
                    found = os.path.join(root, name)
                    if is_transcript_name(name) and os.path.isfile(found):
                        yield found
        elif os.path.isfile(path):
            yield path
        elif os.path.exists(path):  # a FIFO would block the reader until someone writes
            problems.report(path, None, "not a regular file")
        else:
            problems.report(path, None, "no such file or directory")


def _walk_error(exc: OSError, problems: Problems) -> None:
    problems.report(str(exc.filename or "?"), None, f"cannot read directory: {exc.strerror}")


def is_zstd(path: str) -> bool:
    if path.endswith(ZSTD_SUFFIXES):
        return True
    try:
        with open(open_regular(path), "rb") as fh:
            return fh.read(4) == b"\x28\xb5\x2f\xfd"  # the zstd frame magic
    except OSError:
        return False


def open_text(path: str) -> TextIO:
    """The file as text; zstd is decompressed on the fly (needs `zstandard`).

    Undecodable bytes become U+FFFD rather than aborting the file: a transcript with one
    bad byte in a tool's output is still worth reading.
    """
    if is_zstd(path):
        try:
            import zstandard
        except ImportError:
            raise MissingZstandard(ZSTD_HINT) from None
        raw = open(open_regular(path), "rb")  # noqa: SIM115 - closed by the wrappers below
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
            buffered = io.BufferedReader(reader, buffer_size=1 << 16)
        except Exception:
            raw.close()
            raise
        return io.TextIOWrapper(buffered, encoding="utf-8", errors="replace", newline="")
    return open(open_regular(path), encoding="utf-8", errors="replace", newline="")
