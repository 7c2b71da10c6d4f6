"""LlamaIndex agent workflows with guarded tools: real `FunctionAgent` and `AgentWorkflow`
runs with LlamaIndex's OpenAI client (Chat Completions) over the wire to a scripted model
server on 127.0.0.1. In the side venv side-llamaindex (LlamaIndex's OpenAI client cannot
install beside the test extra; see pyproject.toml).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES
from support import agent_scenarios as scenario
from support.fake_openai import FakeOpenAI
from support.scripted_server import ScriptedServer

try:
    from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
    from llama_index.llms.openai import OpenAI

    from dsh_circuit_breaker.integrations.llamaindex import (
        LlamaIndexCircuitBreaker,
        LlamaIndexStopped,
        guard,
    )

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

pytestmark = pytest.mark.side("llamaindex")
TAG = "call_loop"
STOP_REASON = DEFAULT_MESSAGES["stop"].format(tool="search", kind="duplicate", count=3, limit=3)
BUDGET_TEXT = DEFAULT_MESSAGES["budget"].format(
    tool="web_search", kind="budget", count=12, limit=12
)


@pytest.fixture(autouse=True)
def _need_llamaindex(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "llama-index (extra [side-llamaindex])")
    scenario.go_offline(monkeypatch)


def llm(server: ScriptedServer) -> Any:
    return OpenAI(model="gpt-4o", api_key="dummy", api_base=server.url, max_retries=0)


def run(agent: Any, prompt: str, **kw: Any) -> Any:
    async def go() -> Any:
        return await asyncio.wait_for(agent.run(user_msg=prompt, **kw), 30)

    return asyncio.run(go())


def test_loop_is_refused_at_the_sixth_copy() -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop(FakeOpenAI.results_of, tag=TAG)) as server:
        agent = FunctionAgent(tools=[scenario.search_function(ran)], llm=llm(server))
        guard(agent)
        out = run(agent, "find it")
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_loop(server, False, tag=TAG)
    refused = [c for c in out.tool_calls if c.tool_output.is_error]  # LlamaIndex's error flag
    assert [c.tool_id for c in refused] == [f"{TAG}-{scenario.RUNS}", f"{TAG}-{scenario.RUNS + 1}"]
    assert str(out) == scenario.GIVE_UP


def test_healthy_edit_test_cycle_is_never_refused() -> None:
    script = [(n, a, f"call_{i}") for i, (n, a, _) in enumerate(scenario.edit_test_cycle(15))]
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_script(FakeOpenAI.results_of, script, "all green")) as s:
        agent = FunctionAgent(tools=list(scenario.edit_test_functions(ran)), llm=llm(s))
        guard(agent)
        out = run(agent, "fix the bug", max_iterations=40)
    scenario.check_wire_healthy(s, script)
    assert ran.count("test") == 16
    assert str(out) == "all green"


def test_a_looping_agent_is_stopped_at_its_third_refusal() -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop_forever(FakeOpenAI.results_of, tag=TAG)) as server:
        agent = FunctionAgent(
            name="searcher", tools=[scenario.search_function(ran)], llm=llm(server)
        )
        guard(agent)
        with pytest.raises(LlamaIndexStopped) as stopped:
            run(agent, "find it")
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_stop(server, False, tag=TAG)
    assert str(stopped.value) == STOP_REASON == stopped.value.reason
    assert stopped.value.agent is not None and stopped.value.agent.startswith("llamaindex:searcher")


def test_stop_after_denials_zero_keeps_the_plain_refusals() -> None:
    ran: list[str] = []
    respond = scenario.wire_loop(FakeOpenAI.results_of, tag=TAG, give_up_after=5)
    with FakeOpenAI(after=respond) as server:
        agent = FunctionAgent(tools=[scenario.search_function(ran)], llm=llm(server))
        guard(agent, LlamaIndexCircuitBreaker(config=Config(stop_after_denials=0)))
        out = run(agent, "find it")
    assert ran == ["same"] * scenario.RUNS
    assert len(server.model_requests) == scenario.RUNS + 5 + 1  # five refusals, then the answer
    assert str(out) == scenario.GIVE_UP


def test_a_web_search_budget_of_12_refuses_the_13th() -> None:
    ran: list[str] = []
    search = scenario.search_function(ran)

    def web_search(query: str) -> str:
        """Search the web."""
        return search(query)

    with FakeOpenAI(after=scenario.wire_searching(FakeOpenAI.results_of, "call_s")) as server:
        agent = FunctionAgent(tools=[web_search], llm=llm(server))
        guard(agent, LlamaIndexCircuitBreaker(config=Config(tool_limits={"web_search": 12})))
        out = run(agent, "search")
    assert ran == [f"topic {n}" for n in range(12)]
    scenario.check_wire_budget(server, BUDGET_TEXT, False, tag="call_s")
    assert str(out) == scenario.DONE_SEARCHING


def test_each_workflow_agent_has_its_own_state_and_each_run_starts_fresh() -> None:
    # The first agent searches 4 times and hands off to the second, which searches 4 times;
    # every copy counts (reset_on_new_call=False), so a shared state would refuse the
    # second agent's 2nd search. A second run starts both afresh.
    ran: list[str] = []

    def respond(body: dict[str, Any]) -> Any:
        results = FakeOpenAI.results_of(body)
        run_tag = "again" if "again" in json.dumps(body) else "go"  # call ids are unique
        mine = [r for r in results if r.call_id.startswith(f"call_{run_tag}_b")]
        if not any(r.call_id == f"call_{run_tag}_h" for r in results):
            if len(results) < 4:
                call = ("search", {"query": "same"}, f"call_{run_tag}_a{len(results)}")
            else:
                call = ("handoff", {"to_agent": "second", "reason": "dig"}, f"call_{run_tag}_h")
            return scenario.tool_call(*call)
        if len(mine) < 4:
            return scenario.tool_call("search", {"query": "same"}, f"call_{run_tag}_b{len(mine)}")
        return "team done"

    with FakeOpenAI(after=respond) as server:
        agents = [
            FunctionAgent(
                name=name,
                description=f"the {name} searcher",
                tools=[scenario.search_function(ran)],
                llm=llm(server),
                can_handoff_to=["second"] if name == "first" else [],
            )
            for name in ("first", "second")
        ]
        team = AgentWorkflow(agents=agents, root_agent="first")
        shared = guard(team, LlamaIndexCircuitBreaker(config=Config(reset_on_new_call=False)))
        assert str(run(team, "go")) == "team done"
        assert len(ran) == 8
        assert str(run(team, "again")) == "team done"
    assert len(ran) == 16
    assert not any(scenario.is_refusal(r.text) for r in server.tool_results())
    # Each agent in each run: two runs of two agents.
    assert sorted(a.split(":")[1] for a, _ in shared.breaker.store.agents()) == [
        "first",
        "first",
        "second",
        "second",
    ]


@pytest.mark.parametrize("poller", [scenario.MOVING, scenario.FROZEN, scenario.INTERLEAVED])
def test_results_as_progress(poller: scenario.Poller) -> None:
    def go(server: Any, tools: list[Any]) -> None:
        agent = FunctionAgent(tools=tools, llm=llm(server))
        guard(agent, LlamaIndexCircuitBreaker(config=poller.config))
        run(agent, "go", max_iterations=40)

    poller.drive(FakeOpenAI, lambda f: f, go, error_flag=False)  # chat completions: no flag
