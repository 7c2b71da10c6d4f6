"""install / uninstall / doctor for claude-code and codex, status and incidents: run as
the user runs them (the real CLI in a subprocess) over a private HOME."""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.core import invocation
from dsh_circuit_breaker.harnesses import _settings as hs
from hook_support import denial, hook_env, pre_tool_use, run_hook
from support.streams import readline

CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]

# The harness CLIs (pinned in tests/e2e), which doctor looks for on PATH.
E2E_BIN = Path(__file__).parent / "e2e" / "node_modules" / ".bin"

OTHER_HOOK = {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo other"}]}


def cli(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def settings_of(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.mark.parametrize(
    ("target", "relative"),
    [
        ("claude-code", ".claude/settings.json"),
        ("codex", ".codex/hooks.json"),
        ("qwen-code", ".qwen/settings.json"),
        ("droid", ".factory/settings.json"),
    ],
)
def test_install_merges_is_idempotent_and_uninstall_removes_only_ours(
    tmp_path: Path, target: str, relative: str
) -> None:
    env = hook_env(tmp_path)
    path = tmp_path / relative
    path.parent.mkdir(parents=True)
    before = {"model": "keep-me", "hooks": {"PreToolUse": [OTHER_HOOK]}}
    path.write_text(json.dumps(before))
    path.chmod(0o640)

    first = cli(env, "install", target)
    assert first.returncode == 0, first.stderr
    assert "installed in" in first.stdout
    after = settings_of(path)
    assert after["model"] == "keep-me"
    assert after["hooks"]["PreToolUse"][0] == OTHER_HOOK  # theirs first and untouched
    ours = after["hooks"]["PreToolUse"][1]
    assert "matcher" not in ours  # every tool
    (handler,) = ours["hooks"]
    assert handler["type"] == "command" and handler["timeout"] == hs.HOOK_TIMEOUT
    command = handler["command"]
    assert command.split()[0].startswith("/")
    assert command.endswith(" hook" if target == "claude-code" else f" hook --harness {target}")
    assert after["hooks"]["UserPromptSubmit"] == [{"hooks": [handler]}]
    assert (path.stat().st_mode & 0o777) == 0o640  # the file keeps its mode
    backups = list(path.parent.glob(path.name + ".bak-*"))
    assert [json.loads(b.read_text()) for b in backups] == [before]

    second = cli(env, "install", target)
    assert "already installed" in second.stdout
    assert settings_of(path) == after
    assert len(list(path.parent.glob(path.name + ".bak-*"))) == 1  # nothing changed

    removed = cli(env, "uninstall", target)
    assert removed.returncode == 0 and "removed from" in removed.stdout
    # The user's own bytes (one line), not equal JSON re-indented; its backup named.
    assert path.read_text() == json.dumps(before)
    made = removed.stdout.split("(backup: ", 1)[1].split(")", 1)[0]
    assert json.loads(Path(made).read_text()) == after
    # Every change is backed up (was one backup a day: the later ones unsaved).
    for _ in range(3):
        assert "(backup: " in cli(env, "install", target).stdout
        assert "(backup: " in cli(env, "uninstall", target).stdout
    assert path.read_text() == json.dumps(before)
    backups = list(path.parent.glob(path.name + ".bak-*"))
    assert len(backups) == 8  # 4 installs and 4 uninstalls
    assert (
        sorted(json.dumps(json.loads(b.read_text())) for b in backups).count(json.dumps(before))
        == 4
    )
    again = cli(env, "uninstall", target)
    assert "not installed" in again.stdout


def test_project_and_local_scopes_and_reinstall_with_options(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    project = tmp_path / "repo"
    project.mkdir()
    done = cli(env, "install", "claude-code", "--scope", "local", "--project", str(project))
    assert done.returncode == 0, done.stderr
    local = project / ".claude" / "settings.local.json"
    assert hs.our_commands(settings_of(local))
    assert not (tmp_path / ".claude" / "settings.json").exists()
    # Reinstalling with a state URL replaces our entry instead of adding a second one.
    state = f"sqlite:///{tmp_path}/s.db"
    cli(
        env,
        "install",
        "claude-code",
        "--scope",
        "local",
        "--project",
        str(project),
        "--state",
        state,
    )
    found = hs.our_commands(settings_of(local))
    events = ("PreToolUse", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure")
    assert {e: len(c) for e, c in found.items()} == dict.fromkeys(events, 1)  # results: default
    assert all(found[e][0].endswith(f"hook --state {state}") for e in events)


def test_invalid_settings_are_never_overwritten(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text("{ this is not json")
    done = cli(env, "install", "claude-code")
    assert done.returncode == 1 and "not valid JSON" in done.stderr
    assert path.read_text() == "{ this is not json"


def test_is_ours_recognizes_only_our_hook() -> None:
    assert invocation.is_ours("/venv/bin/dsh-circuit-breaker hook")
    assert invocation.is_ours("'/a b/dsh-circuit-breaker' hook --state sqlite:///x.db")
    assert invocation.is_ours("/usr/bin/python3 -m dsh_circuit_breaker.cli hook")
    assert not invocation.is_ours("/venv/bin/dsh-circuit-breaker status")
    assert not invocation.is_ours("echo dsh-circuit-breaker hook-ish")
    assert not invocation.is_ours("my-linter hook")
    assert not invocation.is_ours(None)


def test_hook_command_runs_through_a_shell(tmp_path: Path) -> None:
    # Not in /tmp itself: a directory other users can write is refused as a state directory.
    state = f"sqlite:///{tmp_path}/a b.db"
    command = invocation.hook_command(str(tmp_path / "c f.json"), state)
    assert invocation.options_of(command) == (str(tmp_path / "c f.json"), state)
    # Gemini CLI's entry ends in `|| true`: the options end where the shell takes over.
    assert invocation.options_of(f"{command} || true") == invocation.options_of(command)
    assert invocation.is_ours(f"{command} || true")
    (tmp_path / "c f.json").write_text('{"duplicateLimit": 2}')
    env = hook_env(tmp_path)
    event = json.dumps(pre_tool_use(session="quoted"))
    outs = [
        subprocess.run(
            ["bash", "-c", command],
            input=event,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        for _ in range(2)
    ]
    assert [o.returncode for o in outs] == [0, 0]
    assert [denial(o.stdout) is None for o in outs] == [True, False]
    assert (tmp_path / "a b.db").exists()  # the quoted --state reached the hook whole


@pytest.mark.parametrize("target", ["claude-code", "codex"])
def test_doctor_passes_on_a_good_install(tmp_path: Path, target: str) -> None:
    env = hook_env(tmp_path, PATH=f"{E2E_BIN}{os.pathsep}{os.environ['PATH']}")
    cli(env, "install", target)
    done = cli(env, "doctor", target, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PROBLEM" not in done.stdout
    assert "hook command runs (PreToolUse" in done.stdout
    assert "state store writable" in done.stdout
    assert f"is installed: {E2E_BIN / target.replace('claude-code', 'claude')}" in done.stdout
    # The doctor's probe left no agent behind.
    status = cli(env, "status", "--json")
    assert status.stdout.strip() == ""


def test_doctor_says_exactly_what_is_wrong(tmp_path: Path) -> None:
    env = hook_env(tmp_path, PATH="/usr/bin:/bin")  # no harness CLI on it
    project = tmp_path / "p"
    project.mkdir()
    nothing = cli(env, "doctor", "claude-code", "--project", str(project))
    assert nothing.returncode == 1
    assert "the hook is not installed" in nothing.stdout
    # What docs/claude-code.md says doctor prints without `claude` on PATH, it prints.
    doc = (Path(__file__).parents[1] / "docs" / "claude-code.md").read_text()
    quoted = doc.split("Without it, doctor says, and exits 1:", 1)[1].split("```")[1]
    lines = [line.strip() for line in quoted.splitlines()[1:] if line.strip()]
    assert lines and lines[0].startswith("PROBLEM  Claude Code: the `claude` command")
    printed = [line.strip() for line in nothing.stdout.splitlines()]
    at = printed.index(lines[0])
    assert printed[at : at + len(lines)] == lines
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert cli(env, "install", "claude-code", "--config", str(bad)).returncode == 0
    bad.write_text('{"window": 2}')  # broken after install, which refuses a bad file
    broken = cli(env, "doctor", "claude-code", "--project", str(project))
    assert broken.returncode == 1
    assert "hook command warned on PreToolUse" in broken.stdout
    assert "config key window" in broken.stdout  # names the key
    # A hook pointing at an interpreter that is gone.
    path = tmp_path / ".claude" / "settings.json"
    data = settings_of(path)
    for event in ("PreToolUse", "UserPromptSubmit"):
        data["hooks"][event][0]["hooks"][0]["command"] = "/gone/bin/dsh-circuit-breaker hook"
    path.write_text(json.dumps(data))
    gone = cli(env, "doctor", "claude-code", "--project", str(project))
    assert "hook command exited 127" in gone.stdout


def test_status_shows_counts_and_trips(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    for _ in range(6):  # the 6th refused
        run_hook(pre_tool_use("Bash", {"command": "ls"}, session="looper"), env)
    run_hook(pre_tool_use("Bash", {"command": "ls"}, session="calm"), env)
    rows = [json.loads(line) for line in cli(env, "status", "--json").stdout.splitlines()]
    by_agent = {r["agent"]: r for r in rows}
    assert by_agent["looper"]["calls"] == 5
    assert by_agent["looper"]["topRepeat"] == 5
    assert by_agent["looper"]["tripped"] == ["duplicate"]
    assert by_agent["calm"]["tripped"] == [] and by_agent["calm"]["calls"] == 1
    table = cli(env, "status").stdout
    assert "looper" in table and "duplicate" in table and "5/300" in table
    # The refused repeat names its tool (was `5/6` alone), from the incident log.
    assert by_agent["looper"]["topRepeatTool"] == "Bash"
    assert by_agent["calm"]["topRepeatTool"] is None
    assert "5/6 Bash" in table
    assert by_agent["looper"]["denialsInARow"] == 1 and by_agent["looper"]["budgets"] == {}


def test_status_shows_a_stopped_agent_and_a_spent_budget(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    config = tmp_path / "breaker.json"
    config.write_text(json.dumps({"toolLimits": {"Web*": 2}}))
    env["DSH_CIRCUIT_BREAKER_CONFIG"] = str(config)
    for _ in range(8):  # 5 run, then the third refusal in a row is a stop
        run_hook(pre_tool_use("Bash", {"command": "ls"}, session="looper"), env)
    for query in ("a", "b"):
        run_hook(pre_tool_use("WebSearch", {"query": query}, session="searcher"), env)
    rows = [json.loads(line) for line in cli(env, "status", "--json").stdout.splitlines()]
    by_agent = {r["agent"]: r for r in rows}
    looper, searcher = by_agent["looper"], by_agent["searcher"]
    assert looper["tripped"] == ["duplicate", "stop"]
    assert (looper["denialsInARow"], looper["stopAfterDenials"]) == (3, 3)
    assert searcher["tripped"] == ["budget"]
    assert searcher["budgets"] == {"Web*": {"spent": 2, "limit": 2}}
    assert "duplicate,stop" in cli(env, "status").stdout


def test_incidents_readable_and_follow(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    empty = cli(env, "incidents")
    assert "no incidents yet" in empty.stdout
    for _ in range(6):  # the 6th refused: copies 6, limit 6
        run_hook(pre_tool_use(session="tripped-session"), env)
    lines = cli(env, "incidents").stdout.splitlines()
    assert len(lines) == 1
    assert "duplicate" in lines[0] and "Bash" in lines[0] and "6/6" in lines[0]
    assert lines[0].endswith("agent tripped-session")
    follower = subprocess.Popen(
        [*CLI, "incidents", "--follow"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert follower.stdout is not None
        assert "tripped-session" in readline(follower.stdout)
        for _ in range(7):
            run_hook(pre_tool_use("Read", {"file_path": "/x"}, session="second"), env)
        line = readline(follower.stdout, timeout=10)
        assert "agent second" in line and "Read" in line
    finally:
        follower.kill()
        follower.wait()


def test_installed_command_is_this_interpreter_without_the_script_wrapper(tmp_path: Path) -> None:
    state = f"sqlite:///{tmp_path}/x.db"
    words = shlex.split(invocation.hook_command(state=state))
    assert words[:3] == [os.path.abspath(sys.executable), "-c", invocation.HOOK_PROGRAM]
    assert words[3:] == ["hook", "--state", state]
    assert invocation.is_ours(shlex.join(words))


def test_the_installed_program_exits_with_the_commands_status(tmp_path: Path) -> None:
    # An HTTP install's start command (`serve --ensure`) and the MCP relay run through the
    # same program: a failure must reach the harness as one, not as `-c`'s status 0.
    done = subprocess.run(
        [*invocation.entry_point(), "serve", "--http", "127.0.0.1:99999"],
        env=hook_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "the port must be a number" in done.stderr


def _state_db(home: Path) -> Path:
    return home / "state" / "dsh-circuit-breaker" / "state.db"


def test_status_prints_last_calls_in_utc_like_the_incident_log(tmp_path: Path) -> None:
    env = hook_env(tmp_path, TZ="Asia/Tokyo")  # nine hours from UTC: local time would show
    for _ in range(7):
        run_hook(pre_tool_use(session="looper"), env)
    (row,) = [json.loads(line) for line in cli(env, "status", "--json").stdout.splitlines()]
    expected = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(row["updated"]))
    table = cli(env, "status").stdout.splitlines()
    assert table[-1].endswith(f"  {expected}"), table
    assert row["lastCallAt"] == expected  # --json says the time as the text does
    assert table[-2].endswith("  LAST CALL AT")  # a time, not the call
    (incident,) = cli(env, "incidents").stdout.splitlines()
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  duplicate", incident)


def test_status_skips_and_counts_a_corrupt_row(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    for session in ("broken", "fine"):
        run_hook(pre_tool_use(session=session), env)
    with sqlite3.connect(_state_db(tmp_path)) as db:
        db.execute("UPDATE agents SET state = ? WHERE agent = 'broken'", (b'{"v":1,"calls":"x"',))
    shown = cli(env, "status")
    assert shown.returncode == 0, shown.stderr
    assert "1 unreadable agent record skipped" in shown.stdout
    assert "fine" in shown.stdout and "Traceback" not in shown.stderr
    listed = cli(env, "status", "--json")
    assert [json.loads(line)["agent"] for line in listed.stdout.splitlines()] == ["fine"]
    assert "1 unreadable agent record skipped" in listed.stderr
    repaired = cli(env, "reset", "broken")
    assert repaired.returncode == 0 and "unreadable record is removed" in repaired.stdout
    assert "unreadable" not in cli(env, "status").stdout


def test_reset_frees_a_capped_subagent_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    config = tmp_path / "config" / "dsh-circuit-breaker" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"maxCallsPerAgent": 3}))

    def call(n: int) -> str | None:
        event = pre_tool_use("Bash", {"command": f"echo {n}"}, session="s", agent_id="sub1")
        return denial(run_hook(event, env).stdout)

    assert [call(n) is None for n in range(4)] == [True, True, True, False]
    unknown = cli(env, "reset", "sub1")
    assert unknown.returncode == 1
    assert "no agent 'sub1'" in unknown.stderr and "nothing reset" in unknown.stderr
    assert "did you mean 's/sub1'?" in unknown.stderr
    assert call(5) is not None  # still capped: nothing was reset

    done = cli(env, "reset", "s/sub1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        done.stdout.strip()
        == "reset s/sub1: forgot 3 calls (tripped: cap); its next call starts afresh"
    )
    assert call(6) is None  # runs again at once
    assert "s/sub1" in cli(env, "status").stdout

    other = tmp_path / "other.db"
    elsewhere = cli(env, "reset", "s/sub1", "--state", f"sqlite:///{other}")
    assert elsewhere.returncode == 1 and f"in sqlite:///{other}" in elsewhere.stderr


def test_incidents_skip_and_count_corrupt_lines_and_escape_control_characters(
    tmp_path: Path,
) -> None:
    env = hook_env(tmp_path)
    log = tmp_path / "incidents.jsonl"
    good = {"time": "2026-09-01T23:10:07Z", "kind": "cap", "tool": "bash", "count": 3, "limit": 3}
    hostile = {**good, "tool": "\x1b[2J\x1b[31mred", "agent": "a\x1b]0;owned\x07\r\u202e"}
    log.write_text(
        "\n".join(
            [
                json.dumps({**good, "agent": "agent-007"}),
                json.dumps({**good, "kind": {"not": "a string"}}),
                "[" * 100_000 + "]" * 100_000,
                "not json \x1b[2J",
                json.dumps(hostile),
                json.dumps({**good, "agentKeys": ["model", "tools"]}),
            ]
        )
        + "\n"
    )
    shown = cli(env, "incidents", "--log", str(log))
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stderr
    assert "3 unreadable lines skipped" in shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].endswith("cap        bash  3/3  agent agent-007")
    assert not any(c in shown.stdout for c in "\x1b\x07\r\u202e")
    assert "\\x1b[2J\\x1b[31mred" in lines[1] and "agent a\\x1b]0;owned\\x07\\r\\u202e" in lines[1]
    assert lines[2].endswith("agent object with fields model,tools")
    as_json = cli(env, "incidents", "--log", str(log), "--json")
    assert [json.loads(line) for line in as_json.stdout.splitlines()] == [
        {**good, "agent": "agent-007"},
        hostile,
        {**good, "agentKeys": ["model", "tools"]},
    ]
    assert "\x1b" not in as_json.stdout


def test_droid_install_refuses_when_its_hooks_json_would_replace_ours(tmp_path: Path) -> None:
    # droid reads ~/.factory/hooks.json too, and an event defined there replaces the
    # settings file's hooks for that event: our hook would never run.
    env = hook_env(tmp_path, PATH=f"{E2E_BIN}{os.pathsep}{os.environ['PATH']}")
    factory = tmp_path / ".factory"
    factory.mkdir()
    hooks_json = factory / "hooks.json"
    hooks_json.write_text(json.dumps({"PreToolUse": [OTHER_HOOK]}))
    refused = cli(env, "install", "droid")
    assert refused.returncode == 1
    assert f"{hooks_json} defines PreToolUse" in refused.stderr
    assert not (factory / "settings.json").exists()
    hooks_json.unlink()
    assert cli(env, "install", "droid").returncode == 0
    hooks_json.write_text(json.dumps({"UserPromptSubmit": [OTHER_HOOK]}))  # added later
    doctor = cli(env, "doctor", "droid")
    assert doctor.returncode == 1
    assert f"PROBLEM  {hooks_json} defines UserPromptSubmit" in doctor.stdout
    assert "PreToolUse" not in doctor.stdout.split("PROBLEM", 1)[1].split("\n")[0]


def test_uninstall_removes_a_settings_file_that_install_created(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    path = tmp_path / ".claude" / "settings.json"
    assert cli(env, "install", "claude-code").returncode == 0 and path.exists()
    removed = cli(env, "uninstall", "claude-code")
    assert removed.returncode == 0, removed.stderr
    assert not path.exists()  # was left behind holding `{}`
    assert list(path.parent.iterdir()) == []  # and no backup of a file of ours alone
