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


# One build for the module: its tests stay on one xdist worker (scripts/test's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("peer-suites")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("peer-suites")
    subprocess.run(
        [sys.executable, str(SUITES / "build.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=110,
    )
    return sorted(out.glob("*.json"))


@pytest.mark.timeout(120)
def test_build_writes_every_suite(built: list[Path]) -> None:
    assert [p.stem for p in built] == ["cline", "gemini-cli", "openclaw", "qwen-code"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("suite", ["cline", "gemini-cli", "openclaw", "qwen-code"])
def test_every_scenario_reads_as_labelled(built: list[Path], suite: str) -> None:
    path = next(p for p in built if p.stem == suite)
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
