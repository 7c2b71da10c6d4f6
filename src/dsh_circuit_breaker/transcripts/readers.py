"""Which format a file is in (detected, or forced with --format), and reading many."""

from __future__ import annotations

from collections.abc import Iterator

from .formats import FORMATS as ORDER
from .formats import Format
from .head import Head
from .model import Problems, RecordedCall, Transcript
from .sources import ZSTD_HINT, MissingZstandard

# name -> format, in the order detection asks them.
FORMATS: dict[str, Format] = {fmt.NAME: fmt for fmt in ORDER}


def detect(path: str) -> str | None:
    """The format of one file: the first whose file names it has, else the first that
    recognizes the file's beginning; None if none does."""
    for fmt in ORDER:
        if path.endswith(fmt.SUFFIXES):
            return fmt.NAME
    with Head(path) as head:
        for fmt in ORDER:
            if fmt.sniff(head):
                return fmt.NAME
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
        reader = FORMATS[chosen].read
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

    def guarded(t: Transcript) -> Iterator[RecordedCall]:
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
