"""Real agent CLIs as MCP clients of the relay: Claude Code (`claude -p --mcp-config FILE`)
and Gemini CLI (`mcpServers` in ~/.gemini/settings.json), each against a scripted model
on 127.0.0.1 that calls the same MCP tool for ever, with the real
`@modelcontextprotocol/server-everything` (pinned in tests/e2e/package.json) as the
upstream. The installed wheel's own `install mcp --file` wraps the server entry, so the
CLI starts the relay exactly as a user's config would.

A tap between the relay and the server (tests/support/mcp_tap.py) logs every message that
reached the server: it must have seen exactly 5 `tools/call`, and the 6th call's result in
the next model request is the breaker's text (the original plugin's probe: "the sixth call
was denied").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES
from support.command_hook_harnesses import E2E_BIN as BIN
from support.command_hook_harnesses import GEMINI_MODEL as MODEL
from support.command_hook_harnesses import GEMINI_SETTINGS, PROXY_VARS, Trap, run_group
from support.fake_anthropic import FakeAnthropic, tool_use
from support.fake_gemini import FakeGemini, tool_call
from support.installed import Installed

CLAUDE = BIN / "claude"
GEMINI = BIN / "gemini"
EVERYTHING = BIN / "mcp-server-everything"
TAP = Path(__file__).parent / "support" / "mcp_tap.py"
CALLS = 10  # the model asks for the same echo this many times

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def everything() -> Path:
    require(EVERYTHING.exists(), "@modelcontextprotocol/server-everything (tests/e2e: npm ci)")
    return EVERYTHING


def refusal() -> str:
    """The breaker's text for the 6th echo, the tool as the relay names it (`--name`)."""
    return DEFAULT_MESSAGES["duplicate"].format(tool="everything/echo", count=6, limit=6)


def wrap(installed: Installed, path: Path, env: dict[str, str], seen: Path) -> None:
    """`install mcp --file PATH` over a config whose `everything` server is the tapped
    upstream, checked to start the installed interpreter's relay."""
    data = json.loads(path.read_text()) if path.exists() else {}
    upstream = [str(TAP), str(seen), str(EVERYTHING), "stdio"]
    data["mcpServers"] = {"everything": {"command": sys.executable, "args": upstream}}
    path.write_text(json.dumps(data, indent=2))
    done = installed.run("install", "mcp", "--file", str(path), env=env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    entry = json.loads(path.read_text())["mcpServers"]["everything"]
    assert entry["command"] == str(installed.python)
    assert entry["args"][-6:] == ["--", sys.executable, *upstream]
    assert {k: v for k, v in json.loads(path.read_text()).items() if k != "mcpServers"} == {
        k: v for k, v in data.items() if k != "mcpServers"
    }


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def tool_calls_seen(seen: Path) -> list[str]:
    lines = seen.read_text().splitlines() if seen.exists() else []
    return [line for line in lines if line.startswith("tools/call")]


def user_env(installed: Installed, drop: tuple[str, ...]) -> dict[str, str]:
    """The installed wheel's environment in the scratch HOME, with no hook installed (the
    relay alone judges) and the XDG directories under HOME."""
    home = installed.home
    xdg = {
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CONFIG_HOME": str(home / ".config"),
    }
    env = {**installed.env, **xdg}
    return {k: v for k, v in env.items() if not k.startswith(drop) and k.upper() not in PROXY_VARS}


def claude_code(installed: Installed, model: FakeAnthropic, config: Path, tool: str) -> None:
    env = user_env(installed, ("ANTHROPIC_", "CLAUDE_", "CLAUDECODE"))
    env.update(
        ANTHROPIC_BASE_URL=model.url,
        ANTHROPIC_API_KEY="sk-ant-fake-key-for-tests",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
    )
    work = installed.home / "work"
    work.mkdir(exist_ok=True)
    argv = [str(CLAUDE), "-p", "Echo cbprobe ten times.", "--output-format", "stream-json"]
    argv += [
        "--verbose",
        "--allowedTools",
        tool,
        "--mcp-config",
        str(config),
        "--strict-mcp-config",
    ]
    done = run_group(argv, env=env, cwd=work)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert model.errors == []


def gemini_cli(installed: Installed, model: FakeGemini) -> dict[str, Any]:
    env = user_env(installed, ("GEMINI_", "GOOGLE_"))
    trap = Trap()
    env.update(
        GEMINI_API_KEY="fake-gemini-key-for-tests",
        GOOGLE_GEMINI_BASE_URL=model.url,
        GEMINI_CLI_TRUST_WORKSPACE="true",
        HTTPS_PROXY=trap.url,
        HTTP_PROXY=trap.url,
        NO_PROXY="127.0.0.1",
    )
    work = installed.home / "work"
    work.mkdir(exist_ok=True)
    argv = [str(GEMINI), "-p", "Echo cbprobe ten times.", "--yolo", "-o", "json", "-m", MODEL]
    try:
        done = run_group(argv, env=env, cwd=work)
    finally:
        trap.close()
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert model.errors == []
    assert trap.hits == [], "a request tried to leave loopback"
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_claude_code_through_the_relay(
    claude: Path, everything: Path, installed: Installed
) -> None:
    config, seen = installed.home / "mcp.json", installed.home / "seen.txt"
    wrap(installed, config, user_env(installed, ()), seen)
    echo = "mcp__everything__echo"
    calls = [tool_use(echo, {"message": "cbprobe"}) for _ in range(CALLS)]
    with FakeAnthropic([*calls, "Done."]) as model:
        claude_code(installed, model, config, echo)
    assert tool_calls_seen(seen) == ["tools/call echo"] * 5
    results = [model.result_in_next_request(c["id"]) for c in model.tool_uses()]
    assert len(results) == CALLS
    assert [r.is_error for r in results] == [False] * 5 + [True] * 5
    assert all(r.text == "Echo: cbprobe" for r in results[:5]), [r.text for r in results[:5]]
    # Past stopAfterDenials nothing changes: the relay cannot end the client's agent. The
    # model reads the relay's text verbatim; to the first error of an MCP tool whose schema
    # the model never loaded (Claude Code's tool search), Claude Code adds a note of its own.
    first, *rest = [r.text for r in results[5:]]
    assert first.startswith(refusal() + "\n\nThis tool's input schema was not in your prompt")
    assert rest == [refusal()] * 4


def test_gemini_cli_through_the_relay(gemini: Path, everything: Path, installed: Installed) -> None:
    settings, seen = installed.home / ".gemini" / "settings.json", installed.home / "seen.txt"
    settings.parent.mkdir()
    # Gemini CLI's own loop detection ends a run at the 5th identical tool call (4 ran),
    # before the breaker's limit; off, so the breaker is what stops the loop here.
    settings.write_text(json.dumps({**GEMINI_SETTINGS, "model": {"disableLoopDetection": True}}))
    wrap(installed, settings, user_env(installed, ()), seen)
    echo = "mcp_everything_echo"
    calls = [tool_call(echo, {"message": "cbprobe"}) for _ in range(CALLS)]
    with FakeGemini([*calls, "Done."]) as model:
        output = gemini_cli(installed, model)
    assert tool_calls_seen(seen) == ["tools/call echo"] * 5
    results = [model.result_in_next_request(c["id"]) for c in model.tool_uses()]
    assert len(results) == CALLS
    ran = {"output": "<untrusted_context>\nEcho: cbprobe\n</untrusted_context>"}
    assert [r.raw["response"] for r in results[:5]] == [ran] * 5
    # Gemini CLI hands an MCP tool's error result to the model as this error line, the
    # result itself (the relay's text, verbatim) in it as JSON.
    call = {"name": "echo", "args": {"message": "cbprobe"}}
    content = {"content": [{"type": "text", "text": refusal()}], "isError": True}
    error = (
        f"MCP tool 'echo' reported tool error for function call: {compact(call)} "
        f"with response: {compact([{'functionResponse': {'name': 'echo', 'response': content}}])}"
    )
    assert [r.raw["response"] for r in results[5:]] == [{"error": error}] * 5
    assert output["response"] == "Done."


@pytest.fixture
def claude() -> Path:
    require(CLAUDE.exists(), "the Claude Code CLI (tests/e2e: npm ci)")
    return CLAUDE


@pytest.fixture
def gemini() -> Path:
    require(GEMINI.exists(), "the Gemini CLI (tests/e2e: npm ci)")
    return GEMINI
