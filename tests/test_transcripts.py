"""Transcript readers: format detection, calls and outcomes, streaming, bad input.

Reader tests run on the real transcripts in ../shared/corpus (skipped where that folder is
absent, a failure under CI); files derived from them here (cut, corrupted, compressed) say so.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import require
from dsh_circuit_breaker.transcripts import Problems, detect, read_transcripts, walk
from dsh_circuit_breaker.transcripts.common import Pending, parse_arguments, parse_time
from dsh_circuit_breaker.transcripts.jsonstream import JsonStream, JsonStreamError
from dsh_circuit_breaker.transcripts.model import RecordedCall
from dsh_circuit_breaker.transcripts.sources import open_text

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
DSH_FIXTURES = CORPUS / "deepseek-harness-fixtures"
TAU = CORPUS / "tau-bench" / "gpt-4o-airline.even.json"
TAU2 = CORPUS / "tau2-bench" / "gpt-oss-120b_langchain_agent_airline.json"
MINI = CORPUS / "mini-swe-agent" / "gemini-3-pro"

needs_corpus = pytest.mark.usefixtures("corpus")  # a missing corpus fails under CI


def read(*paths: Path | str, fmt: str | None = None) -> tuple[list[Any], Problems]:
    problems = Problems(stream=None)
    out = []
    for t in read_transcripts(walk([str(p) for p in paths], problems), problems, fmt):
        calls = list(t.calls())
        out.append((t, calls))
    return out, problems


# -- detection ---------------------------------------------------------------------------


@needs_corpus
def test_every_corpus_file_is_detected_as_its_format() -> None:
    assert detect(str(TAU)) == "tau-bench"
    assert detect(str(TAU2)) == "tau2"
    assert detect(str(next(MINI.glob("*.traj.json")))) == "mini-swe-agent"
    for path in DSH_FIXTURES.glob("*.jsonl"):
        assert detect(str(path)) == "dsh"


@needs_corpus
def test_detection_does_not_rely_on_the_file_name(tmp_path: Path) -> None:
    renamed = tmp_path / "anything.json"
    renamed.write_bytes(next(MINI.glob("*.traj.json")).read_bytes())
    assert detect(str(renamed)) == "mini-swe-agent"
    renamed_dsh = tmp_path / "log.txt"
    renamed_dsh.write_bytes((DSH_FIXTURES / "bash-tool-turn.session.jsonl").read_bytes())
    assert detect(str(renamed_dsh)) == "dsh"


@pytest.mark.parametrize(
    ("name", "text", "found"),
    [
        # A name that says the format settles it, whatever the lines hold.
        ("a.traj.json", '{"type":"user","message":{},"sessionId":"s"}\n', "mini-swe-agent"),
        # JSONL records come before a document's keys; only the first line may be a header.
        (
            "b.jsonl",
            '{"type":"session","id":"x"}\n{"type":"user","message":{},"uuid":"u"}\n',
            "dsh",
        ),
        ("c.json", '{"a":1}\n{"type":"assistant","message":{},"uuid":"u"}\n', "claude-code"),
        ("d.json", '{"a":1}\nbroken\n{"type":"assistant","message":{},"uuid":"u"}\n', None),
        # A document's keys: simulations, then mini-swe-agent's, then tau-bench's.
        ("e.json", '{"messages": [], "simulations": []}', "tau2"),
        ("f.json", '{"messages": [], "instance_id": "x"}', "mini-swe-agent"),
        ("g.json", '{"traj": []}', "tau-bench"),
        ("h.json", '[{"role": "user"}]', "tau-bench"),
        ("i.json", "[]", None),
        # The keys as far as they are read: tau2's come first; broken before the others.
        ("j.json", '{"simulations": [1], "oops": }', "tau2"),
        ("k.json", '{"instance_id": "x", "oops": }', None),
        ("l.jsonl", '{"messages": []}', None),  # a JSONL name is no JSON document
    ],
)
def test_detection_asks_each_format_in_turn(
    tmp_path: Path, name: str, text: str, found: str | None
) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert detect(str(path)) == found


def test_unrecognized_files_are_reported_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "notes.json").write_text('{"hello": "world"}')
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "README.md").write_text("not a transcript")  # ignored: not a .json name
    runs, problems = read(tmp_path)
    assert runs == []
    assert problems.count == 2
    assert {Path(p.path).name for p in problems.items} == {"notes.json", "empty.jsonl"}
    assert all("not recognized" in p.message for p in problems.items)


# -- DSH ---------------------------------------------------------------------------------


@needs_corpus
def test_dsh_fixture_calls_arguments_ids_and_failures() -> None:
    runs, problems = read(DSH_FIXTURES / "subagent-continuable.session.jsonl")
    assert problems.count == 0
    [(t, calls)] = runs
    assert t.format == "dsh"
    assert [c.tool for c in calls] == ["subagent", "send_message", "send_message", "send_message"]
    assert {c.agent for c in calls} == {"11111111-1111-4111-8111-111111111111"}
    # data.arguments is a JSON string: the breaker gets the parsed object
    assert calls[1].arguments == {
        "subagent_id": "33333333-3333-4333-8333-333333333333",
        "message": "Now reply with exactly SECOND_OK.",
    }
    assert [c.call_id for c in calls][:2] == ["call_bg_start", "call_followup_1"]
    # the call to the unknown subagent came back isError: true
    assert [c.failed for c in calls] == [False, False, False, True]


@needs_corpus
def test_dsh_hook_denied_call_counts_as_failed() -> None:
    [(t, calls)], _ = read(DSH_FIXTURES / "hook-cc-pretool-deny.session.jsonl")
    assert [(c.tool, c.arguments["command"], c.failed) for c in calls] == [
        ("bash", "echo HELLO", True)
    ]
    # seq/time were stripped from these fixtures: only the header's createdAt is a time
    assert t.duration is None


@needs_corpus
def test_dsh_zstd_reads_the_same_calls(tmp_path: Path) -> None:
    try:
        import zstandard
    except ImportError:
        require(False, "the zstandard package (extra 'transcripts')")
    source = DSH_FIXTURES / "subagent-continuable.session.jsonl"
    session_dir = tmp_path / "proj" / "11111111-1111-4111-8111-111111111111"
    session_dir.mkdir(parents=True)
    packed = session_dir / "session.v4.jsonl.zstd"
    packed.write_bytes(zstandard.ZstdCompressor().compress(source.read_bytes()))
    assert detect(str(packed)) == "dsh"
    plain, _ = read(source)
    zipped, problems = read(tmp_path)
    assert problems.count == 0
    assert [(c.tool, c.arguments, c.failed) for c in zipped[0][1]] == [
        (c.tool, c.arguments, c.failed) for c in plain[0][1]
    ]
    assert zipped[0][0].label.startswith(os.path.join(session_dir.name, "session.v4.jsonl.zstd"))


@needs_corpus
def test_missing_zstandard_is_reported_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed = tmp_path / "session.v4.jsonl.zstd"
    packed.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import now fails
    stream = io.StringIO()
    problems = Problems(stream=stream)
    runs = list(read_transcripts(walk([str(tmp_path)], problems), problems))
    assert runs == []
    assert problems.count == 1
    assert "pip install 'dsh-circuit-breaker[transcripts]'" in stream.getvalue()
    assert "zstandard" in problems.items[0].message


@needs_corpus
def test_a_malformed_line_is_reported_with_file_and_line_and_skipped(tmp_path: Path) -> None:
    lines = (DSH_FIXTURES / "subagent-continuable.session.jsonl").read_text().splitlines()
    call_lines = [i for i, line in enumerate(lines) if '"type":"tool/call"' in line]
    broken = list(lines)
    broken[call_lines[1]] = broken[call_lines[1]][:40]  # cut mid-line: not JSON
    broken.insert(3, "[1, 2]")  # JSON, but not an event
    path = tmp_path / "session-broken.jsonl"
    path.write_text("\n".join(broken) + "\n")
    [(_t, calls)], problems = read(path)
    assert [c.tool for c in calls] == ["subagent", "send_message", "send_message"]
    assert [(p.line, p.message.split(" (")[0]) for p in problems.items] == [
        (4, "not a JSON object"),
        (call_lines[1] + 2, "not JSON"),
    ]
    assert all(p.path == str(path) for p in problems.items)


# -- tau-bench, tau2-bench, mini-swe-agent ------------------------------------------------


@needs_corpus
def test_tau_bench_runs_and_argument_mapping() -> None:
    runs, problems = read(TAU)
    assert problems.count == 0
    raw = json.loads(TAU.read_text())
    assert len(runs) == len(raw) == 100
    for (t, calls), record in zip(runs, raw, strict=True):
        expected = [
            (tc["function"]["name"], json.loads(tc["function"]["arguments"]))
            for m in record["traj"]
            if m["role"] == "assistant"
            for tc in m.get("tool_calls") or ()
        ]
        assert [(c.tool, c.arguments) for c in calls] == expected
        assert t.meta["task_id"] == record["task_id"]
        assert len({c.agent for c in calls}) <= 1


@needs_corpus
def test_tau2_runs_times_and_errors() -> None:
    runs, problems = read(TAU2)
    assert problems.count == 0
    raw = json.loads(TAU2.read_text())
    assert len(runs) == len(raw["simulations"]) == 50
    for (t, calls), sim in zip(runs, raw["simulations"], strict=True):
        expected = [
            (tc["name"], tc["arguments"])
            for m in sim["messages"]
            for tc in m.get("tool_calls") or ()
        ]
        assert [(c.tool, c.arguments) for c in calls] == expected
        errors = sum(1 for m in sim["messages"] if m["role"] == "tool" and m.get("error"))
        assert sum(1 for c in calls if c.failed) == errors
        assert t.meta["termination_reason"] == sim["termination_reason"]
        assert t.duration == pytest.approx(
            sim["duration"], abs=0.5
        )  # message times run a bit past end_time
        assert all(c.time is not None for c in calls)


@needs_corpus
def test_mini_swe_agent_one_bash_block_is_one_call() -> None:
    path = MINI / "astropy__astropy-13033.traj.json"
    [(t, calls)], problems = read(path)
    assert problems.count == 0
    messages = json.loads(path.read_text())["messages"]
    assistant = [m for m in messages if m["role"] == "assistant"]
    # messages with 0 or 2+ blocks were format errors that ran nothing
    multi = [m for m in assistant if m["content"].count("```bash") != 1]
    assert multi, "this trajectory has a format error to skip"
    assert len(calls) == len(assistant) - len(multi)
    assert all(c.tool == "bash" and set(c.arguments) == {"command"} for c in calls)
    first_block = assistant[0]["content"].split("```bash\n", 1)[1].split("\n```", 1)[0]
    assert calls[0].arguments["command"] == first_block.strip() == "ls -R astropy/timeseries"
    # returncode != 0 in the next user message is a failed call
    assert sum(1 for c in calls if c.failed) == 6
    assert t.meta["exit_status"] == "Submitted"


@needs_corpus
def test_format_override_reads_with_the_named_reader_only() -> None:
    runs, problems = read(TAU2, fmt="dsh")
    assert sum(len(calls) for _, calls in runs) == 0
    assert problems.count >= 1  # the header problem, and every line is not a DSH event


@needs_corpus
def test_a_truncated_json_file_keeps_the_runs_before_the_cut(tmp_path: Path) -> None:
    text = TAU2.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) * 2 // 3])  # derived from the corpus file: cut short
    runs, problems = read(cut)
    assert 20 < len(runs) < 50
    assert problems.count == 1
    assert "rest of file skipped" in problems.items[0].message
    # the corpus file is one long line: the report gives line 1 and the character offset
    assert problems.items[0].line == 1
    offset = int(problems.items[0].message.split("at character ")[1].split(")")[0])
    assert len(text) * 2 // 3 - 100_000 < offset <= len(text) * 2 // 3


# -- Claude Code (format from Claude Code's documented session JSONL) ---------------------


def test_claude_code_subagents_are_their_own_agents_and_ids_dedupe(tmp_path: Path) -> None:
    # Shape of ~/.claude/projects/<project>/<session>.jsonl entries; real recorded files
    # are tested in test_transcripts_fixtures.py.
    def entry(kind: str, content: list[Any], **extra: Any) -> str:
        base = {"type": kind, "sessionId": "s1", "uuid": "u", "timestamp": extra.pop("ts")}
        return json.dumps({**base, **extra, "message": {"role": kind, "content": content}})

    use = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
    sub = {"type": "tool_use", "id": "t2", "name": "Grep", "input": {"pattern": "x"}}
    lines = [
        json.dumps({"type": "summary", "summary": "x"}),
        entry("assistant", [use], ts="2026-01-01T00:00:00.000Z"),
        entry("assistant", [use], ts="2026-01-01T00:00:00.500Z"),  # same block streamed twice
        entry("assistant", [sub], ts="2026-01-01T00:00:01.000Z", isSidechain=True, agentId="a9"),
        entry(
            "user",
            [{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": "no"}],
            ts="2026-01-01T00:00:02.000Z",
        ),
        entry(
            "user",
            [{"type": "tool_result", "tool_use_id": "t2", "content": "ok"}],
            ts="2026-01-01T00:00:03.000Z",
        ),
    ]
    path = tmp_path / "s1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert detect(str(path)) == "claude-code"
    [(t, calls)], problems = read(path)
    assert problems.count == 0
    assert [(c.agent, c.tool, c.failed) for c in calls] == [
        ("s1", "Bash", True),
        ("s1/agent-a9", "Grep", False),
    ]
    assert t.duration == pytest.approx(3.0)


# -- building blocks ---------------------------------------------------------------------


def test_arguments_parse_or_stay_the_raw_string() -> None:
    assert parse_arguments('{"a": [1, 2]}') == {"a": [1, 2]}
    assert parse_arguments('{"a": ') == '{"a": '
    assert parse_arguments({"a": 1}) == {"a": 1}


def test_times_from_iso_and_epoch() -> None:
    assert parse_time("2026-01-01T00:00:00Z") == parse_time("2026-01-01T00:00:00+00:00")
    assert parse_time(1783352050748) == pytest.approx(1783352050.748)
    assert parse_time(1700000000) == 1700000000.0
    assert parse_time("yesterday") is None
    assert parse_time(True) is None


def test_pending_releases_calls_in_order_once_resolved() -> None:
    pending = Pending(limit=3)
    a, b = RecordedCall("x", "t", {}, call_id="a"), RecordedCall("x", "t", {}, call_id="b")
    assert list(pending.add(a)) == []
    assert list(pending.add(b)) == []
    assert list(pending.resolve("b", True)) == []  # a is still open, order is kept
    assert list(pending.resolve("a", False)) == [a, b]
    assert (a.failed, b.failed) == (False, True)
    never = [RecordedCall("x", "t", {}, call_id=f"n{i}") for i in range(5)]
    released = [c for n in never for c in pending.add(n)]
    assert released == never[:2]  # the limit bounds what waits
    assert list(pending.drain()) == never[2:]


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
            lambda inner: (
                st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4)
            ),
            max_leaves=12,
        ),
        max_size=8,
    ),
    chunk=st.integers(min_value=1, max_value=9),
    indent=st.sampled_from([None, 1]),
)
def test_json_stream_equals_json_load_at_any_chunk_size(
    items: list[Any], chunk: int, indent: int | None
) -> None:
    text = json.dumps({"head": 1, "simulations": items, "tail": [1, 2]}, indent=indent)
    stream = JsonStream(io.StringIO(text), chunk=chunk)
    got: dict[str, Any] = {}
    for key in stream.members():
        if key == "simulations":
            got[key] = []
            for _ in stream.items():
                got[key].append(stream.value())
        else:
            got[key] = stream.value()
    stream.end()
    assert got == json.loads(text)


def test_json_stream_memory_is_bounded_by_one_member() -> None:
    member = {"messages": [{"role": "tool", "content": "x" * 2000}] * 20}  # ~45 kB
    count = 400  # ~18 MB in all

    class Source(io.TextIOBase):
        """Generates the document on the fly, so the test itself holds no copy."""

        def __init__(self) -> None:
            self.parts = iter(
                ["[", *([json.dumps(member), ","] * (count - 1)), json.dumps(member), "]"]
            )
            self.pending = ""

        def read(self, size: int | None = -1) -> str:
            while size is not None and size > 0 and len(self.pending) < size:
                nxt = next(self.parts, None)
                if nxt is None:
                    break
                self.pending += nxt
            out, self.pending = (
                self.pending[: size or None],
                self.pending[size or len(self.pending) :],
            )
            return out

    stream = JsonStream(Source(), chunk=1 << 16)
    seen, biggest = 0, 0
    for _ in stream.items():
        assert stream.value() == member
        seen += 1
        biggest = max(biggest, len(stream._buf))
    assert seen == count
    assert biggest < 4 * len(json.dumps(member)) + (1 << 17)


def test_json_stream_reports_the_line_of_an_error() -> None:
    stream = JsonStream(io.StringIO('[\n{"a": 1},\n{"b": tru},\n{"c": 3}\n]'), chunk=4)
    values = []
    with pytest.raises(JsonStreamError) as caught:
        for _ in stream.items():
            values.append(stream.value())
    assert values == [{"a": 1}]
    assert caught.value.line == 3


def test_open_text_replaces_undecodable_bytes(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": "\xff"}\n')
    with open_text(str(path)) as fh:
        assert json.loads(fh.readline()) == {"a": "\ufffd"}


@needs_corpus
def test_dsh_subagent_session_is_its_own_agent(tmp_path: Path) -> None:
    # Derived from the real fixture: the same session written again as a subagent's
    # (header origin "subagent", parentSession), as DSH writes a child session file.
    text = (DSH_FIXTURES / "bash-tool-turn.session.jsonl").read_text()
    header, rest = text.split("\n", 1)
    child = json.loads(header)
    parent_id = child["id"]
    child.update(id="c0ffee00-0000-4000-8000-000000000000", origin="subagent")
    child["parentSession"] = parent_id
    (tmp_path / "parent.session.jsonl").write_text(text)
    (tmp_path / "child.session.jsonl").write_text(json.dumps(child) + "\n" + rest)
    runs, problems = read(tmp_path)
    assert problems.count == 0
    by_agent = {calls[0].agent: t for t, calls in runs}
    assert set(by_agent) == {parent_id, "c0ffee00-0000-4000-8000-000000000000"}
    assert by_agent["c0ffee00-0000-4000-8000-000000000000"].label.endswith(
        f"subagent of {parent_id[:8]}"
    )
    assert by_agent["c0ffee00-0000-4000-8000-000000000000"].meta["parentSession"] == parent_id
