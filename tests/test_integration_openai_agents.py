"""The OpenAI Agents SDK drives the breaker through a real Runner. The loop and the healthy
cycle run through the SDK's real OpenAI models (OpenAIResponsesModel, its default, and
OpenAIChatCompletionsModel) on an AsyncOpenAI client pointed at a scripted model server on
127.0.0.1; the rest use the SDK's own ScriptedModel, with responders that read what the
model was sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from conftest import require
from support import agent_scenarios as scenario
from support.fake_openai import FakeOpenAI

try:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        handoff,
        set_tracing_disabled,
    )
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
    from agents.testing.model import ModelCall
    from openai import AsyncOpenAI

    from dsh_circuit_breaker.integrations.openai_agents import (
        circuit_breaker_guardrail,
        guard_agent,
    )

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

from dsh_circuit_breaker import CircuitBreaker, Config

APIS = ("chat_completions", "responses")


@pytest.fixture(autouse=True)
def _need_openai_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "openai-agents (extra [openai-agents])")
    scenario.go_offline(monkeypatch)
    set_tracing_disabled(True)  # traces would be exported over the network


def openai_model(server: FakeOpenAI, api: str) -> Any:
    """The SDK's real model for `api`, on an OpenAI client pointed at the scripted server
    (a fresh client per run: its connections belong to one event loop)."""
    client = AsyncOpenAI(base_url=server.url, api_key="dummy", max_retries=0, timeout=10)
    if api == "responses":
        return OpenAIResponsesModel("fake-model", openai_client=client)
    return OpenAIChatCompletionsModel("fake-model", openai_client=client)


def items(call: ModelCall) -> list[dict[str, Any]]:
    raw = call.input if isinstance(call.input, list) else []
    return [dict(i) if not isinstance(i, dict) else i for i in raw]  # type: ignore[arg-type]


def outputs(input_items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in input_items if i.get("type") == "function_call_output"]


def refusals(input_items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in outputs(input_items) if scenario.is_refusal(str(i.get("output")))]


def reactive(respond: Callable[[list[dict[str, Any]]], Any], steps: int = 40) -> ScriptedModel:
    """A ScriptedModel whose every answer is computed from the input it was sent."""
    return ScriptedModel([ModelStep.respond(lambda call: [respond(items(call))])] * steps)


def looping(
    tag: str, give_up_after: int = scenario.GIVE_UP_AFTER, tool: str = "search"
) -> ScriptedModel:
    def respond(seen: list[dict[str, Any]]) -> Any:
        mine = [o for o in outputs(seen) if str(o["call_id"]).startswith(tag)]
        if len([o for o in mine if scenario.is_refusal(str(o["output"]))]) >= give_up_after:
            return assistant_message(scenario.GIVE_UP)
        _, args, call_id = scenario.loop_call(tag, len(mine))
        return function_call(tool, args, call_id=call_id)

    return reactive(respond)


def search_tool(ran: list[str]) -> Any:
    return function_tool(scenario.search_function(ran))


def last_input(model: ScriptedModel) -> list[dict[str, Any]]:
    last = model.last_call
    assert last is not None
    return items(last)


@pytest.mark.parametrize("api", APIS)
def test_loop_is_refused_at_the_sixth_copy_sync(api: str) -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop(FakeOpenAI.results_of)) as server:
        agent = Agent(name="looper", model=openai_model(server, api), tools=[search_tool(ran)])
        guard_agent(agent)
        result = Runner.run_sync(agent, "find it")
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_loop(server, error_flag=False)  # neither API has a flag
    assert result.final_output == scenario.GIVE_UP
    behaviors = [r.output.behavior["type"] for r in result.tool_input_guardrail_results]
    assert behaviors == ["allow"] * scenario.RUNS + ["reject_content"] * 2
    assert result.tool_input_guardrail_results[-1].output.output_info == {
        "kind": "duplicate",
        "count": scenario.LIMIT,  # the refused call is the LIMIT-th copy
        "limit": scenario.LIMIT,
    }


@pytest.mark.parametrize("api", APIS)
def test_loop_is_refused_at_the_sixth_copy_streamed(api: str) -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop(FakeOpenAI.results_of)) as server:
        agent = Agent(name="looper", model=openai_model(server, api), tools=[search_tool(ran)])
        guard_agent(agent)

        async def streamed() -> Any:
            run = Runner.run_streamed(agent, "find it")
            async for _ in run.stream_events():
                pass
            return run.final_output

        output = asyncio.run(streamed())
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_loop(server, error_flag=False)
    assert all(body.get("stream") for body in server.model_requests)
    assert output == scenario.GIVE_UP


@pytest.mark.parametrize("api", APIS)
def test_healthy_edit_test_cycle_is_never_refused(api: str) -> None:
    edits = 15
    script = scenario.edit_test_cycle(edits)
    ran: list[str] = []
    run_tests, edit = (function_tool(f) for f in scenario.edit_test_functions(ran))
    turns = scenario.wire_script(FakeOpenAI.results_of, script, "all green")
    with FakeOpenAI(after=turns) as server:
        agent = Agent(name="coder", model=openai_model(server, api), tools=[run_tests, edit])
        guard_agent(agent)
        result = Runner.run_sync(agent, "fix the bug", max_turns=50)
    scenario.check_wire_healthy(server, script)
    assert ran.count("test") == edits + 1
    assert result.final_output == "all green"


def test_guard_agent_reaches_handoffs_and_agents_as_tools() -> None:
    def tool_named(name: str) -> Any:
        @function_tool(name_override=name)
        def t(query: str) -> str:
            """A tool."""
            return "r"

        return t

    from agents.mcp import MCPServerStdio

    server = MCPServerStdio(params={"command": "true"})  # built, never started
    deep = Agent(name="deep", tools=[tool_named("deep_tool")], mcp_servers=[server])
    helper = Agent(name="helper", tools=[tool_named("helper_tool")], handoffs=[handoff(deep)])
    billing = Agent(name="billing", tools=[tool_named("billing_tool")])
    triage = Agent(
        name="triage",
        tools=[tool_named("triage_tool"), helper.as_tool("ask_helper", "Ask the helper.")],
        handoffs=[billing],
    )
    billing.handoffs = [triage]  # a cycle must not loop forever
    guardrail = guard_agent(triage)
    every_tool = [t for a in (triage, helper, billing, deep) for t in a.tools]
    assert len(every_tool) == 5
    for tool in every_tool:
        assert tool.tool_input_guardrails == [guardrail]
    # MCP tools get the guardrails their server carries when the SDK lists them.
    assert server.tool_input_guardrails == [guardrail]
    # Guarding again (even with another breaker) never stacks a second breaker guardrail.
    guard_agent(triage, CircuitBreaker())
    assert all(tool.tool_input_guardrails == [guardrail] for tool in every_tool)


def test_handoff_target_has_its_own_state() -> None:
    # The triage agent runs search('same') 4 times, then hands off; the specialist runs it
    # 4 more times in the same run. 8 in all, never 6 by one agent: nothing is refused.
    ran: list[str] = []
    search = search_tool(ran)

    def four_then(tag: str, then: Any) -> ScriptedModel:
        def respond(seen: list[dict[str, Any]]) -> Any:
            mine = [o for o in outputs(seen) if str(o["call_id"]).startswith(tag)]
            if len(mine) < 4:
                return function_call("search", {"query": "same"}, call_id=f"{tag}{len(mine)}")
            return then

        return reactive(respond)

    specialist = Agent(
        name="specialist", model=four_then("s", assistant_message("s done")), tools=[search]
    )
    triage = Agent(
        name="triage",
        model=four_then("t", function_call("transfer_to_specialist", {}, call_id="h")),
        tools=[search],
        handoffs=[specialist],
    )
    guard_agent(triage)
    result = Runner.run_sync(triage, "go")
    assert result.last_agent is specialist
    assert result.final_output == "s done"
    assert len(ran) == 8
    assert all(r.output.behavior["type"] == "allow" for r in result.tool_input_guardrail_results)


def test_agent_as_tool_and_concurrent_runs_have_their_own_state() -> None:
    ran: list[str] = []
    search = search_tool(ran)
    inner_model = looping("in")
    inner = Agent(name="inner", model=inner_model, tools=[search])

    def outer_respond(seen: list[dict[str, Any]]) -> Any:
        mine = outputs(seen)
        if not mine:
            return function_call("search", {"query": "same"}, call_id="o0")
        if len(mine) == 1:
            return function_call("ask_inner", {"input": "dig"}, call_id="o1")
        if len(mine) < 7:
            return function_call("search", {"query": "same"}, call_id=f"o{len(mine)}")
        return assistant_message("outer done")

    outer = Agent(
        name="outer",
        model=reactive(outer_respond),
        tools=[search, inner.as_tool("ask_inner", "Ask the inner agent.")],
    )
    guard_agent(outer)
    result = Runner.run_sync(outer, "go")
    # The inner agent looped on its own: 5 runs, then refused, then it gave up. The outer
    # agent made 6 searches of its own around it (5 after its ask_inner call, a new call)
    # and none was refused.
    assert ran.count("same") == scenario.RUNS + 6
    assert result.final_output == "outer done"
    assert len(refusals(last_input(inner_model))) == 2

    # Two concurrent runs of one agent object are two agents.
    ran.clear()
    a = Agent(name="same", model=looping("a"), tools=[search])
    guard_agent(a)

    async def both() -> Any:
        return await asyncio.gather(Runner.run(a, "go"), Runner.run(a, "go"))

    for result in asyncio.run(both()):
        assert result.final_output == scenario.GIVE_UP
        conversation = [i if isinstance(i, dict) else dict(i) for i in result.to_input_list()]
        assert len(refusals(conversation)) == 2  # type: ignore[arg-type]
    assert len(ran) == 2 * scenario.RUNS


def test_explicit_guardrail_agent_id_and_custom_text() -> None:
    # agent_id= keys state on a session id, so it carries over from one run to the next.
    breaker = CircuitBreaker(Config(duplicate_limit=3, deny_message="no more {tool} ({count})"))
    guardrail = circuit_breaker_guardrail(breaker, agent_id=lambda data: "session-1")
    ran: list[str] = []

    @function_tool(tool_input_guardrails=[guardrail])
    def search(query: str) -> str:
        """Search."""
        ran.append(query)
        return "r"

    def one_call(seen: list[dict[str, Any]]) -> Any:
        if outputs(seen):
            return assistant_message(json.dumps([o["output"] for o in outputs(seen)]))
        return function_call("search", {"query": "same"}, call_id="x")

    for _ in range(3):
        agent = Agent(name="a", model=reactive(one_call, steps=2), tools=[search])
        result = Runner.run_sync(agent, "go")
    assert len(ran) == 2
    # {count} counts the refused call too: the third copy of a limit of 3.
    assert json.loads(result.final_output) == ["no more search (3)"]


def test_state_goes_with_the_run() -> None:
    import gc

    ran: list[str] = []
    agent = Agent(name="looper", model=looping("loop"), tools=[search_tool(ran)])
    guardrail = guard_agent(agent)
    store = guardrail.guardrail_function.breaker.store  # type: ignore[attr-defined]
    result = Runner.run_sync(agent, "find it")
    assert len(list(store.agents())) == 1
    del result
    gc.collect()
    assert list(store.agents()) == []
    # A second run of the same agent object starts fresh.
    Runner.run_sync(agent, "again")
    assert len(ran) == 2 * scenario.RUNS


def test_a_failing_agent_id_fails_open(caplog: pytest.LogCaptureFixture) -> None:
    def broken(data: Any) -> str:
        raise RuntimeError("no id here")

    def eight_then_done(seen: list[dict[str, Any]]) -> Any:
        n = len(outputs(seen))
        if n < 8:
            return function_call("search", {"query": "same"}, call_id=f"s{n}")
        return assistant_message("done")

    ran: list[str] = []
    agent = Agent(name="broken", model=reactive(eight_then_done), tools=[search_tool(ran)])
    guard_agent(agent, agent_id=broken)
    with caplog.at_level("WARNING", logger="dsh_circuit_breaker"):
        result = Runner.run_sync(agent, "go", max_turns=20)
    assert len(ran) == 8
    assert result.final_output == "done"
    assert "call allowed" in caplog.text


@pytest.mark.parametrize("poller", [scenario.MOVING, scenario.FROZEN])
def test_results_as_progress(poller: scenario.Poller) -> None:
    def go(server: Any, tools: list[Any]) -> None:
        agent = Agent(name="poller", model=openai_model(server, "responses"), tools=tools)
        guard_agent(agent, config=poller.config)
        Runner.run_sync(agent, "watch job 7", max_turns=2 * scenario.POLLS)

    poller.drive(FakeOpenAI, function_tool, go, error_flag=False)  # neither API has a flag
