"""The peer suites (bench/peer_suites): the committed scenario files are what build.py
writes, and every scenario is one our replay reads as its expectation says (a loop long
enough that only a rule that never stops it reaches the 300-call cap)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_circuit_breaker.transcripts.analysis import runs_of
from dsh_circuit_breaker.transcripts.model import Problems
from dsh_circuit_breaker.transcripts.readers import read_transcripts

SUITES = Path(__file__).resolve().parents[1] / "bench" / "peer_suites"
FILES = sorted(SUITES.glob("*.json"))


@pytest.mark.timeout(120)
def test_committed_files_are_what_build_writes(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(SUITES / "build.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=110,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in FILES]
    for path in FILES:
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_scenario_reads_as_labelled(path: Path) -> None:
    records = {r["task_id"]: r["info"] for r in json.loads(path.read_text())}
    problems = Problems(stream=None)
    seen = set()
    for run in runs_of(read_transcripts([str(path)], problems), []):
        info = records[run.transcript.meta["task_id"]]
        seen.add(run.transcript.meta["task_id"])
        assert info["expect"] in ("healthy", "loop", "warn")
        assert info["source"]["repository"] and len(info["source"]["commit"]) == 40
        if info["expect"] == "loop":
            assert run.calls >= 320, info["test"]
    assert problems.count == 0
    assert seen == set(records)
