"""Both MCP relays (stdio and `--http`) against what issue 34 found getting past them, from
the installed wheel in front of the real server-everything (and the `mcp` SDK's server):

- calls whose own fields parse but something beside them does not, for our strict
  parser (nesting past its recursion, an integer too long for Python's `int`, a byte
  that is not UTF-8), are judged as the server reads them, one stderr line each;
- a refused call's id comes back byte for byte (`1E400` is not `Infinity`);
- over HTTP: results awaited per request (two sessionless clients stay apart), a flood of
  sessions cannot restart an active agent's count, a batch is judged call by call, a
  server dying mid-stream is a cut, slow tools hold only their own requests (and a
  deadline ends a wait), a 120 MiB answer is never held whole.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker import CircuitBreaker
from support.installed import Installed
from support.streams import readline
from test_mcp_relay import EVERYTHING, everything_command, expected_text, initialize, relay  # noqa: F401
from test_mcp_relay_http import AUTH, everything_http, relay_to, sdk_http  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(120)
CALLS = 10


def allowed_of(calls: int) -> int:
    """How many of `calls` identical calls the default config lets run."""
    breaker = CircuitBreaker()
    return sum(breaker.check("a", "echo", {"message": "again"}).allowed for _ in range(calls))


def call_line(request_id: str, beside: bytes) -> bytes:
    """A `tools/call` of echo as raw JSON, `beside` (raw JSON text) in its `_meta`."""
    return (
        b'{"jsonrpc":"2.0","id":' + request_id.encode() + b',"method":"tools/call",'
        b'"params":{"name":"echo","arguments":{"message":"again"},"_meta":{"x":' + beside + b"}}}\n"
    )


UNREADABLE = {
    "nested 1,200 deep": b'{"a":' * 1200 + b"1" + b"}" * 1200,
    "an integer of 4,301 digits": b"9" * 4301,
    "a byte that is not UTF-8": b'"caf\xe9"',
}


class Stdio:
    """The stdio relay driven by hand, raw lines each way."""

    def __init__(self, installed: Installed, everything: list[str]) -> None:
        self.process = subprocess.Popen(
            relay(installed, everything),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=installed.env,
        )
        self.send(json.dumps(initialize("2025-11-25")).encode() + b"\n")
        assert self.answer(0)["result"]["protocolVersion"] == "2025-11-25"
        self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line)
        self.process.stdin.flush()

    def raw_answer(self, request_id: str) -> bytes:
        """The line answering `request_id` (given as its JSON text)."""
        assert self.process.stdout is not None
        while True:
            line = readline(self.process.stdout, 30)
            assert line, "the relay closed its stdout"
            mark = f'"id":{request_id}'.encode()
            if (mark + b"," in line or mark + b"}" in line) and b'"method"' not in line:
                return bytes(line)

    def answer(self, request_id: int) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.raw_answer(str(request_id)))
        return found

    def close(self) -> str:
        assert self.process.stdin is not None and self.process.stderr is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0
        return self.process.stderr.read().decode()


def refused(answer: dict[str, Any]) -> bool:
    result = answer["result"]
    return bool(result.get("isError")) and result["content"][0]["text"] == expected_text("echo")


@pytest.mark.parametrize("beside", sorted(UNREADABLE))
def test_stdio_a_call_our_parser_refuses_is_judged_as_the_server_reads_it(
    installed: Installed, everything: list[str], beside: str
) -> None:
    stdio = Stdio(installed, everything)
    answers = []
    for n in range(1, CALLS + 1):
        stdio.send(call_line(str(n), UNREADABLE[beside]))
        answers.append(stdio.answer(n))
    stderr = stdio.close()
    ran = [a for a in answers if not refused(a)]
    assert len(ran) == allowed_of(CALLS) < CALLS
    assert all(a["result"]["content"][0]["text"] == "Echo: again" for a in ran)
    lines = [line for line in stderr.splitlines() if "judged as read" in line]
    assert len(lines) == CALLS, stderr
    assert all(line.startswith("dsh-circuit-breaker: mcp: ") for line in lines)
    assert "Traceback" not in stderr


STRICT_IDS = ["1E400", "1e2", "-0", "-0.0", "10000000000000000000001"]


def test_stdio_a_refused_calls_id_comes_back_as_the_client_wrote_it(
    installed: Installed, everything: list[str]
) -> None:
    stdio = Stdio(installed, everything)
    plain = call_line("1", b"0").replace(b',"_meta":{"x":0}', b"")
    for n in range(1, CALLS + 1):
        stdio.send(plain.replace(b'"id":1,', f'"id":{n},'.encode()))
        stdio.answer(n)
    for request_id in STRICT_IDS:  # refused: the same call again
        stdio.send(plain.replace(b'"id":1,', f'"id":{request_id},'.encode()))
        line = stdio.raw_answer(request_id)
        assert line.startswith(f'{{"jsonrpc":"2.0","id":{request_id},"result":'.encode()), line
        json.loads(line)  # strict JSON: no Infinity
    stdio.close()


# -- the same over Streamable HTTP -----------------------------------------------------------
def post(
    url: str,
    body: bytes,
    session: str | None = None,
    version: str = "2025-11-25",
    **more: str,
) -> tuple[Any, bytes]:
    headers = {
        **more,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": version,
        **AUTH,
    }
    if session:
        headers["Mcp-Session-Id"] = session
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers, response.read()


def messages(data: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an answer, plain JSON or SSE."""
    if data.lstrip().startswith((b"{", b"[")):
        found = json.loads(data)
        return found if isinstance(found, list) else [found]
    lines = data.splitlines()
    return [
        json.loads(line[5:]) for line in lines if line.startswith(b"data:") and line[5:].strip()
    ]


def http_session(url: str) -> str:
    headers, _ = post(url, json.dumps(initialize("2025-11-25")).encode())
    session: str = headers["Mcp-Session-Id"]
    post(url, b'{"jsonrpc":"2.0","method":"notifications/initialized"}', session)
    return session


@pytest.mark.parametrize("beside", sorted(UNREADABLE))
def test_http_a_call_our_parser_refuses_is_judged_as_the_server_reads_it(
    relay_to: Any,  # noqa: F811
    everything_http: str,  # noqa: F811
    beside: str,
) -> None:
    relay = relay_to(everything_http)
    session = http_session(relay.url)
    answers = []
    for n in range(1, CALLS + 1):
        _, data = post(relay.url, call_line(str(n), UNREADABLE[beside]), session)
        answers.extend(messages(data))
    assert len(answers) == CALLS
    ran = [a for a in answers if not refused(a)]
    assert len(ran) == allowed_of(CALLS) < CALLS


def test_http_a_refused_calls_id_comes_back_as_the_client_wrote_it(
    relay_to: Any,  # noqa: F811
    everything_http: str,  # noqa: F811
) -> None:
    relay = relay_to(everything_http)
    session = http_session(relay.url)
    plain = call_line("1", b"0").replace(b',"_meta":{"x":0}', b"")
    for n in range(1, CALLS + 1):
        post(relay.url, plain.replace(b'"id":1,', f'"id":{n},'.encode()), session)
    for request_id in STRICT_IDS:
        _, data = post(
            relay.url, plain.replace(b'"id":1,', f'"id":{request_id},'.encode()), session
        )
        assert data.startswith(f'{{"jsonrpc":"2.0","id":{request_id},"result":'.encode()), data
        json.loads(data)


# -- results awaited per request (2026-07-28 clients have no session) -------------------------
def modern_call(client: str, request_id: int, tool: str, job: str) -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {"name": tool, "arguments": {"job": job}, "_meta": meta}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message).encode()


def poll(url: str, client: str, tool: str, job: str, rounds: int, step: Any) -> list[bool]:
    """`rounds` identical calls, ids from 1 as every client counts; whether each was refused."""
    refusals = []
    for n in range(1, rounds + 1):
        step()
        body = modern_call(client, n, tool, job)
        _, data = post(
            url, body, None, "2026-07-28", **{"Mcp-Method": "tools/call", "Mcp-Name": tool}
        )
        (answer,) = messages(data)
        refusals.append(bool(answer["result"].get("isError")))
    return refusals


def test_http_results_of_two_sessionless_clients_stay_apart(
    relay_to: Any,  # noqa: F811
    sdk_http: str,  # noqa: F811
    tmp_path: Path,
) -> None:

    config = tmp_path / "breaker.toml"
    config.write_text("resultProgress = true\n", encoding="utf-8")
    relay = relay_to(sdk_http, "--config", str(config))
    rounds = 12
    alone = poll(relay.url, "frozen-alone", "status", "a", rounds, lambda: None)
    assert True in alone  # a frozen poll is refused in the end

    together = threading.Barrier(2, timeout=30)  # each round's two calls at once
    found: dict[str, list[bool]] = {}

    def run(client: str, tool: str) -> None:
        found[client] = poll(relay.url, client, tool, client, rounds, together.wait)

    moving = threading.Thread(target=run, args=("moving", "progress"))
    moving.start()
    run("frozen", "status")
    moving.join(timeout=60)
    assert found["frozen"] == alone
    assert found["moving"] == [False] * rounds


# -- sessions: a flood cannot restart an active agent's count ----------------------------------
@pytest.mark.parametrize("flood", ["made-up session ids", "sessions the server issued"])
def test_a_flood_of_sessions_does_not_restart_an_active_agents_count(
    tmp_path: Path, flood: str
) -> None:
    """In process (10,050 requests through a real upstream would take minutes): the
    relay's own table, as `mcp --http` fills it."""
    from dsh_circuit_breaker.guard.mcp import McpGuard
    from dsh_circuit_breaker.guard.mcp_http import SESSIONS, HttpRelay

    config = tmp_path / "breaker.toml"
    config.write_text("", encoding="utf-8")
    guard = McpGuard(str(config), "memory://")
    relay = HttpRelay(guard, "http://127.0.0.1:9/mcp")
    relay.initialized(initialize("2025-11-25"), "the-real-session")
    call = json.loads(call_line("1", b"0"))
    real = {"mcp-session-id": "the-real-session", "mcp-protocol-version": "2025-11-25"}
    refusals = []
    for n in range(12):
        if n == 3:
            for i in range(SESSIONS + 50):
                if flood == "made-up session ids":
                    relay.judge(call, {"mcp-session-id": f"made-up-{i}"})
                else:
                    relay.initialized(initialize("2025-11-25"), f"issued-{i}")
        refusal, _ = relay.judge(call, real)
        refusals.append(refusal is not None)
    guard.close()
    allowed = allowed_of(12)
    assert refusals == [False] * allowed + [True] * (12 - allowed)


# -- batches over --http: each call judged, refused ones answered in place ---------------------
def test_http_a_batch_is_judged_call_by_call(
    relay_to: Any,  # noqa: F811
    everything_http: str,  # noqa: F811
) -> None:
    relay = relay_to(everything_http)
    session = http_session(relay.url)
    calls = [json.loads(call_line(str(n), b"0")) for n in range(1, 21)]
    _, data = post(relay.url, json.dumps(calls).encode(), session)
    answers = {a["id"]: a for a in messages(data)}
    assert sorted(answers) == list(range(1, 21))  # every call answered, once
    ran = [n for n, a in answers.items() if not refused(a)]
    assert len(ran) == allowed_of(20) < 20
    assert all(answers[n]["result"]["content"][0]["text"] == "Echo: again" for n in ran)
    # A batch of calls all refused never reaches the server; a ping beside them does.
    again = [*calls[:3], {"jsonrpc": "2.0", "id": 99, "method": "ping"}]
    _, data = post(relay.url, json.dumps(again).encode(), session)
    answers = {a["id"]: a for a in messages(data)}
    assert sorted(answers) == [1, 2, 3, 99]
    assert all(refused(answers[n]) for n in (1, 2, 3)) and answers[99]["result"] == {}


# -- a server that dies mid-stream -------------------------------------------------------------
def test_http_a_server_dying_mid_stream_reaches_the_client_as_a_cut(installed: Installed) -> None:

    from test_mcp_relay_http import TOKEN, free_port, wait_for

    port = free_port()
    command = ["node", str(EVERYTHING), "streamableHttp"]
    server = subprocess.Popen(
        command, env=dict(os.environ, PORT=str(port)), stdout=subprocess.DEVNULL
    )
    env = dict(installed.env, DSH_CIRCUIT_BREAKER_TOKEN=TOKEN)
    relay_command = [str(installed.cli), "mcp", "--http", "127.0.0.1:0"]
    upstream = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_for(port)
        relay = subprocess.Popen(
            [*relay_command, "--upstream", upstream],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert relay.stdout is not None and relay.stderr is not None
        origin = readline(relay.stdout).decode().split()[3]
        session = http_session(origin + "/mcp")
        client = http.client.HTTPConnection(origin.removeprefix("http://"), timeout=30)
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session, **AUTH}
        client.request("GET", "/mcp", headers={**headers, "MCP-Protocol-Version": "2025-11-25"})
        stream = client.getresponse()
        assert stream.status == 200
        server.send_signal(signal.SIGKILL)
        with pytest.raises(http.client.IncompleteRead):
            stream.read()
        relay.terminate()
        assert relay.wait(timeout=10) == 0
        lines = relay.stderr.read().decode().splitlines()
    finally:
        server.kill()
        server.wait(timeout=10)
    cut = [line for line in lines if "a stream was cut short" in line]
    assert len(cut) == 1 and cut[0].startswith("dsh-circuit-breaker: mcp: a stream"), lines
    assert not any("Traceback" in line or "serve:" in line for line in lines), lines


# -- slow tools: each waits on its own thread, within a deadline ------------------------------
@pytest.fixture
def sdk_json_http() -> Any:
    """The SDK server over Streamable HTTP answering each POST with plain JSON: the relay
    then waits for the whole answer (an SSE answer goes on to a stream thread at once)."""

    from test_mcp_relay import SDK_SERVER
    from test_mcp_relay_http import free_port, wait_for

    port = free_port()
    command = [sys.executable, str(SDK_SERVER), "--http", str(port), "--json"]
    with subprocess.Popen(command, stderr=subprocess.DEVNULL) as server:
        wait_for(port)
        yield f"http://127.0.0.1:{port}/mcp"
        server.terminate()


def modern(tool: str, arguments: dict[str, Any], request_id: int = 1) -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "slow-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {"name": tool, "arguments": arguments, "_meta": meta}
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    ).encode()


def call_modern(url: str, tool: str, arguments: dict[str, Any]) -> tuple[int, bytes]:
    headers = {"Mcp-Method": "tools/call", "Mcp-Name": tool}
    try:
        _, data = post(url, modern(tool, arguments), None, "2026-07-28", **headers)
        return 200, data
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_http_slow_calls_hold_only_their_own_threads(
    relay_to: Any,  # noqa: F811
    sdk_json_http: str,
) -> None:
    """Twelve calls of a tool that takes 8 s (more than the guard's 8 shared workers):
    another client's call is answered at once."""

    relay = relay_to(sdk_json_http)
    slow = [
        threading.Thread(target=call_modern, args=(relay.url, "slow", {"seconds": 8 + i / 100}))
        for i in range(12)  # twelve different calls: none refused as a repeat
    ]
    for thread in slow:
        thread.start()
    time.sleep(1.0)  # the twelve are waiting on the server
    began = time.monotonic()
    status, data = call_modern(relay.url, "echo", {"message": "meanwhile"})
    waited = time.monotonic() - began
    for thread in slow:
        thread.join(timeout=60)
    assert status == 200 and b"echo: meanwhile" in data
    assert waited < 4.0, waited


def test_http_a_server_that_never_answers_gets_a_504_at_the_deadline(
    relay_to: Any,  # noqa: F811
    sdk_json_http: str,
) -> None:
    relay = relay_to(sdk_json_http, "--upstream-timeout", "2")
    began = time.monotonic()
    status, data = call_modern(relay.url, "slow", {"seconds": 30})
    assert status == 504 and b"did not answer within 2 s" in data, data
    assert time.monotonic() - began < 10.0


# -- memory: a large answer is passed on as it comes ------------------------------------------
ANSWER_BYTES = 120 * 1024 * 1024


class BigAnswer(BaseHTTPRequestHandler):
    """An HTTP server answering every POST with 120 MiB of JSON, by Content-Length."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(ANSWER_BYTES))
        self.end_headers()
        piece = b" " * (1024 * 1024)
        self.wfile.write(b"[")
        for _ in range(ANSWER_BYTES // len(piece) - 1):
            self.wfile.write(piece)
        self.wfile.write(b" " * (len(piece) - 2) + b"]")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_http_a_120_mib_answer_is_not_held_whole(relay_to: Any) -> None:  # noqa: F811
    server = ThreadingHTTPServer(("127.0.0.1", 0), BigAnswer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    relay = relay_to(f"http://127.0.0.1:{server.server_port}/mcp")
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    _, data = post(relay.url, ping)
    server.shutdown()
    assert len(data) == ANSWER_BYTES
    status = Path(f"/proc/{relay.process.pid}/status").read_text()
    peak = int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])
    assert peak < 80 * 1024, f"peak resident {peak // 1024} MiB"
