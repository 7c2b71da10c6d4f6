"""The command hook without a harness: the exact events Claude Code and Codex send, one
process per event, as they run it."""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.core.cjson import loads
from hook_support import denial, hook_env, make_read_only, pre_tool_use, prompt_submit, run_hook
from support.streams import readline

PROBE = [{"command": "echo cbprobe4", "description": f"Run probe step {i}"} for i in range(1, 11)]


def state_dir(home: Path) -> Path:
    return home / "state" / "dsh-circuit-breaker"


def test_probe_five_run_the_sixth_denied_with_exact_shape(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    outs = [run_hook(pre_tool_use("Bash", call), env) for call in PROBE]
    assert [o.returncode for o in outs] == [0] * 10
    assert [o.stdout for o in outs[:5]] == [""] * 5  # allow: print nothing
    assert all(o.stderr == "" for o in outs)
    for number, o in enumerate(outs[5:], start=6):
        decision = json.loads(o.stdout)
        if number >= 8:  # the 3rd refusal in a row on: the deny, and Claude Code's stop
            assert decision.pop("continue") is False
            assert decision.pop("stopReason").startswith(
                "Circuit breaker: this agent is being stopped because it no longer reads"
            )
        assert set(decision) == {"hookSpecificOutput"}
        specific = decision["hookSpecificOutput"]
        assert set(specific) == {"hookEventName", "permissionDecision", "permissionDecisionReason"}
        assert specific["hookEventName"] == "PreToolUse"
        assert specific["permissionDecision"] == "deny"
        reason = specific["permissionDecisionReason"]
        assert reason.startswith("Circuit breaker: NOT run, a repeat (copies: 6, limit: 6)")
        assert "this Bash call is identical" in reason
    # The default state and incident log live in the XDG state directory, owner-only.
    directory = state_dir(tmp_path)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / "state.db").stat().st_mode) == 0o600
    lines = (directory / "incidents.jsonl").read_text().splitlines()
    # The first denial of its kind only, and the first stop (the 3rd refusal in a row).
    assert len(lines) == 2
    incident, stop = (json.loads(line) for line in lines)
    assert incident["agent"] == stop["agent"] == "sess-1"
    assert incident["harness"] == stop["harness"] == "claude-code"  # the live page names it
    assert (incident["kind"], incident["tool"], incident["count"]) == ("duplicate", "Bash", 6)
    assert (stop["kind"], stop["tool"], stop["count"], stop["limit"]) == ("stop", "Bash", 3, 3)


def test_subagent_is_its_own_agent(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    call = {"command": "grep -r needle ."}
    sub = [run_hook(pre_tool_use("Bash", call, agent_id="a1b2"), env) for _ in range(6)]
    assert [denial(o.stdout) is None for o in sub] == [True] * 5 + [False]
    # The parent, same session_id, has made none of those calls.
    parent = run_hook(pre_tool_use("Bash", call), env)
    assert denial(parent.stdout) is None
    other_sub = run_hook(pre_tool_use("Bash", call, agent_id="c3d4"), env)
    assert denial(other_sub.stdout) is None
    incident = json.loads((state_dir(tmp_path) / "incidents.jsonl").read_text())
    assert incident["agent"] == "sess-1/a1b2"


def test_user_prompt_resets_the_main_agent_only(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    for _ in range(5):
        assert denial(run_hook(pre_tool_use(), env).stdout) is None
        assert denial(run_hook(pre_tool_use(agent_id="sub"), env).stdout) is None
    assert denial(run_hook(pre_tool_use(), env).stdout) is not None
    reset = run_hook(prompt_submit(), env)
    assert (reset.returncode, reset.stdout, reset.stderr) == (0, "", "")
    assert denial(run_hook(pre_tool_use(), env).stdout) is None  # new intent, fresh start
    assert denial(run_hook(pre_tool_use(agent_id="sub"), env).stdout) is not None


def test_reset_on_user_prompt_can_be_turned_off(tmp_path: Path) -> None:
    config = tmp_path / "cb.json"
    config.write_text(json.dumps({"resetOnUserPrompt": False}))
    env = hook_env(tmp_path, DSH_CIRCUIT_BREAKER_CONFIG=str(config))
    for _ in range(5):
        run_hook(pre_tool_use(), env)
    run_hook(prompt_submit(), env)
    assert denial(run_hook(pre_tool_use(), env).stdout) is not None


def test_claude_code_exempt_spellings(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    for tool in ("TodoWrite", "AskUserQuestion", "ExitPlanMode", "todo_write"):
        outs = [run_hook(pre_tool_use(tool, {"todos": []}), env) for _ in range(8)]
        assert all(o.stdout == "" and o.returncode == 0 for o in outs), tool
    assert not (state_dir(tmp_path) / "state.db").exists()  # unguarded: no store opened


@pytest.mark.parametrize(
    "payload",
    [
        b"not json at all",
        b"",
        b"[1, 2, 3]",
        b'{"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {}}',
        b'{"session_id": "s", "hook_event_name": "PreToolUse", "tool_input": {}}',
        b'{"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash"}',
        b'{"session_id": 7, "hook_event_name": "PreToolUse", "tool_name": "B", "tool_input": {}}',
        b'{"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Bash"}',
        b'{"session_id": "s"}',
        b"\xff\xfe garbage bytes",
        b"[" * 100000,
    ],
    ids=lambda p: repr(p[:30]),
)
def test_garbage_allows_with_one_stderr_line(tmp_path: Path, payload: bytes) -> None:
    done = run_hook(payload, hook_env(tmp_path))
    assert done.returncode == 0
    assert done.stdout == ""  # allowed: no decision printed, and never a traceback
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("dsh-circuit-breaker: hook: ")


# What Claude Code runs though our strict parser refuses it (JSON.parse has no depth
# limit and reads an integer of any length; bad UTF-8 becomes U+FFFD), in tool_input.
UNREADABLE = {
    "nested 1,200 deep": b'{"a":' * 1200 + b"1" + b"}" * 1200,
    "an integer of 4,301 digits": b"9" * 4301,
    "a byte that is not UTF-8": b'"caf\xe9"',
}


@pytest.mark.parametrize("beside", sorted(UNREADABLE))
def test_an_event_our_parser_refuses_is_judged_as_the_harness_reads_it(
    tmp_path: Path, beside: str
) -> None:
    plain = json.dumps(pre_tool_use("Bash", {"command": "echo x", "more": 0})).encode()
    odd = plain.replace(b'"more": 0', b'"more": ' + UNREADABLE[beside])
    (tmp_path / "plain").mkdir()
    (tmp_path / "odd").mkdir()
    plain_runs = [run_hook(plain, hook_env(tmp_path / "plain")) for _ in range(8)]
    odd_runs = [run_hook(odd, hook_env(tmp_path / "odd")) for _ in range(8)]
    allowed = [done.stdout == "" for done in plain_runs]
    assert False in allowed
    assert [done.stdout == "" for done in odd_runs] == allowed
    try:  # Python 3.12's parser reads 1,200 levels, 3.10's and 3.11's do not
        loads(odd)
        strict = True
    except (ValueError, RecursionError):
        strict = False
    for done in odd_runs:
        assert done.returncode == 0
        if strict:  # read as any event: nothing to say
            assert done.stderr == "", done.stderr
            continue
        assert done.stderr.count("\n") == 1 and "judged as read" in done.stderr, done.stderr
        assert done.stderr.startswith("dsh-circuit-breaker: hook: ")


def test_huge_event_allows_with_one_stderr_line(tmp_path: Path) -> None:
    big = pre_tool_use("Write", {"file_path": "/tmp/x", "content": "x" * (17 * 1024 * 1024)})
    done = run_hook(big, hook_env(tmp_path))
    assert (done.returncode, done.stdout) == (0, "")
    assert len(done.stderr.splitlines()) == 1 and "larger than" in done.stderr


def test_unknown_fields_are_tolerated(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    codex = {"turn_id": "t-9", "model": "gpt-5-codex", "permission_mode": "default"}
    outs = [
        run_hook(pre_tool_use("Bash", {"command": "ls"}, future_field={"x": 1}, **codex), env)
        for _ in range(6)
    ]
    assert [denial(o.stdout) is None for o in outs] == [True] * 5 + [False]
    assert all(o.stderr == "" for o in outs)


def test_bad_arguments_and_bad_config_allow(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    done = run_hook(pre_tool_use(), env, "--bogus")
    assert (done.returncode, done.stdout, len(done.stderr.splitlines())) == (0, "", 1)
    bad = tmp_path / "bad.json"
    bad.write_text('{"duplicateLimit": -1}')
    done = run_hook(pre_tool_use(), env, "--config", str(bad))
    assert (done.returncode, done.stdout) == (0, "")
    assert len(done.stderr.splitlines()) == 1 and "duplicateLimit" in done.stderr
    missing = run_hook(pre_tool_use(), env, "--config", str(tmp_path / "nope.toml"))
    assert (missing.returncode, missing.stdout, len(missing.stderr.splitlines())) == (0, "", 1)


@pytest.mark.parametrize("how", ["--state", "environment", "config file"])
def test_memory_state_is_refused_with_one_line(tmp_path: Path, how: str) -> None:
    # Each hook is a new process: a memory:// store would never deny anything, silently.
    env = hook_env(tmp_path)
    args: list[str] = []
    if how == "--state":
        args = ["--state", "memory://"]
    elif how == "environment":
        env["DSH_CIRCUIT_BREAKER_STATE"] = "memory://"
    else:
        (tmp_path / "cb.json").write_text('{"state": "memory://"}')
        args = ["--config", str(tmp_path / "cb.json")]
    for done in [run_hook(pre_tool_use(), env, *args) for _ in range(2)]:
        assert (done.returncode, done.stdout) == (0, "")
        assert len(done.stderr.splitlines()) == 1 and "nothing would be counted" in done.stderr


def test_config_file_and_state_url_options(tmp_path: Path) -> None:
    toml = tmp_path / "cb.toml"
    toml.write_text('duplicateLimit = 3\nwindow = 10\nincidentLog = ""\n')
    state = tmp_path / "elsewhere" / "s.db"
    env = hook_env(tmp_path)
    outs = [
        run_hook(pre_tool_use(), env, "--config", str(toml), "--state", f"sqlite:///{state}")
        for _ in range(3)
    ]
    assert [denial(o.stdout) is None for o in outs] == [True, True, False]
    assert state.exists() and not (state_dir(tmp_path) / "state.db").exists()
    assert not (state_dir(tmp_path) / "incidents.jsonl").exists()  # incidentLog "" is off
    # The same through the environment, and a state URL named in the config file.
    other = tmp_path / "other.db"
    toml.write_text(f'duplicateLimit = 2\nwindow = 10\nstate = "sqlite:///{other}"\n')
    env = hook_env(tmp_path, DSH_CIRCUIT_BREAKER_CONFIG=str(toml))
    outs = [run_hook(pre_tool_use(), env) for _ in range(2)]
    assert [denial(o.stdout) is None for o in outs] == [True, False]
    assert other.exists()
    env["DSH_CIRCUIT_BREAKER_STATE"] = f"sqlite:///{tmp_path}/env.db"
    assert denial(run_hook(pre_tool_use(), env).stdout) is None  # a fresh store
    assert (tmp_path / "env.db").exists()


def test_user_config_file_is_found(tmp_path: Path) -> None:
    directory = tmp_path / "config" / "dsh-circuit-breaker"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(
        json.dumps([{"id": "other"}, {"id": "circuit-breaker", "config": {"duplicateLimit": 2}}])
    )
    env = hook_env(tmp_path)
    outs = [run_hook(pre_tool_use(), env) for _ in range(2)]
    assert [denial(o.stdout) is None for o in outs] == [True, False]
    assert "(copies: 2, limit: 2)" in (denial(outs[1].stdout) or "")


# What an allowed call of the command hook imports of ours, beyond the C modules a
# decision needs: each module costs a hook process about 0.1 ms, on every tool call
# (bench/hook_latency.py). A module added to the hook path must be added here, on purpose.
HOOK_MODULES = {
    "dsh_circuit_breaker",
    "dsh_circuit_breaker.cli",
    "dsh_circuit_breaker.harnesses",
    # What a harness module borrows by assignment (its members typed by `_contract`, which
    # only mypy imports): one small module, importing only what the hook has loaded.
    "dsh_circuit_breaker.harnesses._defaults",
    "dsh_circuit_breaker.harnesses._pretooluse",
    "dsh_circuit_breaker.harnesses.claude_code",
    "dsh_circuit_breaker.hook",
    "dsh_circuit_breaker.judge",
    # The kernel (core/__init__.py says why its modules are written for speed).
    "dsh_circuit_breaker.core",
    "dsh_circuit_breaker.core._log",
    "dsh_circuit_breaker.core.assembly",
    "dsh_circuit_breaker.core.breaker",
    "dsh_circuit_breaker.core.cjson",
    "dsh_circuit_breaker.core.config",
    "dsh_circuit_breaker.core.config_file",
    "dsh_circuit_breaker.core.files",
    "dsh_circuit_breaker.core.invocation",
    "dsh_circuit_breaker.core.keys",
    "dsh_circuit_breaker.core.rules",
    "dsh_circuit_breaker.core.state",
    "dsh_circuit_breaker.core.stores",
    "dsh_circuit_breaker.core.stores.sqlite",
    "dsh_circuit_breaker.core.stores.unavailable",
}


@pytest.mark.parametrize("export", [False, True], ids=["plain", "otel-export-on"])
def test_an_allowed_call_imports_only_what_it_needs(tmp_path: Path, export: bool) -> None:
    """With OpenTelemetry export on or off (telemetry.py: a refusal loads the SDK, an
    allowed call nothing of it), beyond `import _json, _sqlite3, _blake2`
    (bench/hook_latency.py's floor, which brings functools and collections with it), an
    allowed call imports HOOK_MODULES and
    `__future__` (the runtime side of `from __future__ import annotations`), nothing else:
    no json, re, typing, logging, and none of our modules for denials or other commands.
    (`_collections`, the C part of collections that state.py uses, is in the floor from
    Python 3.11, where `_sqlite3` imports functools; on 3.10 it is ours to import.)"""
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SERVICE_NAME": "x"}
    code = (
        "import sys, _json, _sqlite3, _blake2\n"
        "floor = set(sys.modules)\n"
        "from dsh_circuit_breaker.cli import main\n"
        "main(['hook', '--state', sys.argv[1]])\n"
        "print(' '.join(sorted(set(sys.modules) - floor)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, f"sqlite:///{tmp_path}/state.db"],
        input=json.dumps(pre_tool_use("Bash", {"command": "ls"})),
        capture_output=True,
        text=True,
        env=hook_env(tmp_path, **otel) if export else hook_env(tmp_path),
        timeout=60,
        check=True,
    )
    assert done.stderr == ""
    assert set(done.stdout.split()) - {"_collections"} == HOOK_MODULES | {"__future__"}


def test_no_argument_content_on_disk(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    secret = "sk-live-0123456789abcdef-secret"
    for _ in range(8):
        run_hook(pre_tool_use("Bash", {"command": f"curl -H 'Authorization: {secret}'"}), env)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "incidents.jsonl" for p in files)
    for path in files:
        assert secret.encode() not in path.read_bytes(), path


@pytest.mark.timeout(300)  # 640 hook processes: ~50 s on a busy 2-core machine
def test_sixteen_processes_forty_events_allow_exactly_five(tmp_path: Path) -> None:
    # A generous lock budget: this is about atomicity, and on a loaded machine a 2 s
    # wait could run out and (rightly) fail open, which would count as a sixth allow.
    config = tmp_path / "patient.json"
    config.write_text('{"storeTimeout": 60}')
    env = hook_env(tmp_path, DSH_CIRCUIT_BREAKER_CONFIG=str(config))
    event = pre_tool_use("Bash", {"command": "npm test"}, session="shared")

    def worker(_: int) -> list[bool]:
        return [denial(run_hook(event, env).stdout) is None for _ in range(40)]

    with ThreadPoolExecutor(16) as pool:
        results = [allowed for batch in pool.map(worker, range(16)) for allowed in batch]
    assert len(results) == 640
    assert results.count(True) == 5
    with sqlite3.connect(state_dir(tmp_path) / "state.db") as db:
        (data,) = db.execute("SELECT state FROM agents WHERE agent = 'shared'").fetchone()
    assert json.loads(data)["calls"] == 5


KILL_CHILD = r"""
import os, sys, time
from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.stores.sqlite import SQLiteStore

store = SQLiteStore(sys.argv[1], Config())
db = store._connect()

class Stall:
    # Forwards to the real connection, but stops dead just before COMMIT: the row
    # is written inside the open transaction, and the parent kills us there.
    def __getattr__(self, name):
        return getattr(db, name)

    def execute(self, sql, *args):
        if sql == "COMMIT":
            os.write(1, b"in-transaction\n")
            time.sleep(60)
        return db.execute(sql, *args)

store._db = Stall()
CircuitBreaker(Config(), state=store).check("victim", "Bash", {"command": "echo cbprobe4"})
"""


def test_sigkill_mid_transaction_leaves_the_store_consistent(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    db_path = state_dir(tmp_path) / "state.db"
    event = pre_tool_use("Bash", {"command": "echo cbprobe4"}, session="victim")
    for _ in range(3):
        assert denial(run_hook(event, env).stdout) is None
    child = subprocess.Popen(
        [sys.executable, "-c", KILL_CHILD, str(db_path)], stdout=subprocess.PIPE, env=env
    )
    assert child.stdout is not None
    try:
        assert readline(child.stdout) == b"in-transaction\n"  # holding the write lock now
    finally:
        child.kill()  # SIGKILL: no cleanup, no rollback of its own
        child.wait()
    with sqlite3.connect(db_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        (data,) = db.execute("SELECT state FROM agents WHERE agent = 'victim'").fetchone()
    assert json.loads(data)["calls"] == 3  # the killed call's write never landed
    # The lock died with the process: the next hooks run at once and count on from 3.
    outs = [run_hook(event, env) for _ in range(3)]
    assert [denial(o.stdout) is None for o in outs] == [True, True, False]
    assert all(o.stderr == "" for o in outs)


def test_hooks_killed_at_random_moments_never_corrupt(tmp_path: Path) -> None:
    import random
    import time

    from hook_support import HOOK_COMMAND

    env = hook_env(tmp_path)
    event = pre_tool_use("Bash", {"command": "make"}, session="k")
    rng = random.Random(7)
    for _ in range(20):
        child = subprocess.Popen(
            HOOK_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env
        )
        assert child.stdin is not None
        child.stdin.write(json.dumps(event).encode())
        child.stdin.close()
        time.sleep(rng.uniform(0.0, 0.05))
        child.kill()
        child.wait()

    def committed() -> int:
        path = state_dir(tmp_path) / "state.db"
        if not path.exists():
            return 0
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            tables = db.execute("SELECT name FROM sqlite_master WHERE name = 'agents'").fetchall()
            row = tables and db.execute("SELECT state FROM agents WHERE agent = 'k'").fetchone()
        return int(json.loads(row[0])["calls"]) if row else 0

    before = committed()
    assert before <= 5
    after = [run_hook(event, env) for _ in range(6)]
    assert all(o.returncode == 0 and o.stderr == "" for o in after)
    assert [denial(o.stdout) is None for o in after].count(True) == 5 - before
    assert committed() == 5


def test_read_only_state_directory_allows_with_one_line(tmp_path: Path) -> None:
    directory = state_dir(tmp_path)
    directory.mkdir(parents=True)
    undo = make_read_only(directory)
    if undo is None:
        pytest.skip("cannot make a directory read-only for root here (no mount, no chattr)")
    try:
        env = hook_env(tmp_path)
        outs = [run_hook(pre_tool_use(), env) for _ in range(8)]
    finally:
        undo()
    assert all(o.returncode == 0 and o.stdout == "" for o in outs)
    for o in outs:
        assert len(o.stderr.splitlines()) == 1, o.stderr
        assert "state store unavailable" in o.stderr


def test_lock_held_past_the_budget_allows_with_one_line(tmp_path: Path) -> None:
    import time

    config = tmp_path / "quick.json"
    config.write_text('{"storeTimeout": 0.3}')
    env = hook_env(tmp_path, DSH_CIRCUIT_BREAKER_CONFIG=str(config))
    assert run_hook(pre_tool_use(), env).stdout == ""  # creates the store
    holder = sqlite3.connect(state_dir(tmp_path) / "state.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # someone else holds the write lock, and keeps it
    try:
        started = time.monotonic()
        done = run_hook(pre_tool_use(), env)
        elapsed = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (done.returncode, done.stdout) == (0, "")
    assert len(done.stderr.splitlines()) == 1 and "state store unavailable" in done.stderr
    assert elapsed < 5  # waited about its budget, then let the agent go on


def openhands_event(kind: str, session: str = "conv-1", **fields: Any) -> dict[str, Any]:
    """An event as OpenHands' HookExecutor writes it (`HookEvent.model_dump_json()`)."""
    base = {"event_type": kind, "tool_name": None, "tool_input": None, "tool_response": None}
    base.update(message=None, session_id=session, working_dir="/w", metadata={})
    return {**base, **fields}


def test_openhands_events_and_answers(tmp_path: Path) -> None:
    """OpenHands' wire shape (no SDK needed): the action's `kind` is not an argument, a
    deny is `decision`/`reason`, a stop adds `continue: false` and `stopReason`, and a
    user message starts the conversation afresh."""
    env = hook_env(tmp_path)
    args = ("--harness", "openhands")

    def call(n: int, session: str = "conv-1") -> Any:
        action = {"query": "same", "kind": f"SearchAction{n}"}  # kind differs: ignored
        event = openhands_event("PreToolUse", session, tool_name="search", tool_input=action)
        return run_hook(event, env, *args)

    outs = [call(n) for n in range(8)]
    assert [o.stdout for o in outs[:5]] == [""] * 5
    assert all(o.returncode == 0 and o.stderr == "" for o in outs)
    denied = [json.loads(o.stdout) for o in outs[5:]]
    assert [d["decision"] for d in denied] == ["deny"] * 3
    assert denied[0]["reason"].startswith(
        "Circuit breaker: NOT run, a repeat (copies: 6, limit: 6)"
    )
    assert "continue" not in denied[0] and "continue" not in denied[1]
    assert denied[2]["continue"] is False
    assert denied[2]["stopReason"].startswith("Circuit breaker: this agent is being stopped")
    assert call(0, session="conv-2").stdout == ""  # another conversation: its own count
    prompt = run_hook(openhands_event("UserPromptSubmit", message="go on"), env, *args)
    assert (prompt.stdout, prompt.stderr) == ("", "")
    assert call(0).stdout == ""  # the new message started conv-1 afresh
    for bad in (openhands_event("PreToolUse", tool_name="search"), {"event_type": "Nope"}):
        done = run_hook(bad, env, *args)
        assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr


def big_bash(description: str, last: int = 0) -> dict[str, Any]:
    """Bash arguments of about 1.3 MB, past the size from which an event is read in bounded
    memory (judge.BIG_EVENT_BYTES): its `rows` are judged by a digest of their bytes."""
    return {
        "command": "psql -f -",
        "description": description,
        "rows": [{"a": i} for i in range(131_072)] + [{"a": last}],
    }


@pytest.mark.timeout(180)  # 12 hook processes reading 1.3 MB each
def test_big_calls_are_counted_exactly_by_their_bytes(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    # The same big call, its ignored `description` (SPEC's ignoreArgs) changing: refused
    # at the 6th copy, as any call.
    same = [run_hook(pre_tool_use("Bash", big_bash(f"step {i}")), env) for i in range(6)]
    assert [denial(o.stdout) is None for o in same] == [True] * 5 + [False]
    assert [o.returncode for o in same] == [0] * 6
    assert "big hook event judged as read: 1 containers past" in same[0].stderr
    # Five copies of one, then one differing from them in one byte: a new call, allowed
    # (read as the same, it would be the 6th copy).
    other = [pre_tool_use("Bash", big_bash("x", last), session="sess-2") for last in (0, 1)]
    outs = [run_hook(other[0], env) for _ in range(5)] + [run_hook(other[1], env)]
    assert len(json.dumps(other[0])) == len(json.dumps(other[1]))
    assert [denial(o.stdout) for o in outs] == [None] * 6
