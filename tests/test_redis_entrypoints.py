"""redis:// state URLs through the real entry points, as separate processes: the DSH guard
process (`serve --stdio`) and the command hook (`hook --state`). Two processes that name
one Redis share each agent, as two machines of a fleet would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.core.stores import store_from_url
from hook_support import denial, hook_env, pre_tool_use, prompt_submit, run_hook
from support.redis_server import fresh_url, redis_available
from support.streams import readline

CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]


@pytest.fixture(autouse=True)
def _need_redis() -> None:
    require(redis_available(), "redis-server and the redis extra")


class Guard:
    """One `dsh-circuit-breaker serve --stdio` process, spoken to one line at a time."""

    def __init__(self, state: str, config: dict[str, Any]) -> None:
        self.process = subprocess.Popen(
            [*CLI, "serve", "--stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.next_id = 0
        hello = self.ask({"op": "hello", "config": config, "state": state})
        assert hello["ok"], hello

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.next_id += 1
        self.process.stdin.write(json.dumps({**request, "id": self.next_id}) + "\n")
        self.process.stdin.flush()
        reply: dict[str, Any] = json.loads(readline(self.process.stdout))
        assert reply.get("id") == self.next_id
        return reply

    def check(self, agent: str, command: str) -> dict[str, Any]:
        return self.ask(
            {"op": "check", "agent": agent, "tool": "bash", "arguments": {"command": command}}
        )

    def close(self) -> str:
        _, err = self.process.communicate(timeout=30)  # closes stdin: the guard exits
        return err


def test_two_guard_processes_share_agents_through_redis() -> None:
    url = fresh_url()
    config = {"duplicateLimit": 4, "window": 10, "maxCallsPerAgent": 8}
    one, two = Guard(url, config), Guard(url, config)
    try:
        replies = [g.check("session-1", "npm test") for g in (one, two, one, two)]
        assert [r["allowed"] for r in replies] == [True, True, True, False]
        assert (replies[-1]["kind"], replies[-1]["count"]) == ("duplicate", 4)  # counts itself
        # The cap counts the calls made through both processes.
        for i in range(5):
            assert (one if i % 2 else two).check("session-1", f"step {i}")["allowed"]
        capped = one.check("session-1", "one more")
        assert (capped["allowed"], capped["kind"], capped["count"]) == (False, "cap", 8)
        assert not two.check("session-1", "and another")["allowed"]
        assert two.check("session-2", "npm test")["allowed"]  # other agents are untouched
    finally:
        assert "Traceback" not in one.close() + two.close()


def test_guard_process_with_unreachable_redis_allows_and_warns() -> None:
    # Port 1 on loopback: nothing listens there; the connection is refused at once.
    guard = Guard("redis://127.0.0.1:1/0", {"storeTimeout": 1.0})
    try:
        assert guard.check("session-1", "ls")["allowed"]
    finally:
        stderr = guard.close()
    assert "state store unavailable" in stderr


def test_hook_processes_share_state_through_redis(tmp_path: Path) -> None:
    """Each PreToolUse is a new hook process (Claude Code, Codex): with --state redis://
    a loop is refused its 6th identical call, and a subagent is its own agent."""
    url = fresh_url()
    env = hook_env(tmp_path)
    call = pre_tool_use("Bash", {"command": "pytest -q", "description": "run tests"})
    outs = [run_hook(call, env, "--state", url) for _ in range(6)]
    assert all(out.returncode == 0 for out in outs)
    assert [denial(out.stdout) is None for out in outs] == [True] * 5 + [False]
    reason = denial(outs[-1].stdout)
    assert reason is not None and "NOT run" in reason and "(copies: 6, limit: 6)" in reason
    # The state is in Redis, keyed by the session id (not in the default SQLite file).
    keys = {agent for agent, _ in store_from_url(url).agents()}
    assert keys == {"sess-1"}
    assert not (tmp_path / "state" / "dsh-circuit-breaker" / "state.db").exists()
    # A subagent of the same session has its own state.
    sub = pre_tool_use("Bash", {"command": "pytest -q"}, agent_id="sub-1")
    assert denial(run_hook(sub, env, "--state", url).stdout) is None
    # The first denial reached the (default) incident log once.
    log = tmp_path / "state" / "dsh-circuit-breaker" / "incidents.jsonl"
    assert [json.loads(line)["agent"] for line in log.read_text().splitlines()] == ["sess-1"]
    # A person typing a prompt resets the main agent, in Redis.
    assert run_hook(prompt_submit(), env, "--state", url).returncode == 0
    assert denial(run_hook(call, env, "--state", url).stdout) is None


def test_hook_state_url_from_environment(tmp_path: Path) -> None:
    url = fresh_url()
    env = hook_env(tmp_path, DSH_CIRCUIT_BREAKER_STATE=url)
    run_hook(pre_tool_use(), env)
    assert {agent for agent, _ in store_from_url(url).agents()} == {"sess-1"}


def test_hook_with_unreachable_redis_allows_with_one_line(tmp_path: Path) -> None:
    out = run_hook(pre_tool_use(), hook_env(tmp_path), "--state", "redis://127.0.0.1:1/0")
    assert (out.returncode, out.stdout) == (0, "")
    assert "state store unavailable" in out.stderr and "Traceback" not in out.stderr


def test_an_integration_reset_with_redis_down_says_one_line(caplog: Any) -> None:
    """A framework's reset (a new run of an agent) with the store down: one warning, no
    traceback in the host's log."""
    from dsh_circuit_breaker import CircuitBreaker, Config
    from dsh_circuit_breaker.integrations._common import safe_reset

    breaker = CircuitBreaker(Config(store_timeout=1.0), state="redis://127.0.0.1:1/0")
    with caplog.at_level("WARNING", logger="dsh_circuit_breaker"):
        safe_reset(breaker, "agent-1")
    (record,) = caplog.records
    assert "could not reset agent state: state store unavailable" in record.getMessage()
    assert not record.exc_info
    breaker.close()
