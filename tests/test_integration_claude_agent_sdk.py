"""The Claude Agent SDK drives the real Claude Code CLI (the one the SDK bundles), which
calls the breaker's PreToolUse hook; only the model is fake: the shared scripted Anthropic
server in tests/support/fake_anthropic.py, on 127.0.0.1.

The SDK is async only (`query()` and `ClaudeSDKClient`); both are driven here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from support import agent_scenarios as scenario
from support.fake_anthropic import FakeAnthropic, ToolResult, tool_results_of, tool_use

try:
    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, ResultMessage, query

    from dsh_circuit_breaker.integrations.claude_agent_sdk import (
        ClaudeCircuitBreaker,
        circuit_breaker_hooks,
        with_circuit_breaker,
    )

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

from dsh_circuit_breaker import CircuitBreaker, Config

PREFIX = "PreToolUse:Bash hook error: "  # how the CLI frames a hook's deny reason
DENIED = "Circuit breaker: NOT run, a repeat"
GIVE_UP = "I keep being refused; stopping here."


@pytest.fixture(autouse=True)
def _need_sdk() -> None:
    require(HAVE, "claude-agent-sdk (extra [claude-agent-sdk]) with its bundled Claude Code CLI")


def options(fake: FakeAnthropic, home: Path, hooks: Any, **extra: Any) -> ClaudeAgentOptions:
    home.mkdir(exist_ok=True)
    env = {
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "HOME": str(home),  # no user settings, no real credentials
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # nothing beyond the fake model
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        # Anything but the fake model would go to a dead proxy and fail at once.
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    return ClaudeAgentOptions(
        hooks=hooks,
        env=env,
        cwd=str(home),
        model="claude-sonnet-4-5",
        setting_sources=[],
        allowed_tools=["Bash", "Agent", "Task"],  # no bypass mode: the tests may run as root
        **extra,
    )


def texts(body: dict[str, Any]) -> list[str]:
    """The plain text of each user message (tool results left out)."""
    out = []
    for message in body.get("messages") or []:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.append(
                " ".join(
                    str(b.get("text", ""))
                    for b in content
                    if isinstance(b, dict) and b.get("type") == "text"
                )
            )
    return out


def since_prompt(body: dict[str, Any], marker: str = "PROMPT") -> list[ToolResult]:
    """Tool results sent after the latest user message carrying `marker`."""
    results: list[ToolResult] = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if message.get("role") == "user":
            plain = content if isinstance(content, str) else ""
            if isinstance(content, list):
                plain = " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
            if marker in plain:
                results = []
        results.extend(tool_results_of({"messages": [message]}))
    return results


def looping(command: str = "echo hi >> ran.txt") -> Callable[[dict[str, Any]], Any]:
    """Runs the same Bash command (with a fresh description each time, which the breaker
    ignores) until it has been refused twice since the latest prompt."""

    def respond(body: dict[str, Any]) -> Any:
        seen = since_prompt(body)
        # Twice: a third refusal in a row would stop it (tests/test_integration_stop.py).
        if sum(r.text.startswith(PREFIX + DENIED) for r in seen) >= 2:
            return GIVE_UP
        return tool_use("Bash", {"command": command, "description": f"attempt {len(seen)}"})

    return respond


async def run_query(prompt: str, opts: ClaudeAgentOptions) -> list[Any]:
    return [m async for m in query(prompt=prompt, options=opts)]


def final(messages: list[Any]) -> ResultMessage:
    results = [m for m in messages if isinstance(m, ResultMessage)]
    assert results, "the run produced no result"
    return results[-1]


def check_loop(fake: FakeAnthropic, ran: Path) -> None:
    # The command really ran five times: each echo returns the same (empty) output, so no
    # copy counts as progress, and the 6th identical call is refused.
    assert ran.read_text().splitlines() == ["hi"] * scenario.RUNS
    results = fake.tool_results()
    used = [b["id"] for b in fake.tool_uses()]
    assert [r.call_id for r in results] == used  # each call answered, by its own id
    assert [r.is_error for r in results] == [False] * scenario.RUNS + [True] * 2
    limit = scenario.LIMIT
    for refusal in results[scenario.RUNS :]:
        assert refusal.text.startswith(PREFIX + DENIED)
        assert f"(copies: {limit}, limit: {limit}): this Bash call is identical" in refusal.text
    assert not fake.errors


def test_loop_is_refused_at_the_sixth_copy(tmp_path: Path) -> None:
    with FakeAnthropic(after=looping()) as fake:
        messages = asyncio.run(
            run_query("PROMPT loop", options(fake, tmp_path, circuit_breaker_hooks()))
        )
    result = final(messages)
    assert result.subtype == "success" and not result.is_error
    assert result.result == GIVE_UP
    check_loop(fake, tmp_path / "ran.txt")


def test_healthy_edit_test_cycle_is_never_refused(tmp_path: Path) -> None:
    edits = 12
    script: list[Any] = []
    for i in range(edits):
        script.append(tool_use("Bash", {"command": "cat state.txt", "description": "run tests"}))
        script.append(tool_use("Bash", {"command": f"echo {i} > state.txt"}))
    script.append(tool_use("Bash", {"command": "cat state.txt"}))
    script.append("all green")
    (tmp_path / "state.txt").write_text("start\n")
    with FakeAnthropic(script) as fake:
        messages = asyncio.run(
            run_query("PROMPT fix", options(fake, tmp_path, circuit_breaker_hooks()))
        )
    assert final(messages).result == "all green"
    results = fake.tool_results()
    assert len(results) == 2 * edits + 1
    assert not any(r.is_error for r in results)
    assert results[-1].text.startswith(str(edits - 1))


def test_subagent_has_its_own_state(tmp_path: Path) -> None:
    # With reset_on_new_call=False every copy in the window counts, so a shared state would
    # trip the subagent at its 2nd call. The main agent runs the command 4 times, then
    # starts a subagent that loops on the same command: it must get its own 5.
    command = "echo hi >> ran.txt"
    sub_loop = looping(command)

    def respond(body: dict[str, Any]) -> Any:
        if any("SUBTASK" in t for t in texts(body)[:1]):
            return sub_loop(body)
        n = len(tool_results_of(body))
        if n < 4:
            return tool_use("Bash", {"command": command})
        if n == 4:
            task = {
                "description": "dig",
                "prompt": "SUBTASK: dig",
                "subagent_type": "general-purpose",
            }
            return tool_use("Agent", task)
        return "main done"

    breaker = ClaudeCircuitBreaker(CircuitBreaker(Config(reset_on_new_call=False)))
    seen: list[tuple[str, str | None, bool]] = []
    inner = breaker.pre_tool_use

    async def spy(data: Any, tool_use_id: Any, context: Any) -> Any:
        answer = await inner(data, tool_use_id, context)
        seen.append((data["tool_name"], data.get("agent_id"), bool(answer)))
        return answer

    breaker.pre_tool_use = spy  # type: ignore[method-assign]

    def replies() -> list[Any]:
        return [b.get("text") for t in fake.replies for b in t.blocks if b["type"] == "text"]

    async def run() -> None:
        async with ClaudeSDKClient(options(fake, tmp_path, breaker.hooks())) as client:
            await client.query("PROMPT go")
            async for _ in client.receive_response():
                pass
            # The subagent runs in the background; wait until it has given up.
            for _ in range(300):
                if GIVE_UP in replies():
                    break
                await asyncio.sleep(0.05)

    with FakeAnthropic(after=respond) as fake:
        asyncio.run(run())
    bash = [(agent, denied) for tool, agent, denied in seen if tool == "Bash"]
    main = [denied for agent, denied in bash if agent is None]
    sub = [denied for agent, denied in bash if agent is not None]
    assert main == [False] * 4
    assert sub == [False] * scenario.RUNS + [True] * 2
    assert len({agent for agent, _ in bash if agent is not None}) == 1
    assert len((tmp_path / "ran.txt").read_text().splitlines()) == 4 + scenario.RUNS
    refused = [r for r in fake.tool_results() if r.is_error]
    assert len(refused) == 2 and all(r.text.startswith(PREFIX + DENIED) for r in refused)


def test_new_prompt_resets_unless_configured_not_to(tmp_path: Path) -> None:
    async def two_prompts(opts: ClaudeAgentOptions) -> None:
        async with ClaudeSDKClient(opts) as client:
            for prompt in ("PROMPT one", "PROMPT two"):
                await client.query(prompt)
                async for _ in client.receive_response():
                    pass

    # Default: the second prompt starts fresh, so the command runs 5 more times.
    with FakeAnthropic(after=looping()) as fake:
        asyncio.run(two_prompts(options(fake, tmp_path / "a", circuit_breaker_hooks())))
    assert len((tmp_path / "a" / "ran.txt").read_text().splitlines()) == 2 * scenario.RUNS
    assert sum(r.is_error for r in fake.tool_results()) == 4

    # reset_on_user_prompt=False: the count carries over; every call of prompt two is refused.
    # (So do the refusals in a row: without stopAfterDenials=0 prompt two's first would stop.)
    keep = CircuitBreaker(Config(reset_on_user_prompt=False, stop_after_denials=0))
    with FakeAnthropic(after=looping()) as fake:
        asyncio.run(two_prompts(options(fake, tmp_path / "b", circuit_breaker_hooks(keep))))
    assert len((tmp_path / "b" / "ran.txt").read_text().splitlines()) == scenario.RUNS
    assert sum(r.is_error for r in fake.tool_results()) == 4


def test_with_circuit_breaker_keeps_existing_hooks(tmp_path: Path) -> None:
    from claude_agent_sdk import HookMatcher

    calls: list[str] = []

    async def mine(data: Any, tool_use_id: Any, context: Any) -> Any:
        calls.append(data["tool_name"])
        return {}

    with FakeAnthropic(after=looping()) as fake:
        opts = options(fake, tmp_path, {"PreToolUse": [HookMatcher(hooks=[mine])]})
        assert with_circuit_breaker(opts) is opts
        messages = asyncio.run(run_query("PROMPT loop", opts))
    assert final(messages).result == GIVE_UP
    check_loop(fake, tmp_path / "ran.txt")
    # The user's own hook still sees every call, the refused ones too.
    assert calls == ["Bash"] * (scenario.RUNS + 2)


def test_hook_output_and_bad_input_without_the_cli() -> None:
    # The callback on its own, as the SDK calls it: odd input never denies and never raises.
    hook = ClaudeCircuitBreaker(config=Config(duplicate_limit=2)).pre_tool_use
    context: Any = {"signal": None}

    async def call(data: Any) -> Any:
        return await hook(data, "toolu_1", context)

    good = {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    assert asyncio.run(call(good)) == {}
    denied = asyncio.run(call(good))
    assert denied["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert denied["hookSpecificOutput"]["permissionDecisionReason"].startswith(DENIED)
    # Another subagent of the same session is another agent.
    assert asyncio.run(call({**good, "agent_id": "a1"})) == {}
    for bad in (
        {},
        None,
        {"session_id": "s"},
        {"session_id": "", "tool_name": "Bash", "tool_input": {}},
        {"session_id": "s", "tool_name": 3, "tool_input": {}},
        {"session_id": "s", "tool_name": "Bash", "tool_input": {"x": object()}},
        {"session_id": "s", "tool_name": "Bash", "tool_input": "not json"},
    ):
        assert asyncio.run(call(bad)) == {}, bad
    # The exempt tools in Claude Code's spelling are never counted by default.
    todo = {"session_id": "t", "tool_name": "TodoWrite", "tool_input": {"todos": []}}
    default_hook = ClaudeCircuitBreaker().pre_tool_use
    for _ in range(10):
        assert asyncio.run(default_hook(todo, "toolu_2", context)) == {}


# The job's state: one more book at each poll, or stuck at three; the clock moves in both.
POLL_MOVING = 'n=$(($(cat n 2>/dev/null || echo 0) + 1)); echo $n > n; echo "$n books, 04:44:0$n"'
POLL_FROZEN = 'n=$(($(cat n 2>/dev/null || echo 0) + 1)); echo $n > n; echo "3 books, 04:44:0$n"'


@pytest.mark.parametrize(
    ("command", "refused_at"), [(POLL_MOVING, None), (POLL_FROZEN, scenario.LIMIT)]
)
def test_results_as_progress(command: str, refused_at: int | None, tmp_path: Path) -> None:
    polls = 9

    def respond(body: dict[str, Any]) -> Any:
        seen = since_prompt(body)
        if seen and seen[-1].text.startswith(PREFIX):
            return GIVE_UP
        return tool_use("Bash", {"command": command}) if len(seen) < polls else "job done"

    hooks = circuit_breaker_hooks()  # the default config: results observed
    assert "PostToolUse" in hooks and "PostToolUseFailure" in hooks
    with FakeAnthropic(after=respond) as fake:
        asyncio.run(run_query("PROMPT watch", options(fake, tmp_path, hooks)))
    results = fake.tool_results()
    ran = int((tmp_path / "n").read_text())
    if refused_at is None:
        assert ran == polls and not any(r.is_error for r in results)
    else:
        assert ran == refused_at - 1  # the refused poll never ran
        refused = fake.result_in_next_request(results[-1].call_id)
        assert refused.is_error and refused.text.startswith(PREFIX + DENIED)
        assert f"(copies: {scenario.LIMIT}, limit: {scenario.LIMIT})" in refused.text
    assert len(results) == (refused_at or polls)
    assert not fake.errors
