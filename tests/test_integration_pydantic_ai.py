"""pydantic-ai drives the breaker through a real Agent. The loop and the healthy cycle run
through pydantic-ai's real provider models (GoogleModel on the Gemini API, OpenAIChatModel
on Chat Completions), each with its provider's base_url on a scripted model server on
127.0.0.1; the rest use pydantic-ai's FunctionModel."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from conftest import require
from support import agent_scenarios as scenario
from support.fake_gemini import FakeGemini
from support.fake_openai import FakeOpenAI
from support.scripted_server import ScriptedServer

try:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models import Model
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.google import GoogleModel
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.google import GoogleProvider
    from pydantic_ai.providers.openai import OpenAIProvider

    from dsh_circuit_breaker.integrations.pydantic_ai import CircuitBreakerCapability

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

from dsh_circuit_breaker import CircuitBreaker, Config

# provider -> its scripted server, and whether its tool results carry an error flag
PROVIDERS = {"google": (FakeGemini, True), "openai": (FakeOpenAI, False)}


@pytest.fixture(autouse=True)
def _need_pydantic_ai(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "pydantic-ai (extra [pydantic-ai]) with its openai and google clients")
    scenario.go_offline(monkeypatch)


def provider_model(server: ScriptedServer) -> Model:
    """The provider's real pydantic-ai model, its provider's base_url on the server."""
    if isinstance(server, FakeGemini):
        google = GoogleProvider(api_key="dummy", base_url=server.url)
        return GoogleModel("gemini-2.5-flash", provider=google)
    assert isinstance(server, FakeOpenAI)
    openai = OpenAIProvider(base_url=server.url, api_key="dummy")
    return OpenAIChatModel("fake-model", provider=openai)


def wire_refusal(server: ScriptedServer) -> Any:
    """How pydantic-ai frames an error result's text: as the bare text where the API has
    an error channel (Gemini's `error` key), else in a JSON `{"error": ...}` wrapper."""
    if isinstance(server, FakeGemini):
        return str
    return lambda text: json.loads(text)["error"]


def check_wire_loop(server: ScriptedServer, error_flag: bool) -> None:
    scenario.check_wire_loop(server, error_flag, refusal=wire_refusal(server))


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]


def refusals(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for p in returns(messages) if scenario.is_refusal(str(p.content))]


def this_run(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The messages since the latest user prompt."""
    return scenario.since_last_prompt(
        messages,
        lambda m: (
            isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts)
        ),
    )


def looping_model(tag: str, give_up_after: int = scenario.GIVE_UP_AFTER) -> FunctionModel:
    """Calls search('same') again and again; gives up after `give_up_after` refusals."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(refusals(this_run(messages))) >= give_up_after:
            return ModelResponse(parts=[TextPart(scenario.GIVE_UP)])
        name, args, call_id = scenario.loop_call(tag, len(returns(messages)))
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id)])

    return FunctionModel(respond)


def search_agent(capability: Any, model: Model, ran: list[str], name: str) -> Agent:
    agent = Agent(model, name=name, capabilities=[capability])

    @agent.tool_plain
    def search(query: str) -> str:
        ran.append(query)
        return f"results for {query}"

    return agent


def assert_valid_history(messages: list[ModelMessage]) -> None:
    """Every call the model made is answered exactly once, by id, in the next request."""
    for i, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            calls = [p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)]
            if calls:
                following = messages[i + 1]
                assert isinstance(following, ModelRequest)
                answered = [
                    p.tool_call_id for p in following.parts if isinstance(p, ToolReturnPart)
                ]
                assert sorted(answered) == sorted(calls)


def check_loop_run(
    messages: list[ModelMessage], output: str, ran: list[str], tag: str = "loop"
) -> None:
    assert ran == ["same"] * scenario.RUNS
    denied = refusals(messages)
    assert len(denied) == 2
    for part in denied:
        assert part.outcome == "failed"  # sent to the provider as an error result
        scenario.assert_loop_refusal(str(part.content))
    # The refusals answer the 6th and 7th calls, by their own ids.
    assert [p.tool_call_id for p in denied] == [
        f"{tag}-{scenario.RUNS}",
        f"{tag}-{scenario.RUNS + 1}",
    ]
    assert all(p.outcome == "success" for p in returns(messages)[: scenario.RUNS])
    assert_valid_history(messages)
    assert output == scenario.GIVE_UP


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_loop_is_refused_at_the_sixth_copy_sync(provider: str) -> None:
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []
    with fake(after=scenario.wire_loop(fake.results_of)) as server:
        model = provider_model(server)
        agent = search_agent(CircuitBreakerCapability(), model, ran, "looper")
        result = agent.run_sync("find it")
    check_loop_run(result.all_messages(), result.output, ran)
    check_wire_loop(server, error_flag)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_loop_is_refused_at_the_sixth_copy_async(provider: str) -> None:
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []
    with fake(after=scenario.wire_loop(fake.results_of)) as server:
        model = provider_model(server)
        agent = search_agent(CircuitBreakerCapability(), model, ran, "looper")
        result = asyncio.run(agent.run("find it"))
    check_loop_run(result.all_messages(), result.output, ran)
    check_wire_loop(server, error_flag)


def test_refusal_does_not_use_retry_budget() -> None:
    # ToolFailed, unlike ModelRetry, must not count against retries: with retries=0 a
    # ModelRetry would end the run with UnexpectedModelBehavior at the first refusal.
    ran: list[str] = []
    # (Five refusals in a row: without stopAfterDenials=0 the third would stop the agent.)
    capability = CircuitBreakerCapability(config=Config(stop_after_denials=0))
    agent = Agent(looping_model("loop", give_up_after=5), capabilities=[capability])

    @agent.tool_plain(retries=0)
    def search(query: str) -> str:
        ran.append(query)
        return "r"

    result = agent.run_sync("go")
    assert len(refusals(result.all_messages())) == 5
    assert ran == ["same"] * scenario.RUNS


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_healthy_edit_test_cycle_is_never_refused(provider: str) -> None:
    fake, _ = PROVIDERS[provider]
    edits = 15
    script = scenario.edit_test_cycle(edits)
    ran: list[str] = []
    with fake(after=scenario.wire_script(fake.results_of, script, "all green")) as server:
        agent = Agent(provider_model(server), capabilities=[CircuitBreakerCapability()])
        for function in scenario.edit_test_functions(ran):
            agent.tool_plain(function)
        result = agent.run_sync("fix the bug")
    scenario.check_wire_healthy(server, script)
    assert ran.count("test") == edits + 1
    assert result.output == "all green"


def test_two_agents_sharing_a_breaker_have_separate_state() -> None:
    capability = CircuitBreakerCapability()
    ran_a: list[str] = []
    ran_b: list[str] = []
    a = search_agent(capability, looping_model("loop"), ran_a, "a")
    b = search_agent(capability, looping_model("loop"), ran_b, "b")

    async def both() -> tuple[Any, Any]:
        return await asyncio.gather(a.run("go"), b.run("go"))

    result_a, result_b = asyncio.run(both())
    check_loop_run(result_a.all_messages(), result_a.output, ran_a)
    check_loop_run(result_b.all_messages(), result_b.output, ran_b)


def test_delegated_agent_has_its_own_state() -> None:
    # With reset_on_new_call=False every copy in the window counts, so a shared state would
    # trip the child at its 2nd call. The parent searches 4 times, then delegates to a child
    # that loops on the same search: the child must get its own 5. (No reset at run start
    # either, so the child's run cannot wipe a shared state and hide the sharing.)
    config = Config(reset_on_new_call=False, reset_on_user_prompt=False)
    capability = CircuitBreakerCapability(config=config)

    def parent_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = len(returns(messages))
        if n < 4:
            call = ToolCallPart("search", {"query": "same"}, tool_call_id=f"p{n}")
        elif n == 4:
            call = ToolCallPart("delegate", {"task": "dig"}, tool_call_id="d")
        else:
            return ModelResponse(parts=[TextPart("parent done")])
        return ModelResponse(parts=[call])

    ran: list[str] = []
    child = search_agent(capability, looping_model("c"), ran, "child")
    parent = search_agent(capability, FunctionModel(parent_model), ran, "parent")
    child_runs: list[Any] = []

    @parent.tool_plain
    async def delegate(task: str) -> str:
        result = await child.run(task)
        child_runs.append(result)
        return result.output

    result = parent.run_sync("go")
    assert refusals(result.all_messages()) == []
    assert len(ran) == 4 + scenario.RUNS
    check_loop_run(
        child_runs[0].all_messages(), child_runs[0].output, ["same"] * scenario.RUNS, tag="c"
    )
    assert result.output == "parent done"


def test_state_is_per_conversation_and_reset_by_a_new_prompt() -> None:
    # Without the reset, a second prompt in one conversation continues the count.
    breaker = CircuitBreaker(Config(reset_on_user_prompt=False))
    ran: list[str] = []
    agent = search_agent(
        CircuitBreakerCapability(breaker), looping_model("loop", give_up_after=1), ran, "x"
    )
    first = agent.run_sync("go")
    assert len(refusals(first.all_messages())) == 1
    second = agent.run_sync("again", message_history=first.all_messages())
    # Five already ran in this conversation: the first call of the second run is refused.
    assert len(ran) == scenario.RUNS
    assert len(refusals(second.new_messages())) == 1

    # With the default reset, the second prompt starts fresh and the state is dropped after.
    capability = CircuitBreakerCapability()
    ran.clear()
    agent = search_agent(capability, looping_model("loop", give_up_after=1), ran, "y")
    first = agent.run_sync("go")
    second = agent.run_sync("again", message_history=first.all_messages())
    assert len(ran) == 2 * scenario.RUNS
    assert list(capability.breaker.store.agents()) == []


def test_custom_deny_message_and_exempt_tool() -> None:
    config = Config(duplicate_limit=3, exempt=("search",), deny_message="no more {tool}")

    # search is exempt: five identical calls all run; fetch is refused at its third.
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = len(returns(messages))
        if n < 5:
            return ModelResponse(
                parts=[ToolCallPart("search", {"query": "q"}, tool_call_id=f"s{n}")]
            )
        if n < 8:
            return ModelResponse(parts=[ToolCallPart("fetch", {"url": "u"}, tool_call_id=f"f{n}")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(respond), capabilities=[CircuitBreakerCapability(config=config)])
    agent.tool_plain(lambda query: "r", name="search")
    agent.tool_plain(lambda url: "page", name="fetch")
    result = agent.run_sync("go")
    denied = refusals(result.all_messages())
    assert denied == []  # the custom text does not say "Circuit breaker"
    failed = [p for p in returns(result.all_messages()) if p.outcome == "failed"]
    assert [(p.tool_call_id, p.content) for p in failed] == [("f7", "no more fetch")]


def test_a_failing_agent_id_fails_open(caplog: pytest.LogCaptureFixture) -> None:
    def broken(ctx: Any) -> str:
        raise RuntimeError("no id here")

    def eight_then_done(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = len(returns(messages))
        if n < 8:
            return ModelResponse(
                parts=[ToolCallPart("search", {"query": "same"}, tool_call_id=f"s{n}")]
            )
        return ModelResponse(parts=[TextPart("done")])

    ran: list[str] = []
    capability = CircuitBreakerCapability(agent_id=broken)
    agent = search_agent(capability, FunctionModel(eight_then_done), ran, "broken")
    with caplog.at_level("WARNING", logger="dsh_circuit_breaker"):
        result = agent.run_sync("go")
    # Nothing can be judged, so nothing is refused, and the run is not disturbed.
    assert len(ran) == 8
    assert refusals(result.all_messages()) == []
    assert result.output == "done"
    assert "call allowed" in caplog.text


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_loop_is_refused_at_the_sixth_copy_streamed(provider: str) -> None:
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []

    async def run(agent: Agent) -> tuple[list[ModelMessage], str]:
        async with agent.run_stream("find it") as result:
            output = await result.get_output()
        return result.all_messages(), output

    with fake(after=scenario.wire_loop(fake.results_of)) as server:
        agent = search_agent(CircuitBreakerCapability(), provider_model(server), ran, "s")
        messages, output = asyncio.run(run(agent))
    check_loop_run(messages, output, ran)
    check_wire_loop(server, error_flag)
    streamed = [
        path.endswith(":streamGenerateContent") if fake is FakeGemini else body.get("stream")
        for path, body in zip(server.paths, server.requests, strict=True)
    ]
    assert len(streamed) == scenario.RUNS + scenario.GIVE_UP_AFTER + 1 and all(streamed)


@pytest.mark.parametrize("poller", [scenario.MOVING, scenario.FROZEN])
def test_results_as_progress(poller: scenario.Poller) -> None:
    def go(server: ScriptedServer, tools: list[Any]) -> None:
        capability = CircuitBreakerCapability(config=poller.config)
        Agent(provider_model(server), tools=tools, capabilities=[capability]).run_sync("go")

    poller.drive(FakeGemini, lambda f: f, go, error_flag=True)
