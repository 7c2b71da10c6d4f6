"""Reading agent transcripts (DSH, Claude Code, tau-bench, tau2-bench, mini-swe-agent) as
streams of tool calls, for the `analyze`, `replay` and `calibrate` commands."""

from __future__ import annotations

from .model import Problem, Problems, RecordedCall, Transcript
from .readers import FORMATS, detect, read_transcripts
from .sources import walk

__all__ = [
    "FORMATS",
    "Problem",
    "Problems",
    "RecordedCall",
    "Transcript",
    "detect",
    "read_transcripts",
    "walk",
]
