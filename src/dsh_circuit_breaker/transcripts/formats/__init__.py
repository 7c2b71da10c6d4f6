"""The transcript formats: one module per format, holding everything about it, its
detection included, and one line in `FORMATS`.

A format module has `NAME` (what `--format` takes), `HARNESS` (the harness in
`harnesses.HARNESSES` that writes it, whose installed breaker a replay stands for; None:
SPEC's defaults), `SUFFIXES` (file names that settle the format without reading the
file), `sniff(head)` (whether the beginning of a file is in this format: `head.Head`) and
`read(path, problems)` (its transcripts).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from ..head import Head
from ..model import Problems, Transcript
from . import claude_code, dsh, mini_swe, tau2, tau_bench


class Format(Protocol):
    @property
    def NAME(self) -> str: ...

    @property
    def HARNESS(self) -> str | None: ...

    @property
    def SUFFIXES(self) -> tuple[str, ...]: ...

    def sniff(self, head: Head) -> bool: ...

    def read(self, path: str, problems: Problems) -> Iterator[Transcript]: ...


# In the order detection asks them: a format whose documents may also hold another's
# markers comes after it (a mini-swe-agent trajectory has `messages`, as tau-bench's may).
FORMATS: tuple[Format, ...] = (dsh, claude_code, tau2, mini_swe, tau_bench)
