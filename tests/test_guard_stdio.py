"""The guard process (`dsh-circuit-breaker serve --stdio`): its JSON-lines protocol, run as a
real subprocess the way the DSH plugin runs it."""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.core.config import Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from dsh_circuit_breaker.guard.stdio import MAX_REQUEST_BYTES, GuardServer
from support.streams import readline


class Guard:
    def __init__(self, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dsh_circuit_breaker.cli", "serve", "--stdio", *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def ask(self, request: dict[str, Any] | bytes) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        line = request if isinstance(request, bytes) else json.dumps(request).encode()
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        reply: dict[str, Any] = json.loads(readline(self.proc.stdout))
        return reply

    def send(self, request: dict[str, Any]) -> None:
        """A request that gets no reply (a notification)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()

    def close(self) -> tuple[int, str]:
        # EOF on stdin (communicate closes it): the guard exits by itself.
        _, err = self.proc.communicate(timeout=10)
        return self.proc.returncode, err.decode()


@pytest.fixture
def guard() -> Any:
    g = Guard()
    yield g
    if g.proc.poll() is None:
        g.proc.kill()
        g.proc.wait()


def check(agent: str, command: str, step: int, **extra: Any) -> dict[str, Any]:
    arguments = {"command": command, "description": f"step {step}"}
    return {"op": "check", "id": step, "agent": agent, "tool": "bash", "arguments": arguments}


def test_hello_then_duplicate_denial_with_the_spec_text(guard: Guard, tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    hello = guard.ask(
        {"op": "hello", "id": 0, "config": {"duplicateLimit": 3, "incidentLog": str(log)}}
    )
    assert hello["ok"] is True and hello["id"] == 0
    assert hello["config"]["duplicateLimit"] == 3
    assert guard.ask(check("a", "ls", 1)) == {"allowed": True, "id": 1}
    assert guard.ask(check("a", "ls", 2)) == {"allowed": True, "id": 2}
    denied = guard.ask(check("a", "ls", 3))
    assert denied == {
        "allowed": False,
        "kind": "duplicate",
        "message": render(DEFAULT_MESSAGES["duplicate"], "bash", "duplicate", 3, 3),
        "count": 3,
        "limit": 3,
        "stop": False,
        "id": 3,
    }
    assert guard.ask(check("b", "ls", 4))["allowed"] is True  # another agent, its own state
    # The third refusal in a row (stopAfterDenials 3) asks the host to end the agent.
    assert guard.ask(check("a", "ls", 5))["stop"] is False
    stopped = guard.ask(check("a", "ls", 6))
    assert stopped["stop"] is True and stopped["message"] == denied["message"]
    assert stopped["stopReason"] == render(DEFAULT_MESSAGES["stop"], "bash", "duplicate", 3, 3)
    code, stderr = guard.close()
    assert code == 0 and stderr == ""
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["agent"], line["kind"]) for line in lines] == [("a", "duplicate"), ("a", "stop")]


def test_bad_config_is_refused_naming_the_key_and_the_old_config_stays(guard: Guard) -> None:
    assert guard.ask({"op": "hello", "id": 1, "config": {"duplicateLimit": 3}})["ok"]
    refused = guard.ask({"op": "hello", "id": 2, "config": {"duplicateLimit": 3, "window": 1}})
    assert refused["ok"] is False and "window" in refused["error"]
    unknown = guard.ask({"op": "hello", "id": 3, "config": {"dupLimit": 2}})
    assert unknown["ok"] is False and "dupLimit" in unknown["error"]
    guard.ask(check("a", "ls", 4))
    guard.ask(check("a", "ls", 5))
    assert guard.ask(check("a", "ls", 6))["allowed"] is False  # still duplicateLimit 3


def test_bad_input_never_denies_and_never_kills_the_guard(guard: Guard) -> None:
    for junk in [b"not json", b"[1, 2]", b'{"op": "explode", "id": 9}', b'{"id": 10}']:
        reply = guard.ask(junk)
        assert reply["allowed"] is True and "error" in reply
    assert guard.ask({"op": "ping", "id": 11}) == {"ok": True, "id": 11}
    code, stderr = guard.close()
    assert code == 0
    assert stderr.count("guard: bad request") == 1  # one warning, not one per line


def test_agents_without_id_are_logged_by_their_field_names(tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    server = GuardServer()
    server.handle_line(
        json.dumps(
            {"op": "hello", "config": {"duplicateLimit": 2, "incidentLog": str(log)}}
        ).encode()
    )
    request = {"anon": "anon:1", "agentKeys": ["loopCtx", "name"], "tool": "t", "arguments": {}}
    assert server.handle_line(json.dumps(request).encode()) == {"allowed": True}
    assert server.handle_line(json.dumps(request).encode())["allowed"] is False  # type: ignore[index]
    other = dict(request, anon="anon:2")
    assert server.handle_line(json.dumps(other).encode()) == {"allowed": True}
    line = json.loads(log.read_text().splitlines()[0])
    assert line["agentKeys"] == ["loopCtx", "name"] and "agent" not in line
    # forget drops the state: the same key starts over
    server.handle_line(json.dumps({"op": "forget", "anon": "anon:1"}).encode())
    assert server.handle_line(json.dumps(request).encode()) == {"allowed": True}


def test_forget_by_id_resets_that_agent_only() -> None:
    server = GuardServer()
    server.handle_line(b'{"op": "hello", "config": {"duplicateLimit": 2}}')
    call = {"agent": "s1", "tool": "t", "arguments": {"a": 1}}
    assert server.handle_line(json.dumps(call).encode()) == {"allowed": True}
    assert server.handle_line(json.dumps({**call, "agent": "s2"}).encode()) == {"allowed": True}
    assert server.handle_line(b'{"op": "forget", "agent": "s1"}') is None
    assert server.handle_line(json.dumps(call).encode()) == {"allowed": True}
    assert server.handle_line(json.dumps({**call, "agent": "s2"}).encode())["allowed"] is False  # type: ignore[index]


def test_cli_flags_configure_the_guard_without_hello() -> None:
    g = Guard("--config-json", '{"duplicateLimit": 2}')
    try:
        assert g.ask(check("a", "ls", 1))["allowed"] is True
        assert g.ask(check("a", "ls", 2))["allowed"] is False
    finally:
        g.close()


def test_cli_rejects_a_bad_config_flag() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dsh_circuit_breaker.cli",
            "serve",
            "--stdio",
            "--config-json",
            '{"window": 0}',
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "window" in done.stderr


def _serve(
    chunks: Iterable[bytes], *extra: str, memory: int | None = None
) -> tuple[list[dict[str, Any]], str, int]:
    """A guard process fed `chunks` on stdin (then EOF), optionally held to `memory`
    bytes of address space; its replies (parsed as strict JSON), stderr and exit code."""

    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    proc = subprocess.Popen(
        [sys.executable, "-m", "dsh_circuit_breaker.cli", "serve", "--stdio", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=limit,
    )
    stdin, proc.stdin = proc.stdin, None  # written by the thread below, not communicate()
    assert stdin is not None

    def feed() -> None:
        with contextlib.suppress(BrokenPipeError):
            for chunk in chunks:
                stdin.write(chunk)
        with contextlib.suppress(BrokenPipeError):
            stdin.close()

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        writer.join(timeout=10)
    replies = [json.loads(line, parse_constant=_not_json) for line in out.splitlines()]
    return replies, err.decode(), proc.returncode


def _not_json(name: str) -> Any:
    raise AssertionError(f"{name} in a reply is not JSON")


def _line(request: dict[str, Any]) -> bytes:
    return json.dumps(request).encode() + b"\n"


def test_hello_never_echoes_nan_and_refuses_values_that_switch_the_breaker_off() -> None:
    replies, _, code = _serve(
        [
            b'{"op": "hello", "id": 1, "config": {"storeTimeout": NaN}}\n',
            b'{"op": "hello", "id": 2, "config": {"storeTimeout": 1e999}}\n',
            b'{"op": "ping", "id": NaN}\n',
            _line({"op": "ping", "id": 3}),
        ]
    )
    assert code == 0  # every line above parsed as strict JSON
    # NaN is not JSON: the request is refused (the plugin reports a hello without
    # ok: true as a config error, with this text).
    assert "ok" not in replies[0] and "NaN is not a number JSON allows" in replies[0]["error"]
    # 1e999 is JSON, but parses as inf: refused by name.
    assert replies[1]["ok"] is False and "storeTimeout" in replies[1]["error"]
    assert replies[2]["allowed"] is True and "id" not in replies[2]
    assert replies[3] == {"ok": True, "id": 3}


def test_hello_reports_a_store_that_cannot_open(tmp_path: Path) -> None:
    replies, stderr, _ = _serve(
        [
            _line({"op": "hello", "id": 1, "state": "sqlite:////proc/nope/x.db"}),
            _line({"op": "hello", "id": 2, "state": f"sqlite:///{tmp_path}/ok.db"}),
        ]
    )
    assert replies[0]["ok"] is True  # calls fail open (or closed): nothing fatal...
    assert "state store unavailable" in replies[0]["warning"]  # ...but said at once
    assert "/proc/nope" in stderr
    assert replies[1]["ok"] is True and "warning" not in replies[1]


def test_hello_refuses_a_state_url_that_can_never_work() -> None:
    pytest.importorskip("redis")
    replies, _, _ = _serve(
        [_line({"op": "hello", "id": 1, "state": "redis://127.0.0.1:1/0?retry_afer=5"})]
    )
    assert replies[0]["ok"] is False and "unknown parameter 'retry_afer'" in replies[0]["error"]


def test_hello_with_a_huge_limit_answers_at_once() -> None:
    config = {"duplicateLimit": 10**7, "window": 10**7}
    started = time.monotonic()
    replies, _, _ = _serve([_line({"op": "hello", "id": 1, "config": config})])
    assert replies[0]["ok"] is True and time.monotonic() - started < 10  # was 27.6 s


def _overlong(size: int, ident: int) -> Iterator[bytes]:
    """A check whose arguments make its line `size` bytes long; the id comes last."""
    yield b'{"op": "check", "tool": "Write", "arguments": {"content": "'
    chunk = b"x" * (1 << 20)
    for _ in range(size >> 20):
        yield chunk
    yield b'"}, "id": %d}\n' % ident


def test_overlong_request_line_gets_an_error_answer_and_the_guard_lives_on() -> None:
    # Held to 256 MiB of address space: a 512 MiB line read whole would be a MemoryError.
    size = 512 << 20
    replies, stderr, code = _serve(
        [*_overlong(size, 7), _line({"op": "ping", "id": 8})], memory=256 << 20
    )
    assert code == 0 and "Traceback" not in stderr
    assert replies[0] == {
        "allowed": True,
        "error": f"request line longer than {MAX_REQUEST_BYTES} bytes, not judged",
        "id": 7,
    }
    assert replies[1] == {"ok": True, "id": 8}


def test_a_harness_hello_loads_the_config_its_command_hook_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Plugins without a config of their own (Cline) name their harness: the guard then
    # reads the user's config file as the command hooks do, with the harness's spellings.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = tmp_path / "breaker.json"
    config.write_text(json.dumps({"duplicateLimit": 3, "state": f"sqlite:///{tmp_path}/s.db"}))
    server = GuardServer()
    hello = {"op": "hello", "id": 0, "harness": "cline", "configFile": str(config), "config": {}}
    reply = server.handle_line(json.dumps(hello).encode())
    assert reply is not None and reply["ok"] is True, reply
    assert reply["config"]["duplicateLimit"] == 3
    assert "ask_question" in reply["config"]["exempt"]
    assert reply["config"]["incidentLog"].startswith(str(tmp_path / "state"))  # on, as for hooks
    for step in range(3):
        server.handle_line(json.dumps(check("s", "ls", step)).encode())
    assert (tmp_path / "s.db").exists()  # the config file's state URL
    server.close()


@pytest.mark.parametrize(
    ("hello", "error"),
    [
        ({"harness": "nope"}, "unknown harness 'nope'"),
        ({"harness": "cline", "configFile": 3}, "configFile must be a path"),
        ({"harness": "cline", "config": {"window": 0}}, "window"),
    ],
)
def test_a_bad_harness_hello_is_refused(hello: dict[str, Any], error: str) -> None:
    reply = GuardServer().handle_line(json.dumps({"op": "hello", "id": 1, **hello}).encode())
    assert reply is not None and reply["ok"] is False and error in reply["error"], reply


def test_an_id_out_of_json_range_gets_a_strict_json_answer(guard: Guard) -> None:
    reply = guard.ask(b'{"op": "check", "id": 1e999, "agent": "a", "tool": "bash"}')
    assert reply == {"allowed": True, "error": "the request's id is out of JSON's number range"}
    assert "id" not in guard.ask(b'{"op": "ping", "id": [-1e999]}')
    assert guard.ask({"op": "ping", "id": 1.5}) == {"ok": True, "id": 1.5}
    assert guard.close()[0] == 0


def test_a_lone_surrogate_in_an_id_is_judged_by_its_bytes(tmp_path: Path) -> None:
    """Malformed UTF-16 in an agent id (`\\ud800`, as JSON lets a harness send) on a
    SQLite store: still guarded, apart from a neighbouring surrogate, no traceback."""
    log = tmp_path / "incidents.jsonl"
    g = Guard("--state", f"sqlite:///{tmp_path / 'state.db'}")
    hello = {"op": "hello", "id": 0, "config": {"incidentLog": str(log)}}
    assert g.ask(hello)["ok"] is True
    for agent in ("x\\ud800y", "x\\udfffy"):
        answers = []
        for step in range(1, 7):
            line = json.dumps(check("PLACEHOLDER", "same", step)).replace("PLACEHOLDER", agent)
            answers.append(g.ask(line.encode()).get("allowed"))
        assert answers == [True] * 5 + [False], agent
    code, stderr = g.close()
    assert code == 0 and "Traceback" not in stderr and "internal error" not in stderr
    assert len(log.read_text().splitlines()) == 2  # one incident per agent


def poll(guard: Guard, ident: str | dict[str, Any], outputs: Iterable[str]) -> list[bool]:
    """The same call once per output, each allowed copy's output reported as its result (a
    notification: no reply); which copies were allowed."""
    agent = {"agent": ident} if isinstance(ident, str) else ident
    call = {**agent, "tool": "bash", "arguments": {"command": "job status 7"}}
    allowed = []
    for step, output in enumerate(outputs):
        reply = guard.ask({"op": "check", "id": step, **call})
        allowed.append(reply["allowed"])
        if reply["allowed"]:
            guard.send({"op": "result", **call, "result": output})
    return allowed


OFF = {"resultProgress": False, "sameResultLimit": 0}  # both named, whatever the default


@pytest.mark.parametrize("keys", [{"resultProgress": True}, {}, OFF])
def test_results_move_a_poll_on_only_with_result_progress(keys: dict[str, Any]) -> None:
    guard = Guard()
    try:
        assert guard.ask({"op": "hello", "id": 0, "config": keys})["ok"] is True
        moving = poll(guard, "a", (f"step {n}" for n in range(10)))
        frozen = poll(guard, "b", ["step 0"] * 10)
        anon = {"anon": "anon:1", "agentKeys": ["loopCtx"]}  # resolved as `check` resolves it
        moving_anon = poll(guard, anon, (f"{n}% done" for n in range(10)))
        # A line no reply answers would come before this one's.
        assert guard.ask({"op": "ping", "id": 99}) == {"ok": True, "id": 99}
    finally:
        code, stderr = guard.close()
    assert code == 0 and stderr == ""
    refused_at_6th = [True] * 5 + [False] * 5
    assert frozen == refused_at_6th
    moves_on = keys.get("resultProgress", Config().result_progress)
    assert moves_on is (keys != OFF)  # on by default
    assert moving == moving_anon == ([True] * 10 if moves_on else refused_at_6th)


def test_a_bad_result_never_answers_never_denies_and_warns_once() -> None:
    guard = Guard()
    try:
        guard.ask({"op": "hello", "id": 0, "config": {"resultProgress": True}})
        for junk in [
            {"op": "result"},
            {"op": "result", "agent": "a", "tool": 7, "result": "x"},
            {"op": "result", "agent": ["x"], "tool": "bash", "arguments": 1, "result": None},
            {"op": "result", "anon": 5, "tool": "bash", "result": {"deep": [1, {"x": []}]}},
            {"op": "result", "agent": "a", "tool": "bash", "arguments": {}, "result": "a" * 70000},
        ]:
            guard.send(junk)
        # With an id it is answered, like forget.
        assert guard.ask({"op": "result", "id": 5, "agent": "a", "tool": "bash"}) == {
            "ok": True,
            "id": 5,
        }
        assert poll(guard, "a", ["same"] * 6) == [True] * 5 + [False]
    finally:
        code, stderr = guard.close()
    assert code == 0
    assert stderr.splitlines() == [
        "dsh-circuit-breaker guard: a result without a tool name; dropped "
        "(further bad requests not reported)"
    ]
