"""smolagents drives the breaker through its agents' tool calls: real `ToolCallingAgent`
and `CodeAgent` runs with smolagents' `OpenAIServerModel` (the OpenAI client, Chat
Completions) over the wire to a scripted model server on 127.0.0.1.

smolagents sends no tool messages (it writes calls and results into the text of its
messages): support/fake_smolagents.py reads them in that form. A ToolCallingAgent ends
its run by calling `final_answer`: the scripted model's answers are sent as that call.
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config
from support import agent_scenarios as scenario
from support.fake_openai import FakeOpenAI
from support.fake_smolagents import FakeSmolagents, answering, smolagents_results
from support.scripted_server import ToolResult, tool_call

try:
    from smolagents import CodeAgent, OpenAIServerModel, ToolCallingAgent, tool

    from dsh_circuit_breaker.integrations.smolagents import (
        CircuitBreakerGuard,
        CircuitBreakerStop,
        GuardedTool,
        guard,
        stop_reason,
    )

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False


@pytest.fixture(autouse=True)
def _need_smolagents(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "smolagents (extra [smolagents]), openai")
    scenario.go_offline(monkeypatch)


def model(server: FakeOpenAI) -> Any:
    return OpenAIServerModel(model_id="gpt-4o", api_base=server.url, api_key="dummy")


def as_tool(function: Any) -> Any:
    """A plain function of agent_scenarios as a smolagents tool (its docstring needs its
    arguments described)."""
    names = function.__code__.co_varnames[: function.__code__.co_argcount]
    function.__doc__ = f"{function.__doc__}\n\n    Args:\n" + "".join(
        f"        {name}: the {name}\n" for name in names
    )
    return tool(function)


def search_tools(ran: list[str]) -> list[Any]:
    return [as_tool(scenario.search_function(ran))]


def web_tools(ran: list[str]) -> list[Any]:
    search = scenario.search_function(ran)

    def web_search(query: str) -> str:
        """Search the web."""
        return search(query)

    return [as_tool(search), as_tool(web_search)]


def agent(server: FakeOpenAI, tools: list[Any], **kw: Any) -> Any:
    return ToolCallingAgent(tools=tools, model=model(server), verbosity_level=0, **kw)


@pytest.mark.parametrize("stream", [False, True])
def test_loop_is_refused_at_the_sixth_copy(stream: bool) -> None:
    ran: list[str] = []
    with FakeSmolagents(after=answering(scenario.wire_loop(smolagents_results))) as server:
        a = guard(agent(server, search_tools(ran)))
        if stream:
            steps = list(a.run("find it", stream=True))
            out = steps[-1].output
        else:
            out = a.run("find it")
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_loop(server, False)
    assert out == scenario.GIVE_UP


def test_healthy_edit_test_cycle_is_never_refused() -> None:
    script = scenario.edit_test_cycle(15)
    ran: list[str] = []
    respond = answering(scenario.wire_script(smolagents_results, script, "all green"))
    with FakeSmolagents(after=respond) as server:
        tools = [as_tool(f) for f in scenario.edit_test_functions(ran)]
        out = guard(agent(server, tools, max_steps=40)).run("fix the bug")
    scenario.check_wire_healthy(server, script)
    assert ran.count("test") == 16
    assert out == "all green"


@pytest.mark.parametrize("stream", [False, True])
def test_a_looping_agent_is_stopped_at_its_third_refusal(stream: bool) -> None:
    ran: list[str] = []
    with FakeSmolagents(after=answering(scenario.wire_loop_forever(smolagents_results))) as server:
        a = guard(agent(server, search_tools(ran), max_steps=50))
        with pytest.raises(CircuitBreakerStop) as stopped:
            out = a.run("find it", stream=stream)
            if stream:
                list(out)
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_stop(server, False)
    assert stop_reason(stopped.value) == scenario.STOP_REASON == str(stopped.value)
    # The refusal answered the 9th call: it is in the agent's memory, as any result is.
    assert a.memory.steps[-1].observations.startswith(scenario.DENIED)


def test_stop_after_denials_zero_keeps_the_plain_refusals() -> None:
    ran: list[str] = []
    respond = answering(scenario.wire_loop(smolagents_results, give_up_after=5))
    with FakeSmolagents(after=respond) as server:
        a = guard(agent(server, search_tools(ran)), config=Config(stop_after_denials=0))
        out = a.run("find it")
    assert ran == ["same"] * scenario.RUNS
    assert len(server.model_requests) == scenario.RUNS + 5 + 1  # five refusals, then the answer
    assert out == scenario.GIVE_UP


def test_a_web_search_budget_of_12_refuses_the_13th() -> None:
    ran: list[str] = []
    with FakeSmolagents(after=answering(scenario.wire_searching(smolagents_results))) as server:
        a = guard(agent(server, web_tools(ran)), config=Config(tool_limits={"web_search": 12}))
        out = a.run("search")
    assert ran == [f"topic {n}" for n in range(12)]
    scenario.check_wire_budget(server, scenario.BUDGET_TEXT, False)
    assert out == scenario.DONE_SEARCHING


def test_a_managed_agent_has_its_own_state_and_its_stop_ends_only_its_run() -> None:
    # The manager searches 4 times, then hands a task to a managed agent that loops on the
    # same search forever. reset_on_new_call=False: a shared state would refuse the
    # member's 2nd call; it must get its own 5, then be stopped; the manager goes on.
    ran: list[str] = []

    def is_member(body: dict[str, Any]) -> bool:
        return "searcher" not in {t["function"]["name"] for t in body.get("tools") or []}

    def respond(body: dict[str, Any]) -> Any:
        results = smolagents_results(body)
        if is_member(body):
            return tool_call(*scenario.loop_call("m", len(results)))
        if len(results) < 4:
            return tool_call(*scenario.loop_call("p", len(results)))
        if len(results) == 4:
            return tool_call("searcher", {"task": "dig"}, "d")
        return "team done"

    def handed_back(body: dict[str, Any]) -> list[ToolResult]:
        return [r for r in smolagents_results(body) if "team member 'searcher'" in r.text]

    with FakeSmolagents(after=answering(respond)) as server:
        member = agent(server, search_tools(ran), name="searcher", description="Searches.")
        manager = agent(server, search_tools(ran), managed_agents=[member])
        g = CircuitBreakerGuard(config=Config(reset_on_new_call=False))
        g.guard(manager)
        out = manager.run("go")
    assert ran == ["same"] * (4 + scenario.RUNS)  # 4 for the manager, 5 for the member
    assert not any(
        scenario.is_refusal(server.result_in_next_request(f"p-{n}").text) for n in range(4)
    )
    scenario.assert_loop_refusal(server.result_in_next_request(f"m-{scenario.RUNS}").text)
    assert len([b for b in server.model_requests if is_member(b)]) == scenario.RUNS + 3
    # The manager reads the member's stop as smolagents' error for a team member's call
    # (a call that raised: its step keeps the error, not the call).
    (error,) = handed_back(server.model_requests[-1])
    assert error.is_error and scenario.STOP_REASON in error.text
    assert out == "team done"
    assert list(g.breaker.store.agents()) == []  # each run's state dropped at its end


def test_a_new_run_starts_fresh_unless_state_should_follow_the_agent() -> None:
    def two_runs(config: Config) -> list[str]:
        ran: list[str] = []
        respond = answering(scenario.wire_loop(smolagents_results, give_up_after=1))
        with FakeSmolagents(after=respond) as server:
            a = guard(agent(server, search_tools(ran)), CircuitBreaker(config))
            a.run("go")
            a.run("again")
        return ran

    assert len(two_runs(Config())) == 2 * scenario.RUNS  # each run its own 5
    assert len(two_runs(Config(reset_on_user_prompt=False))) == scenario.RUNS


# -- CodeAgent: the tools are called from the code the model writes ---------------------
def code_turn(body: dict[str, Any]) -> Any:
    """A CodeAgent's looping model: the same search in a snippet, step after step, up to
    BOUND steps."""
    steps = len(smolagents_results(body))
    if steps >= scenario.BOUND:
        return f"<code>\nfinal_answer({scenario.UNBOUNDED!r})\n</code>"
    return "Thought: search again.\n<code>\nprint(search(query='same'))\n</code>"


def test_a_code_agent_is_refused_at_the_sixth_copy_and_stopped_at_its_third_refusal() -> None:
    ran: list[str] = []
    with FakeSmolagents(after=code_turn) as server:
        a = guard(CodeAgent(tools=search_tools(ran), model=model(server), verbosity_level=0))
        assert isinstance(a.tools["search"], GuardedTool)
        with pytest.raises(CircuitBreakerStop) as stopped:
            a.run("find it", max_steps=50)
    assert ran == ["same"] * scenario.RUNS
    assert stop_reason(stopped.value) == scenario.STOP_REASON
    results = server.tool_results()
    assert len(server.model_requests) == scenario.RUNS + 3 and len(results) == scenario.RUNS + 2
    assert all("results for same" in r.text and not r.is_error for r in results[: scenario.RUNS])
    for refused in results[scenario.RUNS :]:
        # smolagents' execution error for the snippet, the breaker's text in it.
        assert refused.is_error and "due to: ToolCallRefused: " + scenario.DENIED in refused.text
        scenario.assert_loop_refusal(refused.text.split("ToolCallRefused: ", 1)[1])
    assert server.errors == []


@pytest.mark.parametrize("poller", [scenario.MOVING, scenario.FROZEN, scenario.INTERLEAVED])
def test_results_as_progress(poller: scenario.Poller) -> None:
    ran: list[str] = []
    tools = [as_tool(f) for f in poller.functions(ran)]
    with FakeSmolagents(after=answering(poller.wire(smolagents_results))) as server:
        guard(agent(server, tools, max_steps=40), config=poller.config).run("go")
    poller.check_wire(server, False)
    poller.check_ran(ran)
