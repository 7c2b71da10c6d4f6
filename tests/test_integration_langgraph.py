"""LangGraph drives the breaker through a hand-built `StateGraph` whose prebuilt `ToolNode`
carries `CircuitBreakerToolWrapper`: the model node calls LangChain's real provider
clients (langchain-anthropic's ChatAnthropic, langchain-openai's ChatOpenAI on Chat
Completions) against a scripted model server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
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
def test_loop_is_refused_at_the_sixth_copy(provider: str, mode: str) -> None:
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []
    with fake(after=scenario.wire_loop(fake.results_of)) as server:
        out = run(
            graph(chat_model(server), [search_tool(ran)], CircuitBreakerToolWrapper()), mode=mode
        )
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_loop(server, error_flag)
    denied = refusals(out["messages"])
    assert [m.tool_call_id for m in denied] == [
        f"loop-{scenario.RUNS}",
        f"loop-{scenario.RUNS + 1}",
    ]
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
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_stop(server, error_flag)
    # The graph ended normally (END), its last message the refusal that stopped it.
    last = out["messages"][-1]
    assert isinstance(last, ToolMessage) and last.tool_call_id == f"loop-{scenario.RUNS + 2}"
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
    assert ran == ["same"] * scenario.RUNS
    assert len(refusals(out["messages"])) == 5
    assert out["messages"][-1].text == scenario.GIVE_UP
    assert stop_reason(out) is None
    assert len(server.model_requests) == scenario.RUNS + 5 + 1  # five refusals, then the answer


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
    # 2nd call; the child must get its own 5.
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
    assert ran == ["same"] * (4 + scenario.RUNS)  # 4 for the parent, 5 for the child
    assert server.result_in_next_request(f"c-{scenario.RUNS}").text.startswith(scenario.DENIED)
    assert not any(
        scenario.is_refusal(server.result_in_next_request(f"p-{n}").text) for n in range(4)
    )
    assert out["messages"][-1].text == scenario.GIVE_UP


def test_a_new_prompt_starts_fresh_unless_configured_not_to() -> None:
    thread = {"configurable": {"thread_id": "t1"}}
    for reset, runs in ((True, 2 * scenario.RUNS), (False, scenario.RUNS)):
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


# -- issue 32 with the default config: results count, the 6th copy is refused, cycles ----
# Each runs the graph of LangGraph's docs through the real chat model client of each
# provider, guarded by CircuitBreakerToolWrapper() with no config at all.


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_default_config_a_moving_poll_runs_past_six_copies(provider: str) -> None:
    fake, error_flag = PROVIDERS[provider]

    def go(server: ScriptedServer, tools: list[Any]) -> None:
        run(graph(chat_model(server), tools, CircuitBreakerToolWrapper()), "watch job 7")

    assert scenario.POLLS > scenario.LIMIT  # all ten identical polls run
    scenario.MOVING.drive(fake, tool, go, error_flag)


PROBE = "echo cbprobe4"


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_default_config_the_probes_sixth_identical_call_is_refused(provider: str) -> None:
    """The DSH probe: the model asks for `echo cbprobe4` ten times (a new description each
    time, which the breaker ignores), whatever it is told. Calls 1 to 5 run; the 6th and
    7th are refused with the count of copies; the 8th, the third refusal in a row, stops
    the run: no model request follows it."""
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []

    @tool
    def bash(command: str, description: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return "cbprobe4"

    def respond(body: dict[str, Any]) -> Any:
        n = len(fake.results_of(body))
        args = {"command": PROBE, "description": f"step {n}"}
        return scenario.tool_call("bash", args, f"probe-{n}") if n < 10 else "ten calls made"

    with fake(after=respond) as server:
        out = run(graph(chat_model(server), [bash], CircuitBreakerToolWrapper()), "probe")
    assert ran == [PROBE] * 5
    denial = DEFAULT_MESSAGES["duplicate"].format(tool="bash", count=6, limit=6)
    for n in range(7):
        result = server.result_in_next_request(f"probe-{n}")
        assert result.text == ("cbprobe4" if n < 5 else denial), (n, result)
        assert result.is_error == (n >= 5 and error_flag), (n, result)
    assert len(server.model_requests) == 8  # none after the 8th call: it stopped the run
    stop = DEFAULT_MESSAGES["stop"].format(tool="bash", kind="duplicate", count=3, limit=3)
    assert stop_reason(out) == stop
    assert out["messages"][-1].tool_call_id == "probe-7"
    assert server.errors == []


CYCLE_GIVE_UP = "the same two calls were refused; stopping here."


@pytest.mark.parametrize("moving", [False, True], ids=["frozen", "moving"])
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_default_config_a_frozen_a_b_cycle_is_refused_at_its_7th_call(
    provider: str, moving: bool
) -> None:
    """The agent alternates two tools, order status then a payment retry, four rounds
    (eight calls). Frozen, each returns what it returned the round before: rule 4 never
    counts (each call is new after the other), but the frozen cycle refuses the 7th call,
    the one that would start a fourth round, and the model reads why. Moving (the status
    changes every round), the cycle is doing something and all eight run."""
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []

    @tool
    def order_status(order: str) -> str:
        """Look up an order."""
        ran.append("status")
        step = ran.count("status") if moving else 1
        return f"order {order}: payment failed, {step} items reserved"

    @tool
    def retry_payment(order: str) -> str:
        """Retry an order's payment."""
        ran.append("retry")
        return "declined: card expired"

    calls = [
        ("order_status" if k % 2 == 0 else "retry_payment", {"order": "17"}, f"c-{k}")
        for k in range(8)
    ]

    def respond(body: dict[str, Any]) -> Any:
        results = fake.results_of(body)
        if results and scenario.is_refusal(results[-1].text):
            return CYCLE_GIVE_UP
        n = len(results)
        return scenario.tool_call(*calls[n]) if n < len(calls) else "all eight ran"

    tools = [order_status, retry_payment]
    with fake(after=respond) as server:
        out = run(graph(chat_model(server), tools, CircuitBreakerToolWrapper()), "pay order 17")
    if moving:
        assert ran == ["status", "retry"] * 4
        assert not any(scenario.is_refusal(r.text) for r in server.tool_results())
        assert out["messages"][-1].text == "all eight ran"
    else:
        assert ran == ["status", "retry"] * 3  # the 7th never reached the tool
        refused = server.result_in_next_request("c-6")
        cycle = render(DEFAULT_MESSAGES["cycle"], "order_status", "duplicate", 3, 3, 2)
        assert refused.text == cycle and refused.is_error == error_flag
        assert cycle.startswith("Circuit breaker: NOT run, a frozen cycle (the same 2 calls,")
        assert [r.call_id for r in server.tool_results()] == [f"c-{k}" for k in range(7)]
        assert out["messages"][-1].text == CYCLE_GIVE_UP
    assert stop_reason(out) is None
    assert server.errors == []


@pytest.mark.parametrize("earlier", [0, 1], ids=["batch-of-7", "one-then-batch-of-6"])
def test_default_config_parallel_copies_are_judged_with_no_result(earlier: int) -> None:
    """Identical polls issued in one model turn (OpenAI's parallel tool calls), after
    `earlier` polls made one at a time: seven copies in all. The tool node runs at most as
    many calls at once as may run (`max_concurrency`), and a barrier holds each running
    poll until all of them run, so the refused copies are judged after the batch's results
    came back. Each result moves (one more book every poll), yet none can be told from
    another copy's, so none counts as progress: the 6th copy is refused, as the 7th."""
    ran: list[str] = []
    batch = 7 - earlier
    at_once = scenario.RUNS - earlier  # the batch's copies that may run
    together = threading.Barrier(at_once, timeout=20)

    @tool
    def poll(job: str) -> str:
        """Poll a background job's status."""
        ran.append(job)
        n = len(ran)
        if n > earlier:
            together.wait()  # raises (the test fails) if they do not all run at once
        return f"job {job}: {n} books ingested"

    def respond(body: dict[str, Any]) -> Any:
        n = len(FakeOpenAI.results_of(body))
        if n < earlier:
            return scenario.tool_call("poll", {"job": "7"}, f"one-{n}")
        if n == earlier:
            return [scenario.tool_call("poll", {"job": "7"}, f"p{k}") for k in range(batch)]
        return "done"

    with FakeOpenAI(after=respond) as server:
        app = graph(chat_model(server), [poll], CircuitBreakerToolWrapper())
        out = run(app, "watch job 7", max_concurrency=at_once)
    assert len(ran) == scenario.RUNS
    sent = {r.call_id: r for r in server.tool_results()}
    assert sorted(sent) == sorted(
        [*(f"one-{n}" for n in range(earlier)), *(f"p{k}" for k in range(batch))]
    )
    denial = DEFAULT_MESSAGES["duplicate"].format(tool="poll", count=6, limit=6)
    refused = sorted(k for k, r in sent.items() if r.text == denial)
    # Copies 6 and 7: the tool node hands calls to its workers in order.
    assert refused == [f"p{k}" for k in range(at_once, batch)]
    moved = sorted(r.text for r in sent.values() if r.text != denial)
    assert moved == sorted(f"job 7: {n} books ingested" for n in range(1, scenario.RUNS + 1))
    assert stop_reason(out) is None and out["messages"][-1].text == "done"
    assert len(server.model_requests) == earlier + 2
    assert server.errors == []
