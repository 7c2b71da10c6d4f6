"""Every program in examples/ runs as a user would run it, against a scripted model (an
MCP server example: started over stdio by the official MCP client, as a client would).

Each one asks its agent to run one call ten times (the DSH probe). The program talks to
the scripted server on 127.0.0.1 through its framework's real provider client, told only
by the provider's own base-URL variable; the test then reads, in the requests the model
got, that calls 1 to 5 ran and calls 6 and 7 were answered with the breaker's text (with
the error flag, where the API has one), that no request followed the 8th call (the third
refusal in a row stops the agent), and that the program printed why it stopped.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from sandbox import scratch_env
from support.fake_anthropic import FakeAnthropic, tool_use
from support.fake_dspy import FakeDSPy
from support.fake_gemini import FakeGemini
from support.fake_openai import FakeOpenAI, function_call
from support.fake_smolagents import FakeSmolagents

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
ANSWER = "Five searches ran."
# The default duplicateLimit: the LIMIT-th identical call is the first refused (the denial
# counts it among the copies), so RAN calls run before it.
LIMIT = Config().duplicate_limit
RAN = LIMIT - 1
TIMEOUT = 50  # seconds for one program; under the suite's per-test timeout, to say which
SEARCH = ("search", {"query": "cbprobe"})


@dataclass(frozen=True)
class Result:
    text: str
    is_error: bool | None  # None: the API has no error flag


def anthropic_results(fake: Any) -> list[Result]:
    return [Result(r.text, r.is_error) for r in fake.tool_results()]


def openai_results(fake: Any) -> list[Result]:
    return [Result(r.text, None) for r in fake.tool_results()]


@dataclass(frozen=True)
class Provider:
    server: Callable[[list[Any]], Any]  # a scripted fake, from its turns
    call: Callable[[str, dict[str, Any]], Any]  # a scripted tool call
    results: Callable[[Any], list[Result]]  # the tool results the model was sent
    env: Callable[[Any], dict[str, str]]  # how the program is pointed at the fake


ANTHROPIC = Provider(
    lambda turns: FakeAnthropic(turns),
    tool_use,
    anthropic_results,
    lambda fake: {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "sk-ant-fake"},
)
OPENAI = Provider(
    lambda turns: FakeOpenAI(turns),
    function_call,
    openai_results,
    lambda fake: {
        "OPENAI_BASE_URL": fake.url,
        "OPENAI_API_KEY": "sk-fake",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",  # traces would go to OpenAI's servers
    },
)

# smolagents and DSPy ReAct speak Chat Completions but keep tool calls and results in the
# text of their messages: their fakes read (and, for DSPy, write) that form.
SMOLAGENTS = Provider(
    lambda turns: FakeSmolagents(turns), function_call, openai_results, OPENAI.env
)
DSPY = Provider(lambda turns: FakeDSPy(turns), function_call, openai_results, OPENAI.env)
LITELLM_OFFLINE = (("LITELLM_LOCAL_MODEL_COST_MAP", "True"),)  # no cost map fetched

GEMINI = Provider(
    lambda turns: FakeGemini(turns),
    tool_use,  # every scripted server takes the same tool call block
    anthropic_results,
    lambda fake: {"GOOGLE_GEMINI_BASE_URL": fake.url, "GOOGLE_API_KEY": "fake-key"},
)
CREWAI_OFFLINE = {  # CrewAI's telemetry, trace uploads and version check
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
    "OTEL_SDK_DISABLED": "true",
}
CLAUDE_CODE_ENV = {  # the CLI the Claude Agent SDK drives: nothing but the model
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
}


@dataclass(frozen=True)
class Example:
    module: str  # the framework it needs
    provider: Provider
    calls: list[tuple[str, dict[str, Any]]]  # the ten calls the model asks for
    output: str  # what the tool returns when it runs
    prefix: str = ""  # what the framework puts before the breaker's text
    env: tuple[tuple[str, str], ...] = ()
    error_flag: bool = True  # the framework sets the API's error flag on a refusal


PROBE = [("Bash", {"command": "echo cbprobe4", "description": f"step {n}"}) for n in range(10)]
RUNS = {
    "langchain_example.py": Example("langchain", ANTHROPIC, [SEARCH] * 10, "3 results"),
    "langgraph_example.py": Example("langgraph", ANTHROPIC, [SEARCH] * 10, "3 results"),
    # Agno sends no error flag with a failed call's result (docs/agno.md).
    "agno_example.py": Example("agno", ANTHROPIC, [SEARCH] * 10, "3 results", error_flag=False),
    "openai_agents_example.py": Example("agents", OPENAI, [SEARCH] * 10, "3 results"),
    "agent_framework_example.py": Example("agent_framework", OPENAI, [SEARCH] * 10, "3 results"),
    "smolagents_example.py": Example("smolagents", SMOLAGENTS, [SEARCH] * 10, "3 results"),
    "dspy_example.py": Example("dspy", DSPY, [SEARCH] * 10, "3 results", env=LITELLM_OFFLINE),
    "pydantic_ai_example.py": Example("pydantic_ai", GEMINI, [SEARCH] * 10, "3 results"),
    "strands_example.py": Example("strands", ANTHROPIC, [SEARCH] * 10, "3 results"),
    "google_adk_example.py": Example("google.adk", GEMINI, [SEARCH] * 10, "3 results"),
    # CrewAI ends a task itself at the 5th identical call with an identical result, so the
    # example's search answers a little differently each time (it still says "3 results"),
    # only in the time it took, which the breaker masks: to it, the result has not moved.
    "crewai_example.py": Example(
        "crewai", OPENAI, [SEARCH] * 10, "3 results", env=tuple(CREWAI_OFFLINE.items())
    ),
    "llamaindex_example.py": Example("llama_index.llms.openai", OPENAI, [SEARCH] * 10, "3 results"),
    "semantic_kernel_example.py": Example("semantic_kernel", OPENAI, [SEARCH] * 10, "3 results"),
    # OpenHands runs the breaker's command hook and frames its reason; like CrewAI, it ends a
    # run itself on identical results (at the 4th), so the example's search varies its own
    # (in the time it took, as CrewAI's).
    "openhands_example.py": Example(
        "openhands.sdk",
        OPENAI,
        [SEARCH] * 10,
        "3 results",
        prefix="Action rejected: ",
        env=LITELLM_OFFLINE,
    ),
    "claude_agent_sdk_example.py": Example(
        "claude_agent_sdk",
        ANTHROPIC,
        PROBE,
        "cbprobe4",
        prefix="PreToolUse:Bash hook error: ",
        env=tuple(CLAUDE_CODE_ENV.items()),
    ),
}


# Examples whose framework installs only in a side venv (pyproject.toml's side-NAME extras):
# run there by scripts/test (conftest.py's `side` marker).
SIDE = {
    "crewai_example.py": "crewai",
    "llamaindex_example.py": "llamaindex",
    "semantic_kernel_example.py": "semantic-kernel",
    "openhands_example.py": "openhands",
}
EXAMPLES_RUN = [
    pytest.param(n, marks=[pytest.mark.side(SIDE[n])] if n in SIDE else [], id=n)
    for n in sorted(RUNS)
]

# MCP servers with the breaker inside: example -> the module it needs.
SERVERS = {"fastmcp_server_example.py": "fastmcp", "mcp_server_example.py": "mcp.server"}


def test_every_example_is_run_here() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted([*RUNS, *SERVERS])


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("name", sorted(SERVERS))
def test_server_example_refuses_the_sixth_call(name: str, mode: str, tmp_path: Path) -> None:
    require(importlib.util.find_spec("mcp") is not None, f"the mcp client for {name}")
    require(importlib.util.find_spec(SERVERS[name]) is not None, f"{SERVERS[name]} for {name}")
    import asyncio

    from mcp import StdioServerParameters
    from mcp.client import Client

    (tmp_path / "home").mkdir()
    server = StdioServerParameters(
        command=sys.executable, args=[str(EXAMPLES / name)], env=scratch_env(tmp_path / "home")
    )

    async def calls() -> list[Any]:
        async with Client(server, mode=mode) as client:
            probe = {"query": "cbprobe"}
            return [await client.call_tool("search", probe) for _ in range(RAN + 2)]

    results = asyncio.run(asyncio.wait_for(calls(), TIMEOUT))
    assert [r.is_error for r in results] == [False] * RAN + [True] * 2
    assert [r.content[0].text for r in results[:RAN]] == ["3 results for 'cbprobe'"] * RAN
    denial = DEFAULT_MESSAGES["duplicate"].format(tool="search", count=LIMIT, limit=LIMIT)
    assert [r.content[0].text for r in results[RAN:]] == [denial] * 2


@pytest.mark.parametrize("name", EXAMPLES_RUN)
def test_example_runs_and_its_model_reads_the_refusals(name: str, tmp_path: Path) -> None:
    example = RUNS[name]
    require(importlib.util.find_spec(example.module) is not None, f"{example.module} for {name}")
    provider = example.provider
    tool = example.calls[0][0]
    denial = DEFAULT_MESSAGES["duplicate"].format(tool=tool, count=LIMIT, limit=LIMIT)
    stop = render(DEFAULT_MESSAGES["stop"], tool, "duplicate", 3, 3)
    (tmp_path / "home").mkdir()
    with provider.server([provider.call(*c) for c in example.calls] + [ANSWER]) as fake:
        env = scratch_env(tmp_path / "home", **provider.env(fake), **dict(example.env))
        try:
            done = subprocess.run(
                [sys.executable, str(EXAMPLES / name)],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{name} did not finish in {TIMEOUT} s:\n{exc.stdout}\n{exc.stderr}")
        results = provider.results(fake)
        assert not fake.errors
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stderr[-3000:]}"
    # The 8th call's refusal, the third in a row, stopped the agent: no request carried it.
    assert len(results) == RAN + 2, [r.text[:80] for r in results]
    ran, refused = results[:RAN], results[RAN:]
    assert all(example.output in r.text for r in ran), [r.text for r in ran]
    assert all(r.text == example.prefix + denial for r in refused), [r.text for r in refused]
    if ran[0].is_error is not None:
        flag = example.error_flag
        assert [r.is_error for r in results] == [False] * RAN + [flag] * 2
    printed = done.stdout.splitlines()
    assert sum(denial in line for line in printed) >= 2, done.stdout
    assert printed[-1].startswith("stopped:"), done.stdout
    if example.module != "claude_agent_sdk":  # the CLI keeps the reason in its transcript
        assert printed[-1] == "stopped: " + stop, done.stdout
