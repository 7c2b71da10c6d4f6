"""The MCP relay over stdio (`dsh-circuit-breaker mcp -- COMMAND`), run from the installed
wheel in front of real servers, driven by the official `mcp` client:

- the probe: the same `tools/call` forever; the upstream sees exactly 5, the 6th and on
  get the breaker's text as an error result, at 2025-11-25 (server-everything), through a
  2026-07-28 client that falls back to it, and at 2026-07-28 (an `mcp` SDK server);
- the literal refusal on the wire, in each version's shape;
- agent keys: a conversation id, `--agent-id`, a new `initialize`; `--name` in state;
- faithfulness: every feature server-everything exercises, the same direct and relayed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client

from conftest import require
from dsh_circuit_breaker import CircuitBreaker
from dsh_circuit_breaker.guard.mcp import Connection, McpGuard, Session
from support import mcp_scenario
from support.installed import Installed
from support.streams import readline

EVERYTHING = mcp_scenario.EVERYTHING
SDK_SERVER = Path(__file__).parent / "support" / "mcp_echo_server.py"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(name="everything")
def everything_command() -> list[str]:
    """server-everything over stdio (the fixture `everything`)."""
    require(EVERYTHING.exists(), "@modelcontextprotocol/server-everything (tests/e2e)")
    require(shutil.which("node") is not None, "node")
    return ["node", str(EVERYTHING), "stdio"]


def sdk_server() -> list[str]:
    return [sys.executable, str(SDK_SERVER)]


def teed(log: Path, command: list[str]) -> list[str]:
    """`command`, with every byte it reads on stdin also appended to `log`: what the
    upstream itself was sent."""
    return ["sh", "-c", 'tee -a "$0" | exec "$@"', str(log), *command]


def upstream_calls(log: Path) -> list[dict[str, Any]]:
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return [m for m in map(json.loads, lines) if m.get("method") == "tools/call"]


def relay(installed: Installed, upstream: list[str], *options: str) -> list[str]:
    return [str(installed.cli), "mcp", *options, "--", *upstream]


def expected_text(tool: str, calls: int = 6) -> str:
    """The breaker's own text for the `calls`th identical call, with the defaults."""
    breaker = CircuitBreaker()
    for _ in range(calls - 1):
        breaker.check("a", tool, {"message": "again"})
    message = breaker.check("a", tool, {"message": "again"}).message
    assert message
    return message


async def probe(command: list[str], env: dict[str, str], mode: str, tool: str) -> list[Any]:
    server = mcp_scenario.params(command, env)
    async with Client(server, mode=mode) as client:
        return [await client.call_tool(tool, {"message": "again"}) for _ in range(10)]


# -- the probe ---------------------------------------------------------------------------
PROBES = {
    # name: (upstream, client mode, the version both sides speak)
    "2025-11-25": ("everything", "legacy", "2025-11-25"),
    "2026-07-28 client, 2025-11-25 server": ("everything", "auto", "2025-11-25"),
    "2026-07-28": ("sdk", "2026-07-28", "2026-07-28"),
    "2025-11-25 to the SDK server": ("sdk", "legacy", "2025-11-25"),
}


@pytest.mark.parametrize("name", sorted(PROBES))
def test_the_probe_runs_five_then_refuses_the_sixth(
    installed: Installed, tmp_path: Path, everything: list[str], name: str
) -> None:
    upstream_kind, mode, _version = PROBES[name]
    upstream = everything if upstream_kind == "everything" else sdk_server()
    log = tmp_path / "upstream-stdin.jsonl"
    results = anyio.run(probe, relay(installed, teed(log, upstream)), installed.env, mode, "echo")

    assert [r.is_error for r in results] == [False] * 5 + [True] * 5
    assert len(upstream_calls(log)) == 5  # the refused five never reached it
    text = expected_text("echo")
    for refused in results[5:]:
        assert [(c.type, c.text) for c in refused.content] == [("text", text)]
    if upstream_kind == "sdk":  # it counts its own runs
        assert results[4].content[0].text == "echo: again"


def test_status_sees_the_mcp_agent_and_name_prefixes_the_tool(
    installed: Installed, tmp_path: Path, everything: list[str]
) -> None:
    log = tmp_path / "upstream-stdin.jsonl"
    command = relay(installed, teed(log, everything), "--name", "everything")
    results = anyio.run(probe, command, installed.env, "legacy", "echo")

    assert results[5].content[0].text == expected_text("everything/echo")
    assert len(upstream_calls(log)) == 5
    status = installed.run("status", "--json")
    assert status.returncode == 0, status.stderr
    agents = [json.loads(line)["agent"] for line in status.stdout.splitlines()]
    assert [a.startswith("mcp:mcp:") for a in agents] == [True], agents  # the client's name
    incidents = installed.run("incidents")
    assert "everything/echo" in incidents.stdout


# -- the literal refusal -------------------------------------------------------------------
class Raw:
    """The relay driven by hand, one JSON-RPC line at a time."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )

    def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.process.stdin is not None
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def receive(self, timeout: float = 30.0) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = readline(self.process.stdout, timeout)
        assert line, "the relay closed its stdout"
        found: dict[str, Any] = json.loads(line)
        return found

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        while True:
            answer = self.receive()
            if answer.get("id") == message["id"] and "method" not in answer:
                return answer

    def close(self) -> tuple[int, str]:
        assert self.process.stdin is not None and self.process.stderr is not None
        self.process.stdin.close()
        code = self.process.wait(timeout=30)
        return code, self.process.stderr.read().decode()


def initialize(version: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "raw-client", "version": "1"},
        },
    }


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def echo_call(n: int, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "echo", "arguments": {"message": "again"}}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


def test_the_refusal_at_2025_11_25_is_a_plain_error_result(
    installed: Installed, everything: list[str]
) -> None:
    raw = Raw(relay(installed, everything), installed.env)
    assert raw.ask(initialize("2025-11-25"))["result"]["protocolVersion"] == "2025-11-25"
    raw.send(INITIALIZED)
    answers = [raw.ask(echo_call(n)) for n in range(1, 7)]
    assert answers[4]["result"]["content"] == [{"type": "text", "text": "Echo: again"}]
    assert answers[5] == {
        "jsonrpc": "2.0",
        "id": 6,
        "result": {
            "content": [{"type": "text", "text": expected_text("echo")}],
            "isError": True,
        },
    }
    code, stderr = raw.close()
    assert (code, "Traceback" in stderr) == (0, False)


MODERN = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw-client", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def test_the_refusal_at_2026_07_28_says_result_type_complete(installed: Installed) -> None:
    raw = Raw(relay(installed, sdk_server()), installed.env)
    discovered = raw.ask(
        {"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {"_meta": MODERN}}
    )
    assert "2026-07-28" in discovered["result"]["supportedVersions"]
    answers = [raw.ask(echo_call(n, MODERN)) for n in range(1, 7)]
    assert answers[4]["result"]["content"][0]["text"] == "echo: again"
    assert answers[4]["result"]["resultType"] == "complete"  # the server's own, for comparison
    assert answers[5] == {
        "jsonrpc": "2.0",
        "id": 6,
        "result": {
            "content": [{"type": "text", "text": expected_text("echo")}],
            "isError": True,
            "resultType": "complete",
        },
    }
    raw.close()


# -- agent keys ----------------------------------------------------------------------------
def test_agent_keys_in_order(tmp_path: Path) -> None:
    guard = McpGuard(state=f"sqlite:///{tmp_path}/state.db")
    connection = Connection()
    session = Session(guard, connection)
    session.from_client(initialize("2025-11-25"))
    first = connection.agent({})
    assert first.startswith("mcp:raw-client:")
    assert connection.agent({"sessionID": "ses_123"}) == "mcp:ses_123"  # OpenCode's
    session.from_client(initialize("2025-11-25"))  # a new connection: a new agent
    assert connection.agent({}) not in (first, "")
    assert connection.agent({"io.modelcontextprotocol/clientInfo": {"name": "zed"}}).startswith(
        "mcp:zed:"
    )
    pinned = Connection(agent_id="desk-1")
    assert pinned.agent({}) == "desk-1"
    assert pinned.agent({"sessionID": "ses_9"}) == "mcp:ses_9"  # the conversation wins
    guard.close()


def test_a_new_initialize_starts_a_new_agent_and_agent_id_keeps_one(
    installed: Installed, everything: list[str]
) -> None:
    for options, second_run_refused in (((), False), (("--agent-id", "desk-1"), True)):
        raw = Raw(relay(installed, everything, *options), installed.env)
        for attempt in range(2):  # two connections in one relay process
            raw.ask(initialize("2025-11-25"))
            raw.send(INITIALIZED)
            answers = [raw.ask(echo_call(n)) for n in range(1, 5)]
            refused = [a["result"].get("isError", False) for a in answers]
            # With one agent kept, the second connection's calls are copies 5 to 8: the
            # 6th copy is refused.
            expected = (
                [False] * 4 if attempt == 0 or not second_run_refused else [False, True, True, True]
            )
            assert refused == expected, (options, attempt)
        raw.close()


def test_a_conversation_id_in_meta_keys_the_agent(
    installed: Installed, everything: list[str]
) -> None:
    raw = Raw(relay(installed, everything), installed.env)
    raw.ask(initialize("2025-11-25"))
    raw.send(INITIALIZED)
    for n in range(1, 6):
        raw.ask(echo_call(n, {"sessionID": "ses_a"}))
    assert raw.ask(echo_call(6, {"sessionID": "ses_a"}))["result"]["isError"] is True
    assert "isError" not in raw.ask(echo_call(7, {"sessionID": "ses_b"}))["result"]
    raw.close()


# -- faithfulness --------------------------------------------------------------------------
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_every_feature_is_the_same_direct_and_through_the_relay(
    installed: Installed, tmp_path: Path, everything: list[str], mode: str
) -> None:
    env = installed.env
    direct = mcp_scenario.run(mcp_scenario.params(everything, env), mode)
    log = tmp_path / "upstream-stdin.jsonl"
    relayed = mcp_scenario.run(
        mcp_scenario.params(relay(installed, teed(log, everything)), env), mode
    )

    assert relayed.keys() == direct.keys()
    different = {k: (direct[k], relayed[k]) for k in direct if direct[k] != relayed[k]}
    assert different == {}
    assert direct["version"] == "2025-11-25"
    # Each feature really happened (the same failure on both sides would also be equal).
    assert len(direct["tools/list"]["tools"]) >= 17  # sampling, elicitation, roots tools too
    assert direct["tools/call trigger-sampling-request"]["isError"] is False
    sampled = json.dumps(direct["tools/call trigger-sampling-request"])
    assert "scripted-model" in sampled and "say hi" in sampled  # our sampling callback's
    assert "Ada" in json.dumps(direct["tools/call trigger-elicitation-request"])
    assert mcp_scenario.ROOT in json.dumps(direct["tools/call get-roots-list"])
    assert direct["progress"]["progress"] == [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]
    assert direct["resources/subscribe + updated"]["first update"]["params"]["uri"].startswith(
        "demo://"
    )
    assert direct["cancellation"]["cancelled"] is True
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert "notifications/cancelled" in [m.get("method") for m in sent]
    # The client's capabilities reached the server as the client sent them.
    init = next(m for m in sent if m.get("method") == "initialize")
    assert {"sampling", "elicitation", "roots"} <= init["params"]["capabilities"].keys()


def test_the_upstream_gets_the_clients_environment(
    installed: Installed, everything: list[str]
) -> None:
    env = dict(installed.env, RELAY_PROBE="kept")
    raw = Raw(relay(installed, everything), env)
    raw.ask(initialize("2025-11-25"))
    raw.send(INITIALIZED)
    answer = raw.ask(
        {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "get-env"}}
    )
    assert json.loads(answer["result"]["content"][0]["text"])["RELAY_PROBE"] == "kept"
    code, _ = raw.close()
    assert code == 0
