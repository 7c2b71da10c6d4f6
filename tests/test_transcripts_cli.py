"""The analyze, replay and calibrate commands, run as a user would."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.cli import main
from dsh_circuit_breaker.transcripts import FORMATS
from support.installed import Installed

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
DSH_FIXTURES = CORPUS / "deepseek-harness-fixtures"
TAU2 = CORPUS / "tau2-bench" / "gpt-oss-120b_langchain_agent_airline.json"

needs_corpus = pytest.mark.usefixtures("corpus")  # a missing corpus fails under CI


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def repeated_dsh_session(tmp_path: Path, repeats: int) -> Path:
    """The real bash-tool-turn fixture with its one tool/call line repeated: a derived
    file standing for an agent that re-runs one command with nothing in between."""
    lines = (DSH_FIXTURES / "bash-tool-turn.session.jsonl").read_text().splitlines()
    out = []
    for line in lines:
        if '"type":"tool/call"' in line:
            out.extend([line] * repeats)
        else:
            out.append(line)
    path = tmp_path / "session-repeat.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


@needs_corpus
def test_analyze_table_and_totals(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "analyze", str(DSH_FIXTURES))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split()[:6] == ["RUN", "TIME", "CALLS", "DIST", "FAIL", "STREAK"]
    rows = lines[1 : lines.index("")]
    assert len(rows) == 3
    assert rows[0].startswith("bash-tool-turn.session.jsonl (e128dda9)")
    assert "3 runs, 6 tool calls" in out
    assert "2 failed" in out


@needs_corpus
def test_analyze_json_figures(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "analyze", str(TAU2))
    total = report["total"]
    assert total["runs"] == 50
    assert total["calls"] == 847
    assert total["longest_streak"]["length"] == 100
    assert total["worst_repeat"]["times"] == 100
    loop = next(r for r in report["runs"] if r["meta"]["task_id"] == "10")
    assert loop["longest_streak"]["length"] == 94
    assert loop["longest_streak"]["first_call"] == 9
    assert loop["worst_repeat"]["call"].startswith("transfer_to_human_agents(summary) #")
    assert loop["duration_s"] > 60


@needs_corpus
def test_replay_uses_the_engine_decisions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = repeated_dsh_session(tmp_path, 10)
    [row] = run_json(capsys, "replay", str(path))["runs"]
    assert row["calls"] == 10
    assert row["first_denial"]["call"] == 6  # duplicateLimit 6: the 6th identical call
    assert row["first_denial"]["count"] == 6
    assert row["denied"] == 5
    [row] = run_json(capsys, "replay", str(path), "--set", "duplicateLimit=3")["runs"]
    assert (row["first_denial"]["call"], row["denied"]) == (3, 8)
    # an exempt tool is invisible to the breaker
    [row] = run_json(capsys, "replay", str(path), "--set", 'exempt=["bash"]')["runs"]
    assert row["denied"] == 0
    # the cap
    [row] = run_json(
        capsys, "replay", str(path), "--set", "maxCallsPerAgent=2", "--set", "duplicateLimit=20"
    )["runs"]
    assert row["first_denial"]["kind"] == "cap"
    assert row["denied"] == 8


def test_subagents_are_judged_as_their_own_agents(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Claude Code entries: the main agent and one subagent each run `ls` 4 times. Merged
    # they would be 8 identical calls and trip the breaker; as two agents they do not.
    def entry(i: int, sidechain: bool) -> str:
        block = {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": "ls"}}
        body: dict[str, Any] = {"type": "assistant", "sessionId": "s", "uuid": f"u{i}"}
        if sidechain:
            body.update(isSidechain=True, agentId="sub1")
        body["message"] = {"role": "assistant", "content": [block]}
        return json.dumps(body)

    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(entry(i, i % 2 == 1) for i in range(8)) + "\n")
    report = run_json(capsys, "replay", str(path))
    assert sorted((r["agent"], r["calls"], r["denied"]) for r in report["runs"]) == [
        ("s", 4, 0),
        ("s/agent-sub1", 4, 0),
    ]


@needs_corpus
def test_replay_html_is_self_contained_and_marks_denials(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_file = tmp_path / "replay.html"
    code, out, err = run(capsys, "replay", str(TAU2), "--html", str(out_file))
    assert code == 0, err
    page = out_file.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing fetched
    assert page.count("<svg") >= 7  # a timeline per run, the 7 denied runs first
    assert page.count('class="denied"') == 474  # one cross per denied call
    assert "first denial: call #14" in page  # task 10's loop, from call 9
    assert f"page written to {out_file}" in out


@needs_corpus
def test_reports_carry_no_argument_content_unless_asked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    secret = "liam_khan_2521"  # a user id inside task 10's call arguments
    assert secret in TAU2.read_text()
    page = tmp_path / "p.html"
    code, out, _ = run(capsys, "replay", str(TAU2), "--json", "--html", str(page))
    assert code == 0
    assert secret not in out and secret not in page.read_text()
    code, out, _ = run(capsys, "analyze", str(TAU2), "--show-args", "--json")
    assert code == 0 and secret in out


@needs_corpus
def test_config_file_and_bad_overrides(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = repeated_dsh_session(tmp_path, 10)
    config = tmp_path / "breaker.json"
    config.write_text(json.dumps({"duplicateLimit": 2, "window": 50}))
    report = run_json(capsys, "replay", str(path), "--config", str(config))
    assert report["config"]["duplicateLimit"] == 2
    assert report["runs"][0]["first_denial"]["call"] == 2
    # --set wins over the file
    report = run_json(
        capsys, "replay", str(path), "--config", str(config), "--set", "duplicateLimit=5"
    )
    assert report["runs"][0]["first_denial"]["call"] == 5

    code, out, err = run(capsys, "replay", str(path), "--set", "duplicateLimits=3")
    assert code == 2 and out == ""
    assert "duplicateLimits" in err
    code, _, err = run(capsys, "replay", str(path), "--set", "window=2")
    assert code == 2 and "window" in err
    code, _, err = run(capsys, "replay", str(path), "--config", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json" in err


@needs_corpus
def test_config_file_in_toml_through_the_shared_loader(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = repeated_dsh_session(tmp_path, 10)
    config = tmp_path / "breaker.toml"
    config.write_text("duplicateLimit = 4\n")
    report = run_json(capsys, "replay", str(path), "--config", str(config))
    assert report["runs"][0]["first_denial"]["call"] == 4
    # a DSH patch row, as a DSH config holds it
    rows = tmp_path / "patch.json"
    rows.write_text(json.dumps([{"id": "circuit-breaker", "config": {"duplicateLimit": 3}}]))
    report = run_json(capsys, "replay", str(path), "--config", str(rows))
    assert report["runs"][0]["first_denial"]["call"] == 3


@needs_corpus
def test_bad_files_are_skipped_and_reported_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good = repeated_dsh_session(tmp_path, 3)
    (tmp_path / "broken.json").write_text('{"simulations": [{"messages": [}]}')
    (tmp_path / "session-bad.jsonl").write_text('{"type":"session","id":"x"}\n{oops\n')
    code, out, err = run(capsys, "replay", str(tmp_path))
    assert code == 0
    assert f"{tmp_path / 'session-bad.jsonl'}:2: not JSON" in err
    assert str(tmp_path / "broken.json") in err
    assert "2 unreadable lines or files skipped" in out
    assert good.name in out


@needs_corpus
def test_calibrate_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "calibrate", str(TAU2), "--limits", "4,6", "--windows", "200")
    assert code == 0, err
    rows = [
        line.split() for line in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s+(true|false)", line)
    ]
    # current config, then limit 4 (limit 6 / window 200 / reset true is the current one)
    # and limits 4 and 6 with resetOnNewCall false
    assert [r[:3] for r in rows] == [
        ["6", "200", "true"],
        ["4", "200", "true"],
        ["4", "200", "false"],
        ["6", "200", "false"],
    ]
    # loops stopped: a fraction in words; stop after: the median, then the most
    assert rows[0][5:10] == ["7", "of", "7", "6", "(max"], rows[0]
    assert "7 of 7     6 (max 6)" in out  # was "7/7  7/7": a fraction and a median/max alike
    *_, rule, stop = out.rstrip().splitlines()
    assert rule == (
        "Recommendation: keep the current config (duplicateLimit=6, window=200, "
        "resetOnNewCall=true): it stops 7 of 7 loops, 6 calls in (median), and denies no run "
        "without a loop."
    )
    # 3 ends all 7 loops (tau2 task 48 at its last call, its third refusal: an agent that
    # kept on) and stops nothing else: the most lenient value that does, as the README argues
    assert stop == (
        "Stop: keep the current config (stopAfterDenials=3): it ends 7 of 7 loops the agent "
        "kept on, 8 calls in (median), and stops no run outside a loop."
    ), stop


@needs_corpus
def test_calibrate_recommends_what_to_set_when_the_current_config_is_not_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ("calibrate", str(TAU2), "--limits", "4,6", "--windows", "200")
    code, out, err = run(capsys, *args, "--set", "duplicateLimit=4", "--stop-after", "3")
    assert code == 0, err
    rule = next(line for line in out.splitlines() if line.startswith("Recommendation: "))
    # duplicateLimit=4 denies 3 tau2 runs without a loop; 6 stops every loop and denies none
    assert rule == (
        "Recommendation: duplicateLimit=6: it stops 7 of 7 loops, 6 calls in (median), and "
        "denies no run without a loop. Try it with `--set duplicateLimit=6`, then put it in "
        "your config file."
    )
    report = run_json(capsys, *args, "--set", "duplicateLimit=4", "--stop-after", "3")
    assert report["recommendation"][0] == rule


def test_installed_console_script_runs_the_commands(installed: Installed) -> None:
    # As a user runs them: the installed wheel's console script, its transcripts extra
    # reading the zstd-compressed DSH session, on the recorded Claude Code and DSH runs.
    fixtures = REPO / "tests" / "fixtures" / "transcripts"

    def run_installed(command: str) -> dict[str, Any]:
        done = installed.run(command, str(fixtures), "--json")
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    analyzed = run_installed("analyze")["total"]
    assert (analyzed["runs"], analyzed["calls"], analyzed["failed"]) == (2, 20, 8)
    replayed = run_installed("replay")["total"]
    assert (replayed["runs_with_denial"], replayed["denied"]) == (2, 8)
    calibrated = run_installed("calibrate")["current"]
    assert (calibrated["loops"], calibrated["loops_stopped"]) == (2, 2)


def claude_code_session(path: Path, calls: list[tuple[str, dict[str, Any]]]) -> Path:
    """A Claude Code session file: one assistant entry per (tool, input), in order."""
    lines = []
    for i, (tool, tool_input) in enumerate(calls):
        block = {"type": "tool_use", "id": f"t{i}", "name": tool, "input": tool_input}
        body = {"type": "assistant", "sessionId": path.stem, "uuid": f"u{i}"}
        body["message"] = {"role": "assistant", "content": [block]}
        lines.append(json.dumps(body))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("command", ["analyze", "replay", "calibrate"])
def test_a_missing_path_fails_before_any_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    real = claude_code_session(tmp_path / "real.jsonl", [("Bash", {"command": "ls"})])
    missing = tmp_path / "no-such-dir"
    code, out, err = run(capsys, command, str(real), str(missing))
    assert code == 2 and out == ""
    assert err.strip() == f"dsh-circuit-breaker: {missing}: no such file or directory"


@pytest.mark.parametrize("where", ["missing-dir/page.html", "."])
def test_replay_html_to_an_unwritable_path_fails_before_the_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str
) -> None:
    session = claude_code_session(tmp_path / "s.jsonl", [("Bash", {"command": "ls"})])
    target = tmp_path / where
    code, out, err = run(capsys, "replay", str(session), "--html", str(target))
    assert code == 2 and out == ""  # not a row of the replay was printed
    assert err.startswith(f"dsh-circuit-breaker: cannot write --html {target}: ")
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["analyze", "calibrate"])
def test_html_on_another_command_says_it_belongs_to_replay(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, str(tmp_path), "--html", str(tmp_path / "page.html")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dsh-circuit-breaker: {command}: ") and err.count("\n") == 1
    assert "--html belongs to replay: dsh-circuit-breaker replay PATH... --html OUT" in err


def test_unknown_option_shows_the_commands_own_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["replay", ".", "--bogus"])
    err = capsys.readouterr().err
    assert err == (
        "dsh-circuit-breaker: replay: unrecognized arguments: --bogus "
        "(see dsh-circuit-breaker replay --help)\n"
    )


def test_html_page_title_order_and_folded_quiet_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    ls = ("Bash", {"command": "ls"})
    claude_code_session(folder / "a-few.jsonl", [ls] * 6)  # 1 denied
    claude_code_session(folder / "b-many.jsonl", [ls] * 12)  # 7 denied
    claude_code_session(
        folder / "c-quiet.jsonl", [("Bash", {"command": f"echo {i}"}) for i in range(3)]
    )
    out_file = tmp_path / "page.html"
    code, _, err = run(capsys, "replay", str(folder), "--html", str(out_file))
    assert code == 0, err
    page = out_file.read_text()
    assert "<title>Circuit breaker replay: sessions</title>" in page
    table = page[page.index("<h2>Runs with a denial, most calls denied first</h2>") :]
    table = table[: table.index("</table>")]
    assert table.index("b-many.jsonl") < table.index("a-few.jsonl")
    assert "c-quiet" not in table

    def heading(text: str, html: str) -> int:  # a run's chart heading, its anchor aside
        found = re.search(rf'<h2 id="run-\d+">{re.escape(text)}', html)
        assert found is not None, text
        return found.start()

    assert heading("b-many.jsonl", page) < heading("a-few.jsonl", page)  # timelines too
    folded = page[page.index("<details><summary>1 run with nothing denied</summary>") :]
    assert heading("c-quiet.jsonl", folded) < folded.index("</details>")
    assert "3 calls, 3 distinct; nothing denied" in folded
    assert "1 call denied" in page and "7 calls denied" in page
    assert "1 calls" not in page


def test_summary_plurals(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    session = claude_code_session(tmp_path / "one.jsonl", [("Bash", {"command": "ls"})] * 2)
    code, out, _ = run(
        capsys, "replay", str(session), "--set", "duplicateLimit=2", "--set", "window=2"
    )
    assert code == 0
    assert "1 run, 2 tool calls." in out
    assert "1 run would have had a call denied; 1 call denied (1 duplicate), saving 1 call" in out
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    code, out, _ = run(capsys, "analyze", str(tmp_path))
    assert "1 unreadable line or file skipped" in out


def test_claude_code_transcripts_replay_with_the_hooks_exempt_list(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    todo = ("TodoWrite", {"todos": [{"content": "same", "status": "pending"}]})
    session = claude_code_session(tmp_path / "todo.jsonl", [todo] * 10)
    # The installed hook exempts TodoWrite (harnesses.claude_code.EXEMPT), so its replay does too.
    [row] = run_json(capsys, "replay", str(session))["runs"]
    assert (row["calls"], row["denied"]) == (10, 0)
    # A config's own exempt list replaces the harness's, in a replay as in the hook.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"exempt": ["Read"]}))
    [row] = run_json(capsys, "replay", str(session), "--config", str(config))["runs"]
    assert row["denied"] == 5
    [row] = run_json(capsys, "replay", str(session), "--set", "exempt=[]")["runs"]
    assert row["denied"] == 5
    # calibrate replays with the same list
    report = run_json(capsys, "calibrate", str(session), "--limits", "3", "--windows", "50")
    assert report["current"]["denied"] == 0
    assert all(entry["denied"] == 0 for entry in report["grid"])


def test_replay_never_writes_the_configs_incident_log(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    session = claude_code_session(tmp_path / "s.jsonl", [("Bash", {"command": "ls"})] * 8)
    log = tmp_path / "incidents.jsonl"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"incidentLog": str(log)}))  # the hook's own config file
    [row] = run_json(capsys, "replay", str(session), "--config", str(config))["runs"]
    assert row["denied"] == 3
    assert not log.exists()  # a past run is not a new incident


def _sessions(folder: Path, n: int) -> Path:
    folder.mkdir()
    for i in range(n):
        claude_code_session(folder / f"s{i}.jsonl", [("Bash", {"command": "ls"})] * 3)
    return folder


def test_calibrate_counts_runs_on_a_terminal_and_stays_quiet_in_a_pipe(
    tmp_path: Path, installed: Installed
) -> None:
    folder = _sessions(tmp_path / "sessions", 30)
    command = [str(installed.cli), "calibrate", str(folder)]
    env = installed.env
    piped = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert piped.returncode == 0 and piped.stderr == ""  # nothing when stderr is not a terminal
    (folder / "zz-broken.jsonl").write_text("{oops\n")  # read last, after the count is shown

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=slave)
        os.close(slave)
        seen = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the process closed its end
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=30) == 0
    finally:
        os.close(master)
    text = seen.decode()
    assert re.search(r"\r\x1b\[Kcalibrate: \d+ runs? read", text), text
    assert "\r\x1b[K" in text[text.rindex("calibrate: ") :]  # the count is erased at the end
    assert "\r\x1b[Kskipped: " in text  # and before a message, so none lands inside it


@needs_corpus
def test_replay_marks_the_budget_and_the_stop(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = repeated_dsh_session(tmp_path, 10)  # one bash call ten times, no timestamps
    [row] = run_json(capsys, "replay", str(path))["runs"]
    # five run, 6 to 10 refused: the third refusal in a row (call 8) stops the agent
    assert (row["stop"]["call"], row["stop"]["calls_saved"]) == (8, 2)
    assert row["stop"]["time_saved_s"] is None and row["first_budget"] is None
    [row] = run_json(capsys, "replay", str(path), "--set", "toolLimits.bash=3")["runs"]
    budget = row["first_budget"]
    assert (budget["call"], budget["kind"], budget["count"], budget["limit"]) == (4, "budget", 3, 3)
    assert row["denied"] == 7 and row["denied_by_kind"] == {"budget": 7}
    assert (row["stop"]["call"], row["stop"]["kind"], row["stop"]["calls_saved"]) == (
        6,
        "budget",
        4,
    )
    [row] = run_json(capsys, "replay", str(path), "--set", "stopAfterDenials=0")["runs"]
    assert row["stop"] is None and row["denied"] == 5

    code, out, _ = run(capsys, "replay", str(path), "--set", "toolLimits.bash=3")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        *("RUN", "CALLS", "DENIED", "SAVED", "STOP", "AFTER", "STOP", "BUDGET"),
        *("FIRST", "DENIAL"),
    ]
    # after the label (two words): calls, denied, time saved (no timestamps), the stop, the
    # calls after it / their time, the first budget denial, then the first denial
    assert lines[1].split()[2:10] == ["10", "7", "-", "#6", "4", "/", "-", "#4"]
    assert "#4 budget: bash(" in lines[1]
    assert (
        "A stop after 3 refusals in a row (stopAfterDenials=3) would have ended 1 run, saving "
        "the 4 calls made after it (no timestamps to measure time). Budgets "
        "(toolLimits.bash=3) would have refused a call in 1 run." in out
    )
    assert (
        "stopAfterDenials=3, resultProgress=true, sameResultLimit=0, cycleRounds=3, "
        "toolLimits.bash=3: "
        "1 run would have had a call denied" in out
    )
    code, out, _ = run(capsys, "replay", str(path), "--set", "stopAfterDenials=0")
    assert "BUDGET" not in out.splitlines()[0]  # no toolLimits: no budget column
    assert "stopAfterDenials=0: no run is stopped." in out


@needs_corpus
def test_budget_overrides_add_to_the_file_and_fail_naming_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = repeated_dsh_session(tmp_path, 10)
    config = tmp_path / "breaker.json"
    config.write_text(json.dumps({"toolLimits": {"web_*": 12}}))
    report = run_json(
        capsys, "replay", str(path), "--config", str(config), "--set", "toolLimits.bash=5"
    )
    assert report["config"]["toolLimits"] == {"web_*": 12, "bash": 5}
    # in order: a whole mapping replaces what came before, an entry adds to it
    report = run_json(
        capsys,
        "replay",
        str(path),
        "--config",
        str(config),
        "--set",
        'toolLimits={"read": 2}',
        "--set",
        "tool_limits.bash=4",
    )
    assert report["config"]["toolLimits"] == {"read": 2, "bash": 4}
    for bad, named in [
        ("toolLimits.bash=0", "toolLimits: bash: must be a positive integer, got 0"),
        ("toolLimits.bash=many", "toolLimits: bash: must be a positive integer, got 'many'"),
        ("toolLimits.=3", "expected toolLimits.PATTERN=N"),
        ("stopAfterDenials=-1", "stopAfterDenials: must be 0 (off) or more"),
    ]:
        for command in ("replay", "analyze", "calibrate"):
            code, out, err = run(capsys, command, str(path), "--set", bad)
            assert code == 2 and out == "", (command, bad)
            assert named in err, (command, bad, err)


@needs_corpus
def test_analyze_shows_the_stop_with_its_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = repeated_dsh_session(tmp_path, 10)
    code, out, _ = run(capsys, "analyze", str(path))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:7] == ["RUN", "TIME", "CALLS", "DIST", "FAIL", "STREAK", "STOP"]
    assert lines[1].split()[6:8] == ["10", "#8"]
    assert "would have ended 1 run, saving the 2 calls made after it" in out
    report = run_json(capsys, "analyze", str(path), "--set", "toolLimits.bash=2")
    assert report["config"]["toolLimits"] == {"bash": 2}
    [row] = report["runs"]
    assert (row["first_budget"]["call"], row["stop"]["call"]) == (3, 5)
    assert report["total"]["runs_with_budget_denial"] == 1
    assert report["total"]["stop_calls_saved"] == 5


@needs_corpus
def test_calibrate_stop_table_and_budget_grid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        *("calibrate", str(TAU2), "--limits", "6", "--windows", "200"),
        *("--stop-after", "2,3", "--tool-limit", "transfer_to_human_agents=3,50"),
    )
    assert code == 0, err
    head = "STOP AFTER DENIALS  STOPPED RUNS  NO-LOOP STOPPED  LOOPS ENDED       STOP AT"
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(head))
    rows = [line.split() for line in lines[at + 1 : lines.index("", at)]]
    # the current config, then 2 and 3 with each budget
    assert [(r[0], r[-1]) for r in rows] == [
        ("3", "-"),
        ("2", "transfer_to_human_agents=3"),
        ("2", "transfer_to_human_agents=50"),
        ("3", "transfer_to_human_agents=3"),
        ("3", "transfer_to_human_agents=50"),
    ]
    assert rows[0][1:6] == ["7", "0", "7", "of", "7"]  # 7 runs stopped, none outside a loop
    assert rows[2][1:6] == ["7", "0", "7", "of", "7"]  # 2 stops the same runs, a call earlier
    assert rows[4][1:6] == rows[0][1:6] and rows[4][11] == "0"  # 50 transfers: no budget refusal
    assert int(rows[3][2]) > 0  # a budget of 3 transfers stops healthy runs too

    report = run_json(
        capsys,
        *("calibrate", str(TAU2), "--limits", "6", "--windows", "200", "--runs"),
        *("--stop-after", "3", "--tool-limit", "transfer_to_human_agents=3"),
    )
    [entry] = report["stop_grid"]
    assert entry["config"]["toolLimits"] == {"transfer_to_human_agents": 3}
    assert entry["non_loop_runs_stopped"] == len(entry["non_loop_runs_stopped_list"]) > 0
    assert all(r["kind"] == "budget" for r in entry["non_loop_runs_stopped_list"])
    loop = next(r for r in report["runs"] if r["meta"]["task_id"] == "10")
    # one entry per config: the current one, resetOnNewCall=false, the budget's, then the
    # current one with results off (calls alone) and with sameResultLimit 8 and 12 (the
    # transfers' answers never move: the same stop)
    assert loop["stopped_at"] == [16, 16, 14, 16, 16, 16]
    configs = [r["config"] for r in report["results"]]
    results = [(c["resultProgress"], c["sameResultLimit"]) for c in configs]
    assert results == [(False, 0), (True, 8), (True, 12)]


@pytest.mark.parametrize(
    "bad", [["--stop-after", "0"], ["--tool-limit", "web_search"], ["--tool-limit", "=3"]]
)
def test_calibrate_refuses_a_bad_stop_grid(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, bad: list[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["calibrate", str(tmp_path), *bad])
    assert exited.value.code == 2
    assert f"argument {bad[0]}" in capsys.readouterr().err


def test_format_is_named_tau_bench_in_the_help_the_docs_and_the_reports(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """What the README and docs call tau-bench, `--format` calls tau-bench too (it was
    `openai`, a name no doc used for it), and so does each run's `format`."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_user", "arguments": "{}"}}
    traj = [{"role": "assistant", "tool_calls": [call]}, {"role": "tool", "tool_call_id": "c1"}]
    results = tmp_path / "results.txt"  # a name that settles nothing: --format does
    results.write_text(json.dumps([{"task_id": 4, "trial": 0, "reward": 1.0, "traj": traj}]))
    report = run_json(capsys, "analyze", str(results), "--format", "tau-bench")
    [row] = report["runs"]
    assert (row["format"], row["calls"]) == ("tau-bench", 1)
    assert row["run"] == "results.txt task 4 trial 0"
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    assert "tau-bench" in " ".join(capsys.readouterr().out.split())
    doc = (REPO / "docs" / "transcripts.md").read_text()
    table = doc.split("## Formats", 1)[1].split("\n\n", 2)[1]
    named = [re.findall(r"^\| `([\w-]+)` \|", row) for row in table.splitlines()[2:]]
    assert sorted(n for [n] in named) == sorted(FORMATS), named
