"""The MCP relay under faults, from the installed wheel in front of the real
server-everything: the upstream killed mid-call, a line of 100 MB each way, garbage from
either side, a client that stops reading, the upstream's exit status and signals, and bad
command lines (one line on stderr, never a traceback)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from support.installed import Installed
from support.streams import readline
from test_mcp_relay import (
    INITIALIZED,
    Raw,
    echo_call,
    everything_command,  # noqa: F401 - the fixture `everything`
    expected_text,
    initialize,
    relay,
    sdk_server,
    teed,
)

pytestmark = pytest.mark.timeout(120)
MB = 1024 * 1024
MAX_RELAY_MEMORY = 64 * MB  # peak resident size: an interpreter, one 16 MiB line, slack


def started(raw: Raw) -> None:
    raw.ask(initialize("2025-11-25"))
    raw.send(INITIALIZED)


def child_of(pid: int) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("the relay started no upstream")


def peak_memory(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_upstream_killed_mid_call_ends_the_relay_with_its_status(
    installed: Installed, everything: list[str]
) -> None:
    raw = Raw(relay(installed, everything), installed.env)
    started(raw)
    raw.send(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "trigger-long-running-operation", "arguments": {"duration": 30}},
        }
    )
    time.sleep(0.5)  # the call is running in the server
    os.kill(child_of(raw.process.pid), signal.SIGKILL)
    assert raw.process.wait(timeout=10) == 128 + signal.SIGKILL
    assert raw.process.stdout is not None and raw.process.stderr is not None
    answers = [json.loads(line) for line in raw.process.stdout.read().splitlines()]
    assert [a for a in answers if "method" not in a] == []  # none invented for the lost call
    assert b"Traceback" not in raw.process.stderr.read()


@pytest.mark.timeout(240)
def test_a_100_mb_line_each_way_passes_through_in_pieces(installed: Installed) -> None:
    # The mcp SDK's server takes a line of any size (server-everything's stops at 10 MB,
    # below), and answers this one with 200 MB (the text, and the same as structured content).
    raw = Raw(relay(installed, sdk_server()), installed.env)
    started(raw)
    big = "x" * (100 * MB)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": big}},
    }
    raw.send(call)
    del call
    assert raw.process.stdout is not None
    line = readline(raw.process.stdout, 120)
    answer = json.loads(line)
    assert answer["id"] == 1 and answer["result"]["content"][0]["text"] == "echo: " + big
    del line, answer, big
    # Both directions still work, and the big call was not judged (not counted).
    answers = [raw.ask(echo_call(n)) for n in range(2, 8)]
    assert [a["result"].get("isError", False) for a in answers] == [False] * 5 + [True]
    memory = peak_memory(raw.process.pid)
    _, stderr = raw.close()
    assert memory < MAX_RELAY_MEMORY, f"the relay held {memory // MB} MB at its peak"
    for side in ("client", "server"):
        assert f"a line from the {side} is longer than 16777216 bytes" in stderr
    assert "Traceback" not in stderr


def test_a_line_the_server_cannot_take_ends_it_as_it_would_direct(
    installed: Installed, everything: list[str]
) -> None:
    line = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",'
    line += b'"arguments":{"message":"' + b"x" * (20 * MB) + b'"}}}\n'
    statuses = []
    for command in (everything, relay(installed, everything)):
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=installed.env
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(line)
            process.stdin.close()
        except BrokenPipeError:
            pass  # it stopped reading: what it does next is the point
        statuses.append((process.wait(timeout=60), process.stdout.read()))
    assert statuses[0] == statuses[1]  # server-everything ends (10 MB limit), the relay with it


GARBAGE = [
    b"not json at all\n",
    b"\xff\xfe{\n",  # not UTF-8
    b"[1, 2, 3]\n",  # a batch of nonsense
    b'{"jsonrpc":"2.0","id":50,"method":"tools/call","params":7}\n',
    b'{"jsonrpc":"2.0","id":51,"method":"tools/call","params":{"name":5}}\n',
    b"[" * 100_000 + b"\n",  # deeper than any parser's recursion
    b'{"jsonrpc":"2.0","id":52,"method":"initialize","params":"x"}\n',
]


def test_garbage_from_the_client_goes_to_the_server_and_changes_nothing(
    installed: Installed, tmp_path: Path, everything: list[str]
) -> None:
    log = tmp_path / "upstream-stdin"
    raw = Raw(relay(installed, teed(log, everything)), installed.env)
    started(raw)
    for line in GARBAGE:
        raw.send(line)
    answers = [raw.ask(echo_call(n)) for n in range(1, 7)]
    assert [a["result"].get("isError", False) for a in answers] == [False] * 5 + [True]
    assert answers[5]["result"]["content"][0]["text"] == expected_text("echo")
    received = log.read_bytes()
    for line in GARBAGE:
        assert line in received  # passed on byte for byte
    code, stderr = raw.close()
    assert code == 0 and "Traceback" not in stderr


def test_garbage_from_the_server_reaches_the_client_and_changes_nothing(
    installed: Installed, everything: list[str]
) -> None:
    noisy = ["sh", "-c", r'printf "garbage\n\377{\n[[[[\n"; exec "$@"', "sh", *everything]
    raw = Raw(relay(installed, noisy), installed.env)
    raw.send(initialize("2025-11-25"))
    assert raw.process.stdout is not None
    first = [readline(raw.process.stdout) for _ in range(3)]
    assert first == [b"garbage\n", b"\xff{\n", b"[[[[\n"]
    assert raw.receive()["result"]["protocolVersion"] == "2025-11-25"
    raw.send(INITIALIZED)
    answers = [raw.ask(echo_call(n)) for n in range(1, 7)]
    assert [a["result"].get("isError", False) for a in answers] == [False] * 5 + [True]
    code, stderr = raw.close()
    assert code == 0 and "Traceback" not in stderr


def test_a_client_that_stops_reading_holds_back_nothing_but_its_answers(
    installed: Installed, tmp_path: Path, everything: list[str]
) -> None:
    log = tmp_path / "upstream-stdin"
    raw = Raw(relay(installed, teed(log, everything)), installed.env)
    started(raw)
    pad = "p" * 100_000
    calls = 200  # 20 MB of answers, far past what the pipes hold
    for n in range(calls):
        raw.send(
            echo_call(1000 + n)
            | {"params": {"name": "echo", "arguments": {"message": f"{n}{pad}"}}}
        )
    # Nothing read: the requests still all reached the server.
    deadline = time.monotonic() + 30
    while log.read_bytes().count(b'"method": "tools/call"') < calls:
        assert time.monotonic() < deadline, "the relay stopped passing requests on"
        time.sleep(0.1)
    memory = peak_memory(raw.process.pid)
    ids: list[int] = []
    while len(ids) < calls:  # now read: every answer, in order (and notifications)
        answer = raw.receive()
        if "method" not in answer:
            ids.append(answer["id"])
    assert ids == [1000 + n for n in range(calls)]
    raw.close()
    assert memory < MAX_RELAY_MEMORY


def test_the_upstreams_exit_status_and_signals_pass_through(installed: Installed) -> None:
    for script, status in (("exit 3", 3), ("kill -TERM $$", 128 + signal.SIGTERM)):
        done = installed.run("mcp", "--", "sh", "-c", script, input="", timeout=30)
        assert (done.returncode, done.stderr) == (status, "")
    # A SIGTERM to the relay goes to the server; the server's end is the relay's.
    process = subprocess.Popen(
        [str(installed.cli), "mcp", "--", "sleep", "60"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=installed.env,
    )
    child_of(process.pid)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 128 + signal.SIGTERM


BAD = [
    ((), 2, "no server command given"),
    (("--bogus", "--", "true"), 2, "unrecognized arguments: --bogus"),
    (("--", "/nonexistent/server"), 127, "cannot start '/nonexistent/server'"),
    (("--name", "a/b", "--", "true"), 2, "--name 'a/b'"),
    (("--config", "/nonexistent.toml", "--", "true"), 2, "/nonexistent.toml"),
    (("--state", "bogus", "--", "true"), 2, "state URL 'bogus'"),
    (("--upstream", "http://127.0.0.1:1/mcp", "--", "true"), 2, "--upstream needs --http"),
]


@pytest.mark.parametrize(("args", "status", "says"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_command_lines_get_one_line(
    installed: Installed, args: tuple[str, ...], status: int, says: str
) -> None:
    done = installed.run("mcp", *args, input="", timeout=30)
    assert done.returncode == status
    assert done.stderr.startswith("dsh-circuit-breaker: mcp: ") and says in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stdout == ""
