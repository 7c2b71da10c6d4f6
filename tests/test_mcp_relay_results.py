"""The MCP relay observes results (issues 25 and 32, docs/results.md): with `resultProgress`
(on by default), a `tools/call` whose answer moves runs on past 6 copies, one whose answer
is frozen (only its clock time changes) is refused at the 6th; two calls in turn whose
answers are frozen (rule 5's cycle) are refused at the 7th, and run on when one of them
moves; over stdio and over Streamable HTTP (the SDK server answers each POST as SSE), from
the installed wheel in front of the mcp SDK's server and server-everything; and, in process,
what of an answer is compared and which answers count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client

from dsh_circuit_breaker.core.config import Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from dsh_circuit_breaker.guard.mcp import Connection, McpGuard, Session, result_of
from support import mcp_scenario
from support.installed import Installed
from test_mcp_relay import everything_command, relay, sdk_server, teed, upstream_calls  # noqa: F401
from test_mcp_relay_http import AUTH, relay_to, sdk_http  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(120)


def results_config(tmp_path: Path, on: bool = True) -> str:
    """A config file with results observed (as by default), or not: judged by calls alone.
    Its incident log is the test's own: the default one is the person's."""
    path = tmp_path / "breaker.toml"
    text = f'incidentLog = "{tmp_path / "incidents.jsonl"}"\n'
    text += f"resultProgress = {str(on).lower()}\n"
    path.write_text(text, encoding="utf-8")
    return str(path)


async def polls(client: Any) -> tuple[list[bool], list[bool]]:
    moving = [await client.call_tool("progress", {"job": "7"}) for _ in range(10)]
    frozen = [await client.call_tool("status", {"job": "7"}) for _ in range(8)]
    return [r.is_error for r in moving], [r.is_error for r in frozen]


async def over_stdio(command: list[str], env: dict[str, str]) -> tuple[list[bool], list[bool]]:
    async with Client(mcp_scenario.params(command, env), mode="legacy") as client:
        return await polls(client)


@pytest.mark.parametrize("with_results", [True, False], ids=["default", "resultProgress-off"])
def test_over_stdio_a_moving_answer_runs_on_and_a_frozen_one_is_refused(
    installed: Installed, tmp_path: Path, with_results: bool
) -> None:
    # The default relay (no config) observes results; the other is configured off.
    options = () if with_results else ("--config", results_config(tmp_path, False))
    command = relay(installed, sdk_server(), *options, "--state", f"sqlite:///{tmp_path}/s.db")
    moving, frozen = anyio.run(over_stdio, command, installed.env)
    assert frozen == [False] * 5 + [True] * 3
    assert moving == ([False] * 10 if with_results else [False] * 5 + [True] * 5)


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
    assert frozen == [False] * 5 + [True] * 3


async def in_turn(command: list[str], env: dict[str, str], calls: list[Any]) -> list[Any]:
    """Each (tool, arguments) of `calls` in turn, over stdio, at 2025-11-25."""
    async with Client(mcp_scenario.params(command, env), mode="legacy") as client:
        return [await client.call_tool(name, arguments) for name, arguments in calls]


def test_a_frozen_cycle_is_refused_at_its_7th_call_and_a_moving_one_runs_on(
    installed: Installed, tmp_path: Path, everything: list[str]
) -> None:
    # Rule 5, on the default relay: server-everything's echo of two messages in turn
    # answers the same every round, so the 7th call (a 4th `a`) would start a 4th round
    # with nothing changed, and is refused; the 8th, `b`, is not the cycle's next: it runs.
    log = tmp_path / "upstream-stdin.jsonl"
    frozen = [("echo", {"message": m}) for _ in range(4) for m in "ab"]
    results = anyio.run(in_turn, relay(installed, teed(log, everything)), installed.env, frozen)
    assert [r.is_error for r in results] == [False] * 6 + [True, False]
    cycle = render(DEFAULT_MESSAGES["cycle"], "echo", "duplicate", 3, 3, 2)
    assert [(c.type, c.text) for c in results[6].content] == [("text", cycle)]
    sent = [c["params"]["arguments"]["message"] for c in upstream_calls(log)]
    assert sent == [*"ababab", "b"]  # the refused `a` never reached it
    # The same cycle with a call whose answer moves (the SDK server's `progress`) is
    # doing something: all eight run.
    steps = [("progress", {"job": "7"}), ("echo", {"message": "a"})]
    results = anyio.run(in_turn, relay(installed, sdk_server()), installed.env, steps * 4)
    assert [r.is_error for r in results] == [False] * 8


async def at_once_then_once_more(command: list[str], env: dict[str, str]) -> list[Any]:
    """Five copies of a slow moving poll sent at once (the official client, five tasks on
    one session), then a sixth after their answers."""
    answers: list[Any] = []
    async with Client(mcp_scenario.params(command, env), mode="legacy") as client:

        async def poll() -> None:
            answers.append(await client.call_tool("slow_progress", {"job": "7"}))

        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(poll)
        answers.append(await client.call_tool("slow_progress", {"job": "7"}))
    return answers


def test_identical_parallel_calls_are_judged_as_if_their_answers_never_came(
    installed: Installed,
) -> None:
    # Each copy is checked before any answer comes back (the tool takes two seconds), so
    # which answer belongs to which copy cannot be told: none counts as progress, though
    # every answer moved, and the sixth copy is refused at the limit. (One after another,
    # the same poll runs on past 6 copies: the stdio test above.)
    answers = anyio.run(at_once_then_once_more, relay(installed, sdk_server()), installed.env)
    assert [a.is_error for a in answers] == [False] * 5 + [True]
    assert len({a.content[0].text for a in answers[:5]}) == 5  # five different answers
    assert answers[5].content[0].text == render(
        DEFAULT_MESSAGES["duplicate"], "slow_progress", "duplicate", 6, 6
    )


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

    for n in range(5):
        assert session.from_client(call(n)) is None
        session.from_server(answer(n, "pending"))
    assert session.from_client(call(5)) is not None  # the 6th frozen copy: refused
    session.from_server(answer(5, "moved"))  # an answer to the refused call: nothing
    session.from_server(answer(4, "moved"))  # a second answer to the 5th: nothing
    assert session.from_client(call(6)) is not None
    assert not session.connection.awaited
    assert '"kind":"duplicate"' in (tmp_path / "incidents.jsonl").read_text(encoding="utf-8")
    assert Config().observes_results is True  # by default answers are awaited
    assert Config(result_progress=False).observes_results is False
    guard.close()
