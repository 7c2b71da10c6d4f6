"""Readers and replay on real transcripts recorded from the real harnesses by the other
end-to-end tests (tests/fixtures/transcripts/<harness>/, see the README there): the
Claude Code CLI and the DSH runtime, each against the scripted fake model, with the
breaker installed. Replaying such a transcript must reproduce what the installed breaker
actually did in it."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.cli import main
from dsh_circuit_breaker.transcripts import Problems, detect, read_transcripts, walk

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "transcripts"
CLAUDE = FIXTURES / "claude-code" / "cbprobe4-hook-denials.jsonl"
DSH = FIXTURES / "dsh" / "cbprobe4-breaker.session.v4.jsonl.zstd"


def need_zstandard() -> None:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        require(False, "the zstandard package (extra 'transcripts')")


def read(path: Path) -> list[tuple[Any, list[Any]]]:
    problems = Problems(stream=None)
    runs = [(t, list(t.calls())) for t in read_transcripts(walk([str(path)], problems), problems)]
    assert problems.count == 0, problems.items
    return runs


def replay(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> dict[str, Any]:
    assert main(["replay", str(path), "--json", *extra]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_claude_code_session_reads_the_ten_probe_calls() -> None:
    assert detect(str(CLAUDE)) == "claude-code"
    [(t, calls)] = read(CLAUDE)
    assert t.format == "claude-code"
    assert {c.agent for c in calls} == {"9368cae3-05d1-4c33-9f8d-776fe30ebaa1"}
    assert [c.tool for c in calls] == ["Bash"] * 10
    [command] = {c.arguments["command"] for c in calls}  # one command, ten times
    assert command.startswith("echo cbprobe4 >> ") and command.endswith("/side.txt")
    assert len({c.arguments["description"] for c in calls}) == 10  # rewritten every call
    # calls 7 to 10 were denied by the installed hook: error results
    assert [c.failed for c in calls] == [False] * 6 + [True] * 4
    assert all(c.time is not None for c in calls)
    assert t.duration is not None and 0 < t.duration < 60


def test_claude_code_replay_reproduces_the_real_hook_denials(
    capsys: pytest.CaptureFixture[str],
) -> None:
    [(_, calls)] = read(CLAUDE)
    really_denied = [i for i, c in enumerate(calls, start=1) if c.failed]
    # The hook that recorded it refused the 7th copy: duplicateLimit 7 in today's count.
    [row] = replay(capsys, CLAUDE, "--set", "duplicateLimit=7")["runs"]
    first = row["first_denial"]
    assert (first["call"], first["kind"], first["tool"]) == (really_denied[0], "duplicate", "Bash")
    assert row["denied"] == len(really_denied) == 4
    assert row["longest_streak"]["length"] == 10  # description is ignored: one call 10 times
    # Today's default refuses the 6th, as the original plugin did.
    [row] = replay(capsys, CLAUDE)["runs"]
    assert (row["first_denial"]["call"], row["denied"]) == (6, 5)
    # without ignoreArgs the rewritten description makes every call new: nothing denied
    [row] = replay(capsys, CLAUDE, "--set", "ignoreArgs=[]")["runs"]
    assert row["denied"] == 0


def test_dsh_v4_zstd_session_reads_the_ten_probe_calls() -> None:
    need_zstandard()
    assert detect(str(DSH)) == "dsh"
    [(t, calls)] = read(DSH)
    assert t.format == "dsh"
    assert t.label.startswith("cbprobe4-breaker.session.v4.jsonl.zstd (")
    assert {c.agent for c in calls} == {"session-9a817a5c33854805931d8fc2277a6d27"}
    assert [(c.tool, c.arguments["command"]) for c in calls] == [("bash", "echo cbprobe4")] * 10
    assert [c.call_id for c in calls] == [f"toolu_fake_{i:05d}" for i in range(1, 11)]
    # DSH 0.2.1's v4 result shape: isError on the tool message; calls 7-10 were denied
    assert [c.failed for c in calls] == [False] * 6 + [True] * 4
    assert all(c.time is not None for c in calls)
    assert t.duration is not None and 0 < t.duration < 60


def test_dsh_replay_reproduces_the_real_plugin_denials(
    capsys: pytest.CaptureFixture[str],
) -> None:
    need_zstandard()
    [(_, calls)] = read(DSH)
    really_denied = [i for i, c in enumerate(calls, start=1) if c.failed]
    [row] = replay(capsys, DSH, "--set", "duplicateLimit=7")["runs"]  # the plugin's count then
    assert row["first_denial"]["call"] == really_denied[0] == 7
    assert row["denied"] == len(really_denied) == 4
    assert row["failed"] == 4
    [row] = replay(capsys, DSH)["runs"]
    assert (row["first_denial"]["call"], row["denied"]) == (6, 5)
    assert row["time_saved_s"] is not None and row["time_saved_s"] > 0


def _tool_use_times(path: Path) -> list[float]:
    """The timestamp of each tool_use block of a Claude Code session file, from the raw JSON."""
    times = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        content = (entry.get("message") or {}).get("content")
        if entry.get("type") == "assistant" and isinstance(content, list):
            stamp = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
            times += [stamp.timestamp() for block in content if block.get("type") == "tool_use"]
    return times


def test_claude_code_replay_shows_where_the_stop_would_have_ended_the_session(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The hook that recorded this session denied calls 7 to 10 and had no stop. Today's
    # defaults refuse the 6th, and the stop (after 3 refusals in a row) would have ended
    # the session at its 8th call, so the 9th and 10th and the time up to them would not
    # have been spent.
    times = _tool_use_times(CLAUDE)
    assert len(times) == 10
    [row] = replay(capsys, CLAUDE)["runs"]
    stop = row["stop"]
    assert (stop["call"], stop["kind"], stop["tool"]) == (8, "duplicate", "Bash")
    assert stop["calls_saved"] == 2
    assert stop["time_saved_s"] == pytest.approx(times[9] - times[7], abs=0.002)
    assert stop["time_saved_s"] > 0
    # a stop after 6 refusals never fires: the session makes only 5
    [row] = replay(capsys, CLAUDE, "--set", "stopAfterDenials=6")["runs"]
    assert row["stop"] is None
    # a budget of 3 Bash calls refuses the 4th; the stop follows at the 6th
    [row] = replay(capsys, CLAUDE, "--set", "toolLimits.Bash=3")["runs"]
    assert (row["first_budget"]["call"], row["first_budget"]["kind"]) == (4, "budget")
    assert (row["stop"]["call"], row["stop"]["calls_saved"]) == (6, 4)
    assert row["stop"]["time_saved_s"] == pytest.approx(times[9] - times[5], abs=0.002)


def test_dsh_replay_shows_where_the_stop_would_have_ended_the_agent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    need_zstandard()
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(DSH.open("rb")) as raw:
        events = [json.loads(line) for line in raw.read().decode().splitlines()]
    times = [e["time"] / 1000 for e in events if e["type"] == "tool/call"]  # milliseconds
    assert len(times) == 10
    [row] = replay(capsys, DSH)["runs"]
    assert (row["stop"]["call"], row["stop"]["calls_saved"]) == (8, 2)
    assert row["stop"]["time_saved_s"] == pytest.approx(times[9] - times[7], abs=0.002)
