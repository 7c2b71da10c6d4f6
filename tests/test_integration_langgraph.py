"""LangGraph drives the breaker through a hand-built `StateGraph` whose prebuilt `ToolNode`
carries `CircuitBreakerToolWrapper`: the model node calls LangChain's real provider
clients (langchain-anthropic's ChatAnthropic, langchain-openai's ChatOpenAI on Chat
Completions) against a scripted model server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.messages import DEFAULT_MESSAGES
from support import agent_scenarios as scenario
from support.fake_anthropic import FakeAnthropic
from support.fake_openai import FakeOpenAI
from support.scripted_server import ScriptedServer

try:
    from langchain_anthropic import ChatAnthropic
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.runnables import RunnableLambda
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from dsh_circuit_breaker.integrations import langgraph as cb_langgraph
    from dsh_circuit_breaker.integrations.langgraph import (
        CircuitBreakerToolWrapper,
        after_tools,
        stop_reason,
    )

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

PROVIDERS = {"anthropic": (FakeAnthropic, True), "openai": (FakeOpenAI, False)}
STOP_REASON = DEFAULT_MESSAGES["stop"].format(tool="search", kind="duplicate", count=3, limit=3)
BUDGET_TEXT = DEFAULT_MESSAGES["budget"].format(
    tool="web_search", kind="budget", count=12, limit=12
)


@pytest.fixture(autouse=True)
def _need_langgraph(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "langgraph (extra [langgraph]), langchain-anthropic, langchain-openai")
    scenario.go_offline(monkeypatch)


def chat_model(server: ScriptedServer) -> Any:
    common: dict[str, Any] = {"api_key": "dummy", "max_retries": 0, "timeout": 10}
    if isinstance(server, FakeAnthropic):
        return ChatAnthropic(model="claude-sonnet-4-5", base_url=server.url, **common)  # type: ignore[call-arg]
    return ChatOpenAI(model="fake-model", base_url=server.url, **common)


def graph(model: Any, tools: list[Any], guard: Any, **compile: Any) -> Any:
    """The ReAct loop of LangGraph's docs: agent -> tools (tools_condition), tools -> agent
    through `after_tools` so that a stop ends the run."""
    bound = model.bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    async def aagent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", RunnableLambda(agent, afunc=aagent))
    g.add_node("tools", guard.tool_node(tools))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_conditional_edges("tools", after_tools("agent"))
    return g.compile(**compile)


def search_tool(ran: list[str]) -> Any:
    return tool(scenario.search_function(ran))


def tools_for(ran: list[str]) -> list[Any]:
    search = scenario.search_function(ran)

    def web_search(query: str) -> str:
        """Search the web."""
        return search(query)

    return [tool(search), tool(web_search)]


def run(app: Any, prompt: str = "find it", mode: str = "sync", **config: Any) -> Any:
    go = {"messages": [HumanMessage(prompt)]}
    if mode == "async":
        return asyncio.run(app.ainvoke(go, config or None))
    return app.invoke(go, config or None)


def refusals(messages: list[Any]) -> list[ToolMessage]:
    return [
        m for m in messages if isinstance(m, ToolMessage) and scenario.is_refusal(str(m.content))
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_loop_is_refused_after_six(provider: str, mode: str) -> None:
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []
    with fake(after=scenario.wire_loop(fake.results_of)) as server:
        out = run(
            graph(chat_model(server), [search_tool(ran)], CircuitBreakerToolWrapper()), mode=mode
        )
    assert ran == ["same"] * 6
    scenario.check_wire_loop(server, error_flag)
    denied = refusals(out["messages"])
    assert [m.tool_call_id for m in denied] == ["loop-6", "loop-7"]
    assert all(m.status == "error" and m.artifact is None for m in denied)
    assert out["messages"][-1].text == scenario.GIVE_UP
    assert stop_reason(out) is None


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_healthy_edit_test_cycle_is_never_refused(provider: str) -> None:
    fake, _ = PROVIDERS[provider]
    script = scenario.edit_test_cycle(15)
    ran: list[str] = []
    tools = [tool(f) for f in scenario.edit_test_functions(ran)]
    with fake(after=scenario.wire_script(fake.results_of, script, "all green")) as server:
        app = graph(chat_model(server), tools, CircuitBreakerToolWrapper())
        out = run(app, "fix the bug", recursion_limit=100)
    scenario.check_wire_healthy(server, script)
    assert ran.count("test") == 16
    assert out["messages"][-1].text == "all green"


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_looping_agent_is_stopped_at_its_third_refusal(provider: str, mode: str) -> None:
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []
    checkpointer = InMemorySaver()
    thread = {"configurable": {"thread_id": "t"}}
    with fake(after=scenario.wire_loop_forever(fake.results_of)) as server:
        app = graph(
            chat_model(server),
            [search_tool(ran)],
            CircuitBreakerToolWrapper(),
            checkpointer=checkpointer,
        )
        out = run(app, mode=mode, **thread)
    assert ran == ["same"] * 6
    scenario.check_wire_stop(server, error_flag)
    # The graph ended normally (END), its last message the refusal that stopped it.
    last = out["messages"][-1]
    assert isinstance(last, ToolMessage) and last.tool_call_id == "loop-8"
    assert last.status == "error"
    scenario.assert_loop_refusal(str(last.content))
    assert stop_reason(out) == STOP_REASON
    # The checkpointed thread is complete: every call answered, so it can be continued.
    assert stop_reason(app.get_state(thread).values) == STOP_REASON


def test_stop_after_denials_zero_keeps_the_plain_refusals() -> None:
    ran: list[str] = []
    guard = CircuitBreakerToolWrapper(config=Config(stop_after_denials=0))
    with FakeAnthropic(
        after=scenario.wire_loop(FakeAnthropic.results_of, give_up_after=5)
    ) as server:
        out = run(graph(chat_model(server), [search_tool(ran)], guard), recursion_limit=100)
    assert ran == ["same"] * 6
    assert len(refusals(out["messages"])) == 5
    assert out["messages"][-1].text == scenario.GIVE_UP
    assert stop_reason(out) is None
    assert len(server.model_requests) == 12


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_web_search_budget_of_12_refuses_the_13th(provider: str) -> None:
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []
    guard = CircuitBreakerToolWrapper(config=Config(tool_limits={"web_search": 12}))
    with fake(after=scenario.wire_searching(fake.results_of)) as server:
        out = run(graph(chat_model(server), tools_for(ran), guard), recursion_limit=100)
    assert ran == [f"topic {n}" for n in range(12)]
    scenario.check_wire_budget(server, BUDGET_TEXT, error_flag)
    assert out["messages"][-1].text == scenario.DONE_SEARCHING


def test_a_subgraph_agent_has_its_own_state() -> None:
    # The parent searches 4 times, then hands over to a child agent (its own compiled graph
    # with its own ToolNode, added as a node) that loops on the same search. With
    # reset_on_new_call=False every copy counts, so a shared state would refuse the child's
    # 3rd call; the child must get its own 6.
    breaker = CircuitBreaker(Config(reset_on_new_call=False))
    ran: list[str] = []

    def respond(body: dict[str, Any]) -> Any:
        results = FakeAnthropic.results_of(body)
        child = any("child" in str(m.get("content")) for m in body["messages"][:1])
        if child:
            if sum(scenario.is_refusal(r.text) for r in results) >= 2:
                return scenario.GIVE_UP
            return scenario.tool_call(*scenario.loop_call("c", len(results)))
        if len(results) < 4:
            return scenario.tool_call(*scenario.loop_call("p", len(results)))
        return "parent hands over"

    with FakeAnthropic(after=respond) as server:
        model = chat_model(server)
        child = graph(model, [search_tool(ran)], CircuitBreakerToolWrapper(breaker))
        parent = graph(model, [search_tool(ran)], CircuitBreakerToolWrapper(breaker))

        def hand_over(state: MessagesState) -> dict[str, Any]:
            out = child.invoke({"messages": [HumanMessage("child: dig")]})
            return {"messages": [AIMessage(out["messages"][-1].text)]}

        top = StateGraph(MessagesState)
        top.add_node("parent", parent)
        top.add_node("child", hand_over)
        top.add_edge(START, "parent")
        top.add_edge("parent", "child")
        out = top.compile().invoke({"messages": [HumanMessage("go")]})
    assert ran == ["same"] * 10  # 4 for the parent, 6 for the child
    assert server.result_in_next_request("c-6").text.startswith(scenario.DENIED)
    assert not any(
        scenario.is_refusal(server.result_in_next_request(f"p-{n}").text) for n in range(4)
    )
    assert out["messages"][-1].text == scenario.GIVE_UP


def test_a_new_prompt_starts_fresh_unless_configured_not_to() -> None:
    thread = {"configurable": {"thread_id": "t1"}}
    for reset, runs in ((True, 12), (False, 6)):
        ran: list[str] = []
        guard = CircuitBreakerToolWrapper(config=Config(reset_on_user_prompt=reset))
        loop = scenario.wire_loop(FakeAnthropic.results_of, give_up_after=1)

        def respond(body: dict[str, Any], loop: Any = loop) -> Any:
            # Only this turn's results count (the history holds the first turn's).
            messages = body["messages"]
            prompts = [i for i, m in enumerate(messages) if "again" in str(m["content"])]
            return loop(dict(body, messages=messages[prompts[-1] if prompts else 0 :]))

        with FakeAnthropic(after=respond) as server:
            app = graph(chat_model(server), [search_tool(ran)], guard, checkpointer=InMemorySaver())
            run(app, "go", **thread)
            run(app, "again", **thread)
        assert len(ran) == runs, reset


def test_per_prompt_state_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cb_langgraph, "KEEP_PROMPTS", 2)
    guard = CircuitBreakerToolWrapper()
    with FakeAnthropic(
        after=scenario.wire_script(
            FakeAnthropic.results_of, [("search", {"query": "q"}, "x")], "ok"
        )
    ) as server:
        app = graph(chat_model(server), [search_tool([])], guard)
        for n in range(5):
            run(app, f"prompt {n}")
    assert len(list(guard.breaker.store.agents())) == 2


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("poller", [scenario.MOVING, scenario.FROZEN])
def test_results_as_progress(poller: scenario.Poller, mode: str) -> None:
    def go(server: ScriptedServer, tools: list[Any]) -> None:
        guard = CircuitBreakerToolWrapper(config=poller.config)
        run(graph(chat_model(server), tools, guard), "watch job 7", mode)

    poller.drive(FakeOpenAI, tool, go, error_flag=False)
