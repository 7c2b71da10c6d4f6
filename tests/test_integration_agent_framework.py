"""Microsoft Agent Framework drives the breaker through its middleware: real `Agent` runs
with the framework's OpenAI Chat Completions client (agent-framework-openai) over the wire
to a scripted model server on 127.0.0.1. Chat Completions has no error flag on a tool
result, so a refusal is told apart by its text."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES
from support import agent_scenarios as scenario
from support.fake_openai import FakeOpenAI

try:
    from agent_framework import Agent
    from agent_framework.openai import OpenAIChatCompletionClient

    from dsh_circuit_breaker.integrations.agent_framework import (
        circuit_breaker_middleware,
        stop_reason,
    )

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

STOP_REASON = DEFAULT_MESSAGES["stop"].format(tool="search", kind="duplicate", count=3, limit=3)
BUDGET_TEXT = DEFAULT_MESSAGES["budget"].format(
    tool="web_search", kind="budget", count=12, limit=12
)


@pytest.fixture(autouse=True)
def _need_agent_framework(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "agent-framework-core (extra [agent-framework]), agent-framework-openai")
    scenario.go_offline(monkeypatch)


def agent(server: FakeOpenAI, tools: list[Any], middleware: Any, **kw: Any) -> Any:
    client = OpenAIChatCompletionClient(model="gpt-4o", api_key="dummy", base_url=server.url)
    return Agent(client=client, tools=tools, middleware=middleware, **kw)


def run(a: Any, prompt: str, **kw: Any) -> Any:
    return asyncio.run(a.run(prompt, **kw))


def web_tools(ran: list[str]) -> list[Any]:
    search = scenario.search_function(ran)

    def web_search(query: str) -> str:
        """Search the web."""
        return search(query)

    return [search, web_search]


def test_loop_is_refused_at_the_sixth_copy() -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop(FakeOpenAI.results_of)) as server:
        out = run(
            agent(server, [scenario.search_function(ran)], circuit_breaker_middleware()), "find it"
        )
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_loop(server, False)
    assert out.text == scenario.GIVE_UP
    assert stop_reason(out) is None


def test_healthy_edit_test_cycle_is_never_refused() -> None:
    script = scenario.edit_test_cycle(15)
    ran: list[str] = []
    with FakeOpenAI(
        after=scenario.wire_script(FakeOpenAI.results_of, script, "all green")
    ) as server:
        out = run(
            agent(server, list(scenario.edit_test_functions(ran)), circuit_breaker_middleware()),
            "fix the bug",
        )
    scenario.check_wire_healthy(server, script)
    assert ran.count("test") == 16
    assert out.text == "all green"


def test_a_looping_agent_is_stopped_at_its_third_refusal() -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop_forever(FakeOpenAI.results_of)) as server:
        out = run(
            agent(server, [scenario.search_function(ran)], circuit_breaker_middleware()), "find it"
        )
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_stop(server, False)
    assert stop_reason(out) == STOP_REASON
    # The refusal answers the 8th call: the response's last message is that result.
    (result,) = out.messages[-1].contents
    assert result.type == "function_result" and result.call_id == f"loop-{scenario.RUNS + 2}"
    scenario.assert_loop_refusal(str(result.result))


def test_stop_after_denials_zero_keeps_the_plain_refusals() -> None:
    ran: list[str] = []
    middleware = circuit_breaker_middleware(config=Config(stop_after_denials=0))
    with FakeOpenAI(after=scenario.wire_loop(FakeOpenAI.results_of, give_up_after=5)) as server:
        out = run(agent(server, [scenario.search_function(ran)], middleware), "find it")
    assert ran == ["same"] * scenario.RUNS
    assert len(server.model_requests) == scenario.RUNS + 5 + 1  # five refusals, then the answer
    assert out.text == scenario.GIVE_UP and stop_reason(out) is None


def test_a_web_search_budget_of_12_refuses_the_13th() -> None:
    ran: list[str] = []
    middleware = circuit_breaker_middleware(config=Config(tool_limits={"web_search": 12}))
    with FakeOpenAI(after=scenario.wire_searching(FakeOpenAI.results_of)) as server:
        out = run(agent(server, web_tools(ran), middleware), "search")
    assert ran == [f"topic {n}" for n in range(12)]
    scenario.check_wire_budget(server, BUDGET_TEXT, False)
    assert out.text == scenario.DONE_SEARCHING


def test_an_agent_used_as_a_tool_has_its_own_state_and_its_stop_ends_only_its_run() -> None:
    # The parent searches 4 times, then calls a child agent (as_tool) that loops forever on
    # the same search. reset_on_new_call=False: a shared state would refuse the child's 2nd.
    ran: list[str] = []
    middleware = circuit_breaker_middleware(CircuitBreaker(Config(reset_on_new_call=False)))

    def is_child(body: dict[str, Any]) -> bool:
        return "delegate" not in str(body.get("tools"))

    def respond(body: dict[str, Any]) -> Any:
        results = FakeOpenAI.results_of(body)
        if is_child(body):
            return scenario.tool_call(*scenario.loop_call("c", len(results)))
        if len(results) < 4:
            return scenario.tool_call(*scenario.loop_call("p", len(results)))
        if len(results) == 4:
            return scenario.tool_call("delegate", {"task": "dig"}, "d")
        return "parent done"

    with FakeOpenAI(after=respond) as server:
        child = agent(server, [scenario.search_function(ran)], middleware, name="child")
        tool = child.as_tool(
            name="delegate", description="Hand a task to a subagent.", arg_name="task"
        )
        parent = agent(server, [scenario.search_function(ran), tool], middleware, name="parent")
        out = run(parent, "go")
    assert ran == ["same"] * (4 + scenario.RUNS)  # 4 for the parent, 5 for the child
    child_requests = [b for b in server.model_requests if is_child(b)]
    assert len(child_requests) == scenario.RUNS + 3  # the child was stopped after its 8th call
    scenario.assert_loop_refusal(server.result_in_next_request(f"c-{scenario.RUNS}").text)
    assert out.text == "parent done" and stop_reason(out) is None


def two_runs_in_one_session(middleware: Any) -> list[str]:
    """Two runs of one agent in one session (one event loop: the client keeps its
    connections); the looping model gives up at its first refusal in each."""
    ran: list[str] = []
    loop = scenario.wire_loop(FakeOpenAI.results_of, give_up_after=1)

    def this_turn(body: dict[str, Any]) -> Any:
        messages = body["messages"]
        start = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        return loop(dict(body, messages=messages[start:]))

    with FakeOpenAI(after=this_turn) as server:
        a = agent(server, [scenario.search_function(ran)], middleware)

        async def both() -> None:
            session = a.create_session()
            await a.run("go", session=session)
            await a.run("again", session=session)

        asyncio.run(both())
    return ran


def test_each_run_starts_fresh_unless_state_should_follow_the_session() -> None:
    keep = circuit_breaker_middleware(config=Config(reset_on_user_prompt=False))
    # The second run's first call is refused.
    assert len(two_runs_in_one_session(keep)) == scenario.RUNS
    fresh = circuit_breaker_middleware()
    assert len(two_runs_in_one_session(fresh)) == 2 * scenario.RUNS
    assert list(fresh[0].breaker.store.agents()) == []  # each run's state dropped at its end


@pytest.mark.parametrize("poller", [scenario.MOVING, scenario.FROZEN])
def test_results_as_progress(poller: scenario.Poller) -> None:
    def go(server: Any, tools: list[Any]) -> None:
        run(agent(server, tools, circuit_breaker_middleware(config=poller.config)), "go")

    poller.drive(FakeOpenAI, lambda f: f, go, error_flag=False)
