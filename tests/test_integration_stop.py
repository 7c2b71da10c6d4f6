"""Issue 14 through each framework: a stopped agent ends the way its doc says, a healthy
run never stops, and a web_search budget of 12 refuses the 13th search.

Each framework runs for real (its own agent loop, tool calls and hooks); only the model is
scripted, in process, by one framework-neutral script: `respond(results)` gets the text of
every tool result the model has been sent so far and answers with a call or a final text.
The Claude Agent SDK drives the real Claude Code CLI against tests/support/fake_anthropic.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import AgentStopped, CircuitBreaker, Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES
from support import agent_scenarios as scenario

Answer = str | scenario.Call
Script = Callable[[list[str]], Answer]

STOP_REASON = DEFAULT_MESSAGES["stop"].format(tool="search", kind="duplicate", count=3, limit=3)
BUDGET_TEXT = DEFAULT_MESSAGES["budget"].format(
    tool="web_search", kind="budget", count=12, limit=12
)


# --- the scripts ---

# Every script ends its run with this text past BOUND tool results, so a stop that fails to
# happen fails its test instead of hanging it (Strands has no turn limit of its own).
BOUND = 40
UNBOUNDED = "the script's bound was reached"


def looping(results: list[str]) -> Answer:
    """A model that no longer reads its results: the same search, again and again."""
    if len(results) >= BOUND:
        return UNBOUNDED
    return scenario.loop_call("loop", len(results))


EDITS = 15
EDIT_TEST = scenario.edit_test_cycle(EDITS)


def edit_test(results: list[str]) -> Answer:
    """Healthy coding work: the same test command between edits, then done."""
    n = len(results)
    return EDIT_TEST[n] if n < len(EDIT_TEST) else "all green"


def reads_refusals(results: list[str]) -> Answer:
    """A working model: refused twice, it changes course (a new call), then finishes."""
    refused = sum(scenario.is_refusal(r) for r in results)
    if refused < 2:
        return scenario.loop_call("loop", len(results))
    if not any(r.startswith("results for other") for r in results):
        return ("search", {"query": "other"}, "other")
    return "found it another way"


def searching(results: list[str]) -> Answer:
    """A different web search each time, until one is refused: then it answers."""
    if len(results) >= BOUND:
        return UNBOUNDED
    if results and scenario.is_refusal(results[-1]):
        return "done searching"
    return ("web_search", {"query": f"topic {len(results)}"}, f"s-{len(results)}")


@dataclass
class Run:
    """What one framework run did: the tool results the model saw at each of its requests,
    the tools that really ran, its final text, and the framework's stop evidence."""

    requests: list[list[str]] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    final: str | None = None
    stop_reason: str | None = None  # read from the documented outcome, None if no stop


class Tools:
    """The scripts' tools as plain functions, each recording what really ran."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def functions(self) -> list[Callable[..., str]]:
        ran = self.run.ran

        def search(query: str) -> str:
            """Search the web."""
            ran.append(query)
            return f"results for {query}"

        def web_search(query: str) -> str:
            """Search the web."""
            ran.append(query)
            return f"results for {query}"

        run_tests, edit = scenario.edit_test_functions(ran)
        return [search, web_search, run_tests, edit]


# --- LangChain ---


def langchain(script: Script, config: Config | None = None) -> Run:
    require(_have("langchain"), "langchain (extra [langchain])")
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    from dsh_circuit_breaker.integrations.langchain import CircuitBreakerMiddleware

    run = Run()

    class Model(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
            run.requests.append(results)
            answer = script(results)
            if isinstance(answer, str):
                reply = AIMessage(content=answer)
            else:
                name, args, call_id = answer
                reply = AIMessage(
                    content="", tool_calls=[{"name": name, "args": args, "id": call_id}]
                )
            return ChatResult(generations=[ChatGeneration(message=reply)])

        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
            return self

    middleware = CircuitBreakerMiddleware(config=config)
    tools = [tool(f) for f in Tools(run).functions()]
    agent = create_agent(Model(), tools, middleware=[middleware], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    try:
        out = agent.invoke({"messages": [HumanMessage("go")]}, thread)
        run.final = str(out["messages"][-1].content)
    except AgentStopped as stopped:
        run.stop_reason = stopped.reason
        assert stopped.decision.stop and not stopped.decision.allowed
        # The refusal that stopped it is in the thread's history, answering its call.
        last = agent.get_state(thread).values["messages"][-1]
        assert isinstance(last, ToolMessage) and last.status == "error"
        assert last.content == stopped.decision.message
    return run


# --- OpenAI Agents SDK ---


def openai_agents(script: Script, config: Config | None = None) -> Run:
    require(_have("agents"), "openai-agents (extra [openai-agents])")
    from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
    from agents.exceptions import ToolInputGuardrailTripwireTriggered
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from dsh_circuit_breaker.integrations.openai_agents import GUARDRAIL_NAME, guard_agent

    set_tracing_disabled(True)  # traces would be exported over the network
    run = Run()

    def respond(call: Any) -> list[Any]:
        items = [dict(i) for i in (call.input if isinstance(call.input, list) else [])]
        results = [str(i["output"]) for i in items if i.get("type") == "function_call_output"]
        run.requests.append(results)
        answer = script(results)
        if isinstance(answer, str):
            return [assistant_message(answer)]
        name, args, call_id = answer
        return [function_call(name, args, call_id=call_id)]

    model = ScriptedModel([ModelStep.respond(respond)] * 60)
    agent = Agent(
        name="agent", model=model, tools=[function_tool(f) for f in Tools(run).functions()]
    )
    guard_agent(agent, config=config)
    session = SQLiteSession("stop-test")  # in memory
    try:
        result = Runner.run_sync(agent, "go", max_turns=60, session=session)
        run.final = str(result.final_output)
    except ToolInputGuardrailTripwireTriggered as tripped:
        assert tripped.guardrail.name == GUARDRAIL_NAME
        info = tripped.output.output_info
        assert info["stop"] is True and info["kind"] == "duplicate"
        assert scenario.is_refusal(info["message"])
        run.stop_reason = info["reason"]
        # The session keeps the run up to the previous refusal, every call in it answered,
        # so the conversation can go on.
        items = [dict(i) for i in asyncio.run(session.get_items())]
        calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
        answered = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
        assert calls == answered and len(calls) == scenario.RUNS + 2
    return run


# --- pydantic-ai ---


def pydantic_ai(script: Script, config: Config | None = None) -> Run:
    require(_have("pydantic_ai"), "pydantic-ai (extra [pydantic-ai])")
    from pydantic_ai import Agent, capture_run_messages
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from dsh_circuit_breaker.integrations.pydantic_ai import CircuitBreakerCapability

    run = Run()

    def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
        return [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        results = [str(p.content) for p in returns(messages)]
        run.requests.append(results)
        answer = script(results)
        if isinstance(answer, str):
            return ModelResponse(parts=[TextPart(answer)])
        name, args, call_id = answer
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id)])

    agent = Agent(FunctionModel(respond), capabilities=[CircuitBreakerCapability(config=config)])
    for function in Tools(run).functions():
        agent.tool_plain(function)
    with capture_run_messages() as messages:
        try:
            run.final = agent.run_sync("go").output
        except AgentStopped as stopped:
            run.stop_reason = stopped.reason
            last = returns(messages)[-1]  # the refusal answers the call that stopped it
            assert last.outcome == "failed" and last.content == stopped.decision.message
    return run


# --- Strands ---


def strands(script: Script, config: Config | None = None) -> Run:
    require(_have("strands"), "strands-agents (extra [strands])")
    from strands import Agent, tool
    from strands.models.model import Model

    from dsh_circuit_breaker.integrations.strands import CircuitBreakerHooks

    run = Run()

    def texts(messages: Any) -> list[str]:
        return [
            " ".join(str(c.get("text", "")) for c in block["toolResult"]["content"])
            for m in messages
            if m["role"] == "user"
            for block in m["content"]
            if "toolResult" in block
        ]

    class Scripted(Model):  # type: ignore[misc]
        def update_config(self, **model_config: Any) -> None:
            pass

        def get_config(self) -> Any:
            return {}

        def structured_output(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            results = texts(messages)
            run.requests.append(results)
            answer = script(results)
            yield {"messageStart": {"role": "assistant"}}
            if isinstance(answer, str):
                yield {"contentBlockStart": {"start": {}}}
                yield {"contentBlockDelta": {"delta": {"text": answer}}}
                stop = "end_turn"
            else:
                name, args, use_id = answer
                start = {"toolUse": {"name": name, "toolUseId": use_id}}
                yield {"contentBlockStart": {"start": start}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}}
                stop = "tool_use"
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": stop}}
            usage = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
            yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}

    tools = [tool(f) for f in Tools(run).functions()]
    hooks = CircuitBreakerHooks(config=config)
    agent = Agent(model=Scripted(), tools=tools, hooks=[hooks], callback_handler=None)
    result = agent("go")
    if result.stop_reason == "cancelled":  # Strands' own stop: the reason is the last message
        run.stop_reason = str(result).strip()
        refusal = texts(agent.messages)[-1]
        assert scenario.is_refusal(refusal)  # the refused call was answered first
    else:
        run.final = str(result).strip()
    return run


# --- Google ADK ---


def google_adk(script: Script, config: Config | None = None) -> Run:
    require(_have("google.adk"), "google-adk (extra [google-adk])")
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    from dsh_circuit_breaker.integrations.google_adk import METADATA_KEY, CircuitBreakerPlugin

    run = Run()

    class Scripted(BaseLlm):  # type: ignore[misc]
        model: str = "scripted"

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            results = []
            for content in llm_request.contents:
                for part in content.parts or []:
                    if part.function_response is not None:
                        response = dict(part.function_response.response or {})
                        results.append(str(response.get("error", response.get("result"))))
            run.requests.append(results)
            answer = script(results)
            if isinstance(answer, str):
                part = types.Part(text=answer)
            else:
                name, args, call_id = answer
                part = types.Part(
                    function_call=types.FunctionCall(id=call_id, name=name, args=args)
                )
            yield LlmResponse(content=types.Content(role="model", parts=[part]))

    agent = LlmAgent(name="agent", model=Scripted(), tools=Tools(run).functions())
    plugin = CircuitBreakerPlugin(config=config)
    events = run_adk_app(agent, plugin)
    last = events[-1]
    text = " ".join(p.text for p in (last.content.parts if last.content else []) if p.text)
    stop = (last.custom_metadata or {}).get(METADATA_KEY)
    if stop:  # the plugin answered in the model's place: the turn ends on that response
        assert stop["stop"] is True and last.is_final_response()
        assert stop["reason"] == text
        run.stop_reason = text
    else:
        run.final = text
    return run


FRAMEWORKS = [langchain, openai_agents, pydantic_ai, strands, google_adk]
IDS = [f.__name__ for f in FRAMEWORKS]


def run_adk_app(root: Any, plugin: Any) -> list[Any]:
    """One prompt ("go") to ADK agent `root` in an app with `plugin`: the events it yielded."""
    from google.adk.apps import App
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    runner = InMemoryRunner(app=App(name="stop_app", root_agent=root, plugins=[plugin]))

    async def go() -> list[Any]:
        await runner.session_service.create_session(
            app_name="stop_app", user_id="u", session_id="s"
        )
        message = types.Content(role="user", parts=[types.Part(text="go")])
        return [e async for e in runner.run_async(user_id="u", session_id="s", new_message=message)]

    return asyncio.run(go())


def _have(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=IDS)
def test_a_looping_agent_is_stopped_with_no_model_request_after(framework: Any) -> None:
    run = framework(looping)
    # Five ran (the 6th identical call is the first refused); the refused calls never
    # reached the tool.
    assert run.ran == ["same"] * scenario.RUNS
    assert run.stop_reason == STOP_REASON
    assert run.final is None
    # Eight model requests: each made one call; the eighth call's refusal was the third in
    # a row, and no request followed it.
    assert len(run.requests) == scenario.RUNS + 3
    seen = run.requests[-1]
    assert [scenario.is_refusal(r) for r in seen] == [False] * scenario.RUNS + [True] * 2


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=IDS)
def test_a_healthy_run_is_never_stopped(framework: Any) -> None:
    run = framework(edit_test)
    assert run.stop_reason is None
    assert run.final == "all green"
    assert run.ran.count("test") == EDITS + 1
    assert not any(scenario.is_refusal(r) for r in run.requests[-1])


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=IDS)
def test_a_model_that_reads_two_refusals_and_changes_course_is_not_stopped(
    framework: Any,
) -> None:
    run = framework(reads_refusals)
    assert run.stop_reason is None
    assert run.final == "found it another way"
    assert run.ran == ["same"] * scenario.RUNS + ["other"]


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=IDS)
def test_a_web_search_budget_of_12_refuses_the_13th_search(framework: Any) -> None:
    run = framework(searching, Config(tool_limits={"web_search": 12}))
    assert run.ran == [f"topic {i}" for i in range(12)]  # twelve different searches ran
    assert run.final == "done searching"
    # The 13th was refused with the budget text, which the next model request carried.
    assert len(run.requests) == 14
    assert run.requests[-1][-1] == BUDGET_TEXT
    assert not any(scenario.is_refusal(r) for r in run.requests[-1][:-1])


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=IDS)
def test_stop_after_denials_zero_leaves_the_loop_to_the_refusals(framework: Any) -> None:
    def gives_up_after_five(results: list[str]) -> Answer:
        if sum(scenario.is_refusal(r) for r in results) >= 5:
            return scenario.GIVE_UP
        return looping(results)

    run = framework(gives_up_after_five, Config(stop_after_denials=0))
    assert run.stop_reason is None and run.final == scenario.GIVE_UP
    assert run.ran == ["same"] * scenario.RUNS


# --- Claude Agent SDK: the real Claude Code CLI ---


def test_claude_agent_sdk_loop_ends_the_session_with_hook_stopped(tmp_path: Path) -> None:
    require(_have("claude_agent_sdk"), "claude-agent-sdk (extra [claude-agent-sdk])")
    from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query

    from dsh_circuit_breaker.integrations.claude_agent_sdk import circuit_breaker_hooks
    from support.fake_anthropic import FakeAnthropic, tool_results_of, tool_use

    def respond(body: dict[str, Any]) -> Any:
        n = len(tool_results_of(body))
        if n >= BOUND:
            return UNBOUNDED
        return tool_use("Bash", {"command": "echo hi >> ran.txt", "description": f"try {n}"})

    home = tmp_path / "home"
    home.mkdir()
    env = {
        "ANTHROPIC_BASE_URL": "",
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "HTTPS_PROXY": "http://127.0.0.1:9",  # anything but the fake model fails at once
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }

    async def session(url: str) -> list[Any]:
        options = ClaudeAgentOptions(
            hooks=circuit_breaker_hooks(),
            env={**env, "ANTHROPIC_BASE_URL": url},
            cwd=str(home),
            model="claude-sonnet-4-5",
            setting_sources=[],
            allowed_tools=["Bash"],
        )
        return [m async for m in query(prompt="PROMPT loop", options=options)]

    with FakeAnthropic(after=respond) as fake:
        messages = asyncio.run(asyncio.wait_for(session(fake.url), timeout=240))
        requests = len(fake.model_requests)
    # Each echo returns the same (empty) output, so no copy counts as progress: five ran.
    assert (home / "ran.txt").read_text().splitlines() == ["hi"] * scenario.RUNS
    assert requests == scenario.RUNS + 3  # the CLI made no model request after the stop
    (result,) = [m for m in messages if isinstance(m, ResultMessage)]
    assert result.terminal_reason == "hook_stopped"
    assert len(result.permission_denials) == 3
    # The person reading the session's transcript finds the stop reason there.
    transcripts = list((home / ".claude" / "projects").rglob("*.jsonl"))
    reason = DEFAULT_MESSAGES["stop"].format(tool="Bash", kind="duplicate", count=3, limit=3)
    assert any(
        reason in json.dumps(json.loads(line))
        for t in transcripts
        for line in t.read_text().splitlines()
    )


def test_one_breaker_serves_a_stopped_agent_and_a_healthy_one() -> None:
    # A shared breaker: one agent stopped does not stop the other (per-agent refusals).
    breaker = CircuitBreaker()
    for _ in range(scenario.RUNS + 2):  # five run, two refused
        breaker.check("looper", "search", {"query": "same"})
    assert breaker.check("looper", "search", {"query": "same"}).stop  # the third refusal
    assert not any(breaker.check("worker", "search", {"query": f"q{i}"}).stop for i in range(20))


def test_google_adk_a_stopped_agent_tool_hands_the_stop_text_to_its_parent() -> None:
    require(_have("google.adk"), "google-adk (extra [google-adk])")
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.tools.agent_tool import AgentTool
    from google.genai import types

    from dsh_circuit_breaker.integrations.google_adk import CircuitBreakerPlugin

    def results_of(request: LlmRequest) -> list[dict[str, Any]]:
        return [
            dict(p.function_response.response or {})
            for c in request.contents
            for p in c.parts or []
            if p.function_response is not None
        ]

    class Scripted(BaseLlm):  # type: ignore[misc]
        model: str = "scripted"
        respond: Any = None
        requests: int = 0

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            self.requests += 1
            answer = self.respond(results_of(llm_request))
            if isinstance(answer, str):
                part = types.Part(text=answer)
            else:
                name, args, call_id = answer
                part = types.Part(
                    function_call=types.FunctionCall(id=call_id, name=name, args=args)
                )
            yield LlmResponse(content=types.Content(role="model", parts=[part]))

    ran: list[str] = []
    search = Tools(Run(ran=ran)).functions()[0]
    child_model = Scripted(respond=lambda results: looping([str(r) for r in results]))
    child = LlmAgent(name="child", model=child_model, tools=[search], description="digs")
    parent_saw: list[Any] = []

    def parent(results: list[dict[str, Any]]) -> Answer:
        if not results:
            return ("child", {"request": "dig"}, "ask-child")
        parent_saw.append(results[-1])
        return "parent goes on"

    root = LlmAgent(name="root", model=Scripted(respond=parent), tools=[AgentTool(child)])
    plugin = CircuitBreakerPlugin()
    events = run_adk_app(root, plugin)
    assert ran == ["same"] * scenario.RUNS
    assert (
        child_model.requests == scenario.RUNS + 3
    )  # stopped: no request after its third refusal in a row
    assert STOP_REASON in json.dumps(parent_saw)  # the child's final text, as the tool result
    last = events[-1]
    assert last.is_final_response() and last.content.parts[0].text == "parent goes on"
