"""The MCP relay observes results (issue 25, docs/results.md): with `resultProgress`, a
`tools/call` whose answer moves runs on past 6 copies, one whose answer is frozen (only its
clock time changes) is refused at the 7th; over stdio and over Streamable HTTP (the SDK
server answers each POST as SSE), from the installed wheel in front of the mcp SDK's server;
and, in process, what of an answer is compared and which answers count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client

from dsh_circuit_breaker.config import Config
from dsh_circuit_breaker.guard.mcp import Connection, McpGuard, Session, result_of
from support import mcp_scenario
from support.installed import Installed
from test_mcp_relay import relay, sdk_server
from test_mcp_relay_http import AUTH, relay_to, sdk_http  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(120)


def results_config(tmp_path: Path, on: bool = True) -> str:
    """A config file with results observed, or not (the default: judged by calls alone).
    Its incident log is the test's own: the default one is the person's."""
    path = tmp_path / "breaker.toml"
    text = f'incidentLog = "{tmp_path / "incidents.jsonl"}"\n'
    text += "resultProgress = true\n" if on else ""
    path.write_text(text, encoding="utf-8")
    return str(path)


async def polls(client: Any) -> tuple[list[bool], list[bool]]:
    moving = [await client.call_tool("progress", {"job": "7"}) for _ in range(10)]
    frozen = [await client.call_tool("status", {"job": "7"}) for _ in range(8)]
    return [r.is_error for r in moving], [r.is_error for r in frozen]


async def over_stdio(command: list[str], env: dict[str, str]) -> tuple[list[bool], list[bool]]:
    async with Client(mcp_scenario.params(command, env), mode="legacy") as client:
        return await polls(client)


@pytest.mark.parametrize("with_results", [True, False], ids=["resultProgress", "default"])
def test_over_stdio_a_moving_answer_runs_on_and_a_frozen_one_is_refused(
    installed: Installed, tmp_path: Path, with_results: bool
) -> None:
    options = ("--config", results_config(tmp_path, with_results))
    command = relay(installed, sdk_server(), *options, "--state", f"sqlite:///{tmp_path}/s.db")
    moving, frozen = anyio.run(over_stdio, command, installed.env)
    assert frozen == [False] * 6 + [True] * 2
    assert moving == ([False] * 10 if with_results else [False] * 6 + [True] * 4)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_over_http_a_moving_answer_runs_on_and_a_frozen_one_is_refused(
    relay_to: Any,  # noqa: F811
    sdk_http: str,  # noqa: F811
    tmp_path: Path,
    mode: str,
) -> None:
    started = relay_to(sdk_http, "--config", results_config(tmp_path))
    transport = mcp_scenario.http(started.url, AUTH)

    async def run() -> tuple[list[bool], list[bool]]:
        async with Client(transport(), mode=mode) as client:
            return await polls(client)

    moving, frozen = anyio.run(run)
    assert moving == [False] * 10
    assert frozen == [False] * 6 + [True] * 2


def test_what_of_an_answer_is_compared() -> None:
    ok = {"result": {"content": [{"type": "text", "text": "3 left"}], "isError": False}}
    failed = {"result": {"content": [{"type": "text", "text": "3 left"}], "isError": True}}
    structured = {"result": {"content": [], "structuredContent": {"left": 3}}}
    assert result_of(ok) == "ok:\n3 left"
    assert result_of(failed) == "error:\n3 left"
    assert result_of(structured) == 'ok:\n{"left":3}'
    assert result_of({"error": {"code": -32000, "message": "down"}}).startswith("JSON-RPC")


def test_only_the_answer_to_an_allowed_call_counts(tmp_path: Path) -> None:
    guard = McpGuard(results_config(tmp_path), "memory://")
    session = Session(guard, Connection("agent"))

    def call(n: int) -> dict[str, Any]:
        params = {"name": "status", "arguments": {"job": "7"}}
        return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}

    def answer(n: int, text: str) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": n, "result": {"content": [{"type": "text", "text": text}]}}

    for n in range(6):
        assert session.from_client(call(n)) is None
        session.from_server(answer(n, "pending"))
    assert session.from_client(call(6)) is not None  # the 7th frozen copy: refused
    session.from_server(answer(6, "moved"))  # an answer to the refused call: nothing
    session.from_server(answer(5, "moved"))  # a second answer to the 6th: nothing
    assert session.from_client(call(7)) is not None
    assert not session.connection.awaited
    assert '"kind":"duplicate"' in (tmp_path / "incidents.jsonl").read_text(encoding="utf-8")
    assert Config().observes_results is False  # by default nothing is awaited at all
    guard.close()
