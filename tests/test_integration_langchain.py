"""LangChain 1.x drives the breaker through a real `create_agent` graph. The loop and the
healthy cycle run through LangChain's real provider clients (langchain-anthropic's
ChatAnthropic, langchain-openai's ChatOpenAI on Chat Completions) against a scripted model
server on 127.0.0.1; the rest use a small in-process BaseChatModel that reads the messages
it is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from conftest import require
from support import agent_scenarios as scenario
from support.fake_anthropic import FakeAnthropic
from support.fake_openai import FakeOpenAI
from support.scripted_server import ScriptedServer

try:
    from langchain.agents import create_agent
    from langchain_anthropic import ChatAnthropic
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    from dsh_circuit_breaker.integrations.langchain import CircuitBreakerMiddleware

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

from dsh_circuit_breaker import CircuitBreaker, Config

# provider -> its scripted server, and whether its tool results carry an error flag
PROVIDERS = {"anthropic": (FakeAnthropic, True), "openai": (FakeOpenAI, False)}


@pytest.fixture(autouse=True)
def _need_langchain(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "langchain (extra [langchain]), langchain-anthropic, langchain-openai")
    scenario.go_offline(monkeypatch)


def chat_model(server: ScriptedServer, streaming: bool = False) -> BaseChatModel:
    """The provider's real LangChain chat model, pointed at the scripted server."""
    common: dict[str, Any] = {"api_key": "dummy", "max_retries": 0, "timeout": 10}
    if isinstance(server, FakeAnthropic):
        return ChatAnthropic(  # type: ignore[call-arg]
            model="claude-sonnet-4-5", base_url=server.url, streaming=streaming, **common
        )
    return ChatOpenAI(model="fake-model", base_url=server.url, streaming=streaming, **common)


if HAVE:

    class ScriptedModel(BaseChatModel):
        """Answers each request with `respond(messages)`; tools are bound by name only."""

        respond: Callable[[list[BaseMessage]], AIMessage]

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            return ChatResult(generations=[ChatGeneration(message=self.respond(messages))])

        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
            return self


def this_turn(messages: list[BaseMessage]) -> list[BaseMessage]:
    return scenario.since_last_prompt(messages, lambda m: isinstance(m, HumanMessage))


def tool_messages(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def refusals(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in tool_messages(messages) if scenario.is_refusal(str(m.content))]


def call(name: str, args: dict[str, Any], id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": id}])


def looping(tag: str, give_up_after: int = scenario.GIVE_UP_AFTER) -> ScriptedModel:
    def respond(messages: list[BaseMessage]) -> AIMessage:
        turn = this_turn(messages)
        if len(refusals(turn)) >= give_up_after:
            return AIMessage(content=scenario.GIVE_UP)
        return call(*scenario.loop_call(tag, len(tool_messages(turn))))

    return ScriptedModel(respond=respond)


def search_tool(ran: list[str]) -> Any:
    return tool(scenario.search_function(ran))


def assert_valid_history(messages: list[BaseMessage]) -> None:
    """Every tool call is answered exactly once, by id, before the next model turn."""
    for i, message in enumerate(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            wanted = sorted(c["id"] or "" for c in message.tool_calls)
            answers = []
            for later in messages[i + 1 :]:
                if not isinstance(later, ToolMessage):
                    break
                answers.append(later.tool_call_id)
            assert sorted(answers) == wanted


def check_loop_run(messages: list[BaseMessage], ran: list[str], tag: str = "loop") -> None:
    """The run as LangChain recorded it (the wire is checked by scenario.check_wire_loop)."""
    assert ran == ["same"] * scenario.RUNS
    denied = refusals(messages)
    assert [m.tool_call_id for m in denied] == [
        f"{tag}-{scenario.RUNS}",
        f"{tag}-{scenario.RUNS + 1}",
    ]
    for m in denied:
        assert m.status == "error"
        assert m.name == "search"
        scenario.assert_loop_refusal(str(m.content))
    assert all(m.status == "success" for m in tool_messages(messages)[: scenario.RUNS])
    assert_valid_history(messages)
    final = messages[-1]
    assert isinstance(final, AIMessage) and final.text == scenario.GIVE_UP


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_loop_is_refused_at_the_sixth_copy_sync(provider: str) -> None:
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []
    with fake(after=scenario.wire_loop(fake.results_of)) as server:
        agent = create_agent(
            chat_model(server), [search_tool(ran)], middleware=[CircuitBreakerMiddleware()]
        )
        out = agent.invoke({"messages": [HumanMessage("find it")]})
    check_loop_run(out["messages"], ran)
    scenario.check_wire_loop(server, error_flag)
    assert "circuit_breaker_agent" not in out  # private state stays out of the output


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_loop_is_refused_at_the_sixth_copy_async_streamed(provider: str) -> None:
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []
    with fake(after=scenario.wire_loop(fake.results_of)) as server:
        model = chat_model(server, streaming=True)
        agent = create_agent(model, [search_tool(ran)], middleware=[CircuitBreakerMiddleware()])
        out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("find it")]}))
    check_loop_run(out["messages"], ran)
    scenario.check_wire_loop(server, error_flag)
    assert all(body.get("stream") for body in server.model_requests)


def test_parallel_identical_calls_in_one_turn() -> None:
    # Seven identical calls in one model turn: the tool node runs them concurrently; five
    # run, the 6th and 7th are refused. (A third refusal would stop the agent:
    # tests/test_integration_stop.py.)
    ran: list[str] = []

    def respond(messages: list[BaseMessage]) -> AIMessage:
        if tool_messages(messages):
            return AIMessage(content="done")
        calls = [
            {"name": "search", "args": {"query": "same"}, "id": f"p{i}"}
            for i in range(scenario.RUNS + 2)
        ]
        return AIMessage(content="", tool_calls=calls)

    agent = create_agent(
        ScriptedModel(respond=respond), [search_tool(ran)], middleware=[CircuitBreakerMiddleware()]
    )
    for run in (agent.invoke, lambda x: asyncio.run(agent.ainvoke(x))):
        ran.clear()
        out = run({"messages": [HumanMessage("go")]})
        assert len(ran) == scenario.RUNS
        assert len(refusals(out["messages"])) == 2
        assert_valid_history(out["messages"])


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_healthy_edit_test_cycle_is_never_refused(provider: str) -> None:
    fake, _ = PROVIDERS[provider]
    edits = 15
    script = scenario.edit_test_cycle(edits)
    ran: list[str] = []
    run_tests, edit = (tool(f) for f in scenario.edit_test_functions(ran))
    with fake(after=scenario.wire_script(fake.results_of, script, "all green")) as server:
        agent = create_agent(
            chat_model(server), [run_tests, edit], middleware=[CircuitBreakerMiddleware()]
        )
        out = agent.invoke({"messages": [HumanMessage("fix the bug")]})
    scenario.check_wire_healthy(server, script)
    assert ran.count("test") == edits + 1
    assert out["messages"][-1].text == "all green"


def test_two_agents_sharing_a_middleware_have_separate_state() -> None:
    middleware = CircuitBreakerMiddleware()
    ran_a: list[str] = []
    ran_b: list[str] = []
    a = create_agent(looping("loop"), [search_tool(ran_a)], middleware=[middleware])
    b = create_agent(looping("loop"), [search_tool(ran_b)], middleware=[middleware])

    async def both() -> Any:
        go = {"messages": [HumanMessage("go")]}
        return await asyncio.gather(a.ainvoke(go), b.ainvoke(go))

    out_a, out_b = asyncio.run(both())
    check_loop_run(out_a["messages"], ran_a)
    check_loop_run(out_b["messages"], ran_b)


def test_subagent_called_from_a_tool_has_its_own_state() -> None:
    # The child runs inside the parent's tool, with the parent's thread id and config.
    # With reset_on_new_call=False every copy in the window counts, so a shared state would
    # trip the child at its 2nd call. The parent searches 4 times, then delegates to a child
    # that loops on the same search: the child must get its own 5.
    config = Config(reset_on_new_call=False, reset_on_user_prompt=False)
    middleware = CircuitBreakerMiddleware(config=config)
    ran: list[str] = []
    child = create_agent(looping("c"), [search_tool(ran)], middleware=[middleware])
    child_out: list[Any] = []

    @tool
    def delegate(task: str) -> str:
        """Hand a task to a subagent."""
        out = child.invoke({"messages": [HumanMessage(task)]})
        child_out.append(out)
        return str(out["messages"][-1].content)

    def parent_model(messages: list[BaseMessage]) -> AIMessage:
        n = len(tool_messages(messages))
        if n < 4:
            return call("search", {"query": "same"}, f"p{n}")
        if n == 4:
            return call("delegate", {"task": "dig"}, "d")
        return AIMessage(content="parent done")

    parent = create_agent(
        ScriptedModel(respond=parent_model),
        [search_tool(ran), delegate],
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    out = parent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t1"}})
    assert refusals(out["messages"]) == []
    assert len(ran) == 4 + scenario.RUNS
    check_loop_run(child_out[0]["messages"], ["same"] * scenario.RUNS, tag="c")
    assert out["messages"][-1].content == "parent done"


def test_new_invocation_resets_unless_configured_not_to() -> None:
    thread = {"configurable": {"thread_id": "t1"}}
    ran: list[str] = []

    # reset_on_user_prompt=False: the count follows the checkpointed thread.
    keep = CircuitBreakerMiddleware(CircuitBreaker(Config(reset_on_user_prompt=False)))
    agent = create_agent(
        looping("loop", 1), [search_tool(ran)], middleware=[keep], checkpointer=InMemorySaver()
    )
    agent.invoke({"messages": [HumanMessage("go")]}, thread)
    assert len(ran) == scenario.RUNS
    out = agent.invoke({"messages": [HumanMessage("again")]}, thread)
    assert len(ran) == scenario.RUNS  # the first call of the new turn is refused straight away
    assert [m.tool_call_id for m in refusals(this_turn(out["messages"]))] == ["loop-0"]

    # The default: a new invocation is a new user turn, and nothing is left behind.
    ran.clear()
    fresh = CircuitBreakerMiddleware()
    agent = create_agent(
        looping("loop", 1), [search_tool(ran)], middleware=[fresh], checkpointer=InMemorySaver()
    )
    agent.invoke({"messages": [HumanMessage("go")]}, thread)
    agent.invoke({"messages": [HumanMessage("again")]}, thread)
    assert len(ran) == 2 * scenario.RUNS
    assert list(fresh.breaker.store.agents()) == []


@pytest.mark.parametrize("poller", [scenario.MOVING, scenario.FROZEN, scenario.INTERLEAVED])
def test_results_as_progress(poller: scenario.Poller) -> None:
    def go(server: ScriptedServer, tools: list[Any]) -> None:
        middleware = CircuitBreakerMiddleware(config=poller.config)
        agent = create_agent(chat_model(server), tools, middleware=[middleware])
        agent.invoke({"messages": [HumanMessage("watch job 7")]})

    poller.drive(FakeAnthropic, tool, go, error_flag=True)
