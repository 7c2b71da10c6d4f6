"""The MCP relay over Streamable HTTP (`mcp --http PORT --upstream URL`), from the installed
wheel in front of real HTTP servers (server-everything's `streamableHttp`, the mcp SDK's
`streamable-http`), driven by the official `mcp` client:

- the probe at 2025-11-25 and 2026-07-28: 6 run (the server counts them), then refused;
- every server-everything feature the same direct and relayed (POST answered as JSON and
  as SSE, the GET stream, DELETE, sessions);
- serve --http's checks: the token, Host, Origin; the client's Authorization reaches the
  server; bad options get one line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import anyio
import pytest
from mcp.client.client import Client

from conftest import require
from support import mcp_scenario
from support.installed import Installed
from support.streams import readline
from test_mcp_relay import SDK_SERVER, expected_text

pytestmark = pytest.mark.timeout(120)
TOKEN = "relay-test-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.1)


@pytest.fixture
def everything_http() -> Iterator[str]:
    require(mcp_scenario.EVERYTHING.exists(), "@modelcontextprotocol/server-everything")
    port = free_port()
    env = dict(os.environ, PORT=str(port))
    command = ["node", str(mcp_scenario.EVERYTHING), "streamableHttp"]
    with subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL) as server:
        wait_for(port)
        yield f"http://127.0.0.1:{port}/mcp"
        server.terminate()


@pytest.fixture
def sdk_http() -> Iterator[str]:
    port = free_port()
    command = [sys.executable, str(SDK_SERVER), "--http", str(port)]
    with subprocess.Popen(command, stderr=subprocess.DEVNULL) as server:
        wait_for(port)
        yield f"http://127.0.0.1:{port}/mcp"
        server.terminate()


class Relay:
    """`mcp --http 127.0.0.1:0 --upstream URL` from the installed wheel."""

    def __init__(self, installed: Installed, upstream: str, *options: str) -> None:
        env = dict(installed.env, DSH_CIRCUIT_BREAKER_TOKEN=TOKEN)
        command = [str(installed.cli), "mcp", *options, "--http", "127.0.0.1:0"]
        self.process = subprocess.Popen(
            [*command, "--upstream", upstream], stdout=subprocess.PIPE, env=env
        )
        assert self.process.stdout is not None
        line = readline(self.process.stdout).decode()
        assert line.startswith("dsh-circuit-breaker mcp: relaying http://127.0.0.1:"), line
        self.origin = line.split()[3]
        self.url = self.origin + "/mcp"

    def close(self) -> None:
        self.process.terminate()
        assert self.process.wait(timeout=10) == 0


@pytest.fixture
def relay_to(installed: Installed) -> Iterator[Any]:
    started: list[Relay] = []

    def start(upstream: str, *options: str) -> Relay:
        started.append(Relay(installed, upstream, *options))
        return started[-1]

    yield start
    for relay in started:
        relay.close()


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def probe(transport: Any, mode: str) -> list[Any]:
    async with Client(transport(), mode=mode) as client:
        results = [await client.call_tool("echo", {"message": "again"}) for _ in range(10)]
        results.append(await client.call_tool("echo", {"message": "other"}))
        results.append(await client.call_tool("runs", {}))
        return results


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28", "auto"])
def test_the_probe_over_http_runs_five_then_refuses(
    relay_to: Any, sdk_http: str, mode: str
) -> None:
    relay = relay_to(sdk_http)
    results = anyio.run(probe, mcp_scenario.http(relay.url, AUTH), mode)
    assert [r.is_error for r in results] == [False] * 5 + [True] * 5 + [False] * 2
    for refused in results[5:10]:
        assert refused.content[0].text == expected_text("echo")
    # The server ran echo exactly 5 times before the other call: the 5 never reached it.
    assert results[10].content[0].text == "echo: other"
    assert results[11].content[0].text == "6 echo runs"


def test_the_refusal_on_the_wire_in_each_version(relay_to: Any, sdk_http: str) -> None:
    relay = relay_to(sdk_http, "--agent-id", "wire")
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    answers = []
    for n in range(1, 7):
        params = {"name": "echo", "arguments": {"message": "again"}, "_meta": meta}
        body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
        answers.append(post(relay.url, body, {"MCP-Protocol-Version": "2026-07-28"}))
    status, headers, text = answers[5]
    assert (status, headers["Content-Type"]) == (200, "application/json")
    assert json.loads(text) == {
        "jsonrpc": "2.0",
        "id": 6,
        "result": {
            "content": [{"type": "text", "text": expected_text("echo")}],
            "isError": True,
            "resultType": "complete",
        },
    }


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any, str]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **AUTH,
            **(headers or {}),
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_every_feature_over_http_is_the_same_direct_and_relayed(
    relay_to: Any, everything_http: str, mode: str
) -> None:
    relay = relay_to(everything_http)
    direct = mcp_scenario.run(mcp_scenario.http(everything_http, {}), mode)
    relayed = mcp_scenario.run(mcp_scenario.http(relay.url, AUTH), mode)
    assert relayed.keys() == direct.keys()
    assert {k: (direct[k], relayed[k]) for k in direct if direct[k] != relayed[k]} == {}
    assert len(direct["tools/list"]["tools"]) >= 17
    assert "scripted-model" in json.dumps(direct["tools/call trigger-sampling-request"])
    assert "Ada" in json.dumps(direct["tools/call trigger-elicitation-request"])
    assert direct["progress"]["progress"] == [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]
    assert {"data", "level"} <= set(direct["logging"]["a log message"])


# -- security, headers, options ------------------------------------------------------------
def test_serve_http_checks_guard_the_relay(relay_to: Any, sdk_http: str) -> None:
    relay = relay_to(sdk_http)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert post(relay.url, ping, {"Authorization": ""})[0] == 401
    assert post(relay.url, ping, {"Authorization": "Bearer wrong-token-000000"})[0] == 401
    assert post(relay.url, ping, {"Host": "evil.example:80"})[0] == 421
    assert post(relay.url, ping, {"Origin": "http://evil.example"})[0] == 403
    assert post(relay.url, ping, {"Sec-Fetch-Site": "cross-site"})[0] == 403
    # The relay's own page origin is not refused; the answer is the server's.
    assert post(relay.url, ping, {"Origin": relay.origin})[0] != 403


class Recorder(BaseHTTPRequestHandler):
    """An HTTP server that records each request's headers and answers JSON-RPC."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Recorder.seen.append(dict(self.headers.items()))
        data = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Mcp-Session-Id", "session-from-the-server")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_session_version_and_auth_headers_pass_through(relay_to: Any) -> None:
    server = HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    relay = relay_to(f"http://127.0.0.1:{server.server_port}/rpc?x=1")
    headers = {
        "Dsh-Circuit-Breaker-Token": TOKEN,  # the relay's, beside the server's own
        "Authorization": "Bearer the-servers-own-credential",
        "Mcp-Session-Id": "s-1",
        "MCP-Protocol-Version": "2025-11-25",
    }
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    status, answer_headers, _ = post(relay.url, ping, headers)
    assert status == 200
    assert answer_headers["Mcp-Session-Id"] == "session-from-the-server"
    seen = {k.lower(): v for k, v in Recorder.seen[-1].items()}
    assert seen["authorization"] == "Bearer the-servers-own-credential"
    assert seen["mcp-session-id"] == "s-1" and seen["mcp-protocol-version"] == "2025-11-25"
    assert seen["host"] == f"127.0.0.1:{server.server_port}"
    assert "dsh-circuit-breaker-token" not in seen
    # With the token as the Bearer, it is the relay's and stays there.
    post(relay.url, {"jsonrpc": "2.0", "id": 4, "method": "ping"})
    server.shutdown()
    assert "authorization" not in {k.lower() for k in Recorder.seen[-1]}


BAD = [
    (("--http", "127.0.0.1:x", "--upstream", "http://127.0.0.1:1/mcp"), "port"),
    (("--http", "8.8.8.8:9000", "--upstream", "http://127.0.0.1:1/mcp"), "not a loopback"),
    (("--http", "0", "--upstream", "ftp://x"), "--upstream 'ftp://x'"),
    (("--http", "0"), "--http needs --upstream"),
    (("--http", "0", "--upstream", "http://127.0.0.1:1/", "--", "true"), "takes no COMMAND"),
]


@pytest.mark.parametrize(("args", "says"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_http_options_get_one_line(
    installed: Installed, args: tuple[str, ...], says: str
) -> None:
    done = installed.run("mcp", *args, input="", timeout=30)
    assert done.returncode == 2
    assert done.stderr.startswith("dsh-circuit-breaker: mcp: ") and says in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
