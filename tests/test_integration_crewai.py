"""CrewAI drives the breaker through its global tool-call and model-call hooks: real `Crew`
kickoffs with CrewAI's native OpenAI client (Chat Completions) over the wire to a scripted
model server on 127.0.0.1. In the side venv side-crewai (CrewAI cannot install beside the
test extra; see pyproject.toml).

CrewAI has a repeat guard of its own: the 5th call with the same arguments and the same
result ends the task (`ToolExecutionFailedError`). So the looping tool here answers a
little differently each time ("results for same in 0.ns"), only in the time it took, as a
real search does: CrewAI's guard compares the text as it is, the breaker masks durations
before comparing results, so it is the breaker that refuses the 6th call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import AgentStopped, Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES
from support import agent_scenarios as scenario
from support.fake_openai import FakeOpenAI
from support.scripted_server import ScriptedServer

try:
    from crewai import LLM, Agent, Crew, Process, Task
    from crewai.tools import tool

    from dsh_circuit_breaker.integrations.crewai import CrewAICircuitBreaker, CrewAIStopped

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

pytestmark = pytest.mark.side("crewai")
TAG = "call_loop"
STOP_REASON = DEFAULT_MESSAGES["stop"].format(tool="search", kind="duplicate", count=3, limit=3)
BUDGET_TEXT = DEFAULT_MESSAGES["budget"].format(
    tool="web_search", kind="budget", count=12, limit=12
)
CREWAI_OFFLINE = {  # CrewAI's telemetry and trace uploads, and its version check
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
}


@pytest.fixture(autouse=True)
def _need_crewai(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    require(HAVE, "crewai (extra [side-crewai])")
    scenario.go_offline(monkeypatch)
    for name, value in CREWAI_OFFLINE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path / "crewai"))


@pytest.fixture
def hooks() -> Iterator[Any]:
    with CrewAICircuitBreaker() as guard:  # CrewAI's hooks are global: out again after
        yield guard


def llm(server: ScriptedServer) -> Any:
    return LLM(model="gpt-4o", api_key="dummy", base_url=server.url, max_retries=0)


def member(server: ScriptedServer, tools: list[Any], role: str = "researcher", **kw: Any) -> Any:
    # cache=False: CrewAI's tool cache would answer a repeated call without running the
    # tool (the breaker counts and refuses it all the same, as it runs before the cache).
    return Agent(
        role=role, goal="g", backstory="b", tools=tools, llm=llm(server), cache=False, **kw
    )


def crew(server: ScriptedServer, tools: list[Any]) -> Any:
    agent = member(server, tools)
    return Crew(
        agents=[agent], tasks=[Task(description="find it", expected_output="x", agent=agent)]
    )


def looping_search(ran: list[str]) -> Any:
    @tool("search")
    def search(query: str) -> str:
        """Search the web."""
        ran.append(query)
        return f"results for {query} in 0.{len(ran)}s"

    return search


def check_loop_results(server: ScriptedServer, refused: int) -> None:
    for n in range(scenario.RUNS + refused):
        result = server.result_in_next_request(f"{TAG}-{n}")
        if n < scenario.RUNS:
            assert result.text == f"results for same in 0.{n + 1}s"
        else:
            assert result.text == DEFAULT_MESSAGES["duplicate"].format(
                tool="search", count=scenario.LIMIT, limit=scenario.LIMIT
            )
    assert server.errors == []


def test_loop_is_refused_at_the_sixth_copy(hooks: Any) -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop(FakeOpenAI.results_of, tag=TAG)) as server:
        out = crew(server, [looping_search(ran)]).kickoff()
    assert ran == ["same"] * scenario.RUNS
    check_loop_results(server, refused=2)
    assert len(server.model_requests) == scenario.RUNS + 3  # 7 calls, then the answer
    assert out.raw == scenario.GIVE_UP


def test_healthy_edit_test_cycle_is_never_refused(hooks: Any) -> None:
    script = [(n, a, f"call_{i}") for i, (n, a, _) in enumerate(scenario.edit_test_cycle(15))]
    ran: list[str] = []
    runs, edit = scenario.edit_test_functions(ran)

    def run_tests(path: str) -> str:
        """Run the tests."""
        # Each run's output differs (its time), as a real one does: CrewAI's own guard
        # ends a task at the 5th call with the same arguments and the same result, edits
        # in between or not.
        return f"{runs(path)} in 0.{len(ran)}s"

    tools = [tool("run_tests")(run_tests), tool("edit")(edit)]
    with FakeOpenAI(after=scenario.wire_script(FakeOpenAI.results_of, script, "all green")) as s:
        agent = member(s, tools, "dev", max_iter=40)  # 31 calls; the default is 25
        task = Task(description="fix the bug", expected_output="x", agent=agent)
        out = Crew(agents=[agent], tasks=[task]).kickoff()
    scenario.check_wire_healthy(s, script)
    assert ran.count("test") == 16
    assert out.raw == "all green"


def test_a_looping_agent_is_stopped_at_its_third_refusal(hooks: Any) -> None:
    ran: list[str] = []
    respond = scenario.wire_loop_forever(FakeOpenAI.results_of, tag=TAG)
    with FakeOpenAI(after=respond) as server, pytest.raises(CrewAIStopped) as stopped:
        crew(server, [looping_search(ran)]).kickoff()
    assert ran == ["same"] * scenario.RUNS
    check_loop_results(server, refused=2)
    # No retry, no request after the 8th call: CrewAI passes a HookAborted through.
    assert len(server.model_requests) == scenario.RUNS + 3
    assert str(stopped.value) == STOP_REASON == stopped.value.reason
    assert isinstance(stopped.value, AgentStopped)
    assert stopped.value.agent is not None and ":researcher:" in stopped.value.agent


def test_stop_after_denials_zero_keeps_the_plain_refusals() -> None:
    ran: list[str] = []
    respond = scenario.wire_loop(FakeOpenAI.results_of, tag=TAG, give_up_after=4)
    guard = CrewAICircuitBreaker(config=Config(stop_after_denials=0))
    with guard, FakeOpenAI(after=respond) as server:
        out = crew(server, [looping_search(ran)]).kickoff()
    assert ran == ["same"] * scenario.RUNS
    check_loop_results(server, refused=4)
    assert out.raw == scenario.GIVE_UP


def test_a_web_search_budget_of_12_refuses_the_13th() -> None:
    ran: list[str] = []

    @tool("web_search")
    def web_search(query: str) -> str:
        """Search the web."""
        ran.append(query)
        return f"results for {query}"

    guard = CrewAICircuitBreaker(config=Config(tool_limits={"web_search": 12}))
    with guard, FakeOpenAI(after=scenario.wire_searching(FakeOpenAI.results_of, "call_s")) as s:
        out = crew(s, [web_search]).kickoff()
    assert ran == [f"topic {n}" for n in range(12)]
    scenario.check_wire_budget(s, BUDGET_TEXT, False, tag="call_s")
    assert out.raw == scenario.DONE_SEARCHING


def test_each_crew_member_has_its_own_state_and_a_new_kickoff_starts_fresh() -> None:
    # Two members, one task each, the same search 4 times each with every copy counting
    # (reset_on_new_call=False): a shared state would refuse the second member's 2nd call.
    ran: list[str] = []

    def respond(body: dict[str, Any]) -> Any:
        n = len(FakeOpenAI.results_of(body))
        who = "first" if "task first" in json.dumps(body) else "second"
        return (
            "done" if n >= 4 else scenario.tool_call("search", {"query": "same"}, f"call_{who}_{n}")
        )

    hooks = CrewAICircuitBreaker(config=Config(reset_on_new_call=False))
    with hooks, FakeOpenAI(after=respond) as server:
        members = [member(server, [looping_search(ran)], role) for role in ("first", "second")]
        tasks = [Task(description=f"task {m.role}", expected_output="x", agent=m) for m in members]
        team = Crew(agents=members, tasks=tasks, process=Process.sequential)
        team.kickoff()
        assert len(ran) == 8
        assert not any(scenario.is_refusal(r.text) for r in server.tool_results())
        team.kickoff()  # a new kickoff: each member's count starts again
    assert len(ran) == 16
    assert not any(scenario.is_refusal(r.text) for r in server.tool_results())
    assert list(hooks.breaker.store.agents()) == []  # each kickoff's state dropped at its end


def test_a_poll_whose_output_moves_runs_past_six_copies() -> None:
    # Only the moving poll: CrewAI's own guard ends a task at the 5th call with the same
    # arguments and the same result, before the breaker's 6th (docs/crewai.md).
    poller = scenario.MOVING

    def go(server: Any, tools: list[Any]) -> None:
        with CrewAICircuitBreaker(config=poller.config):
            agent = member(server, tools, "poller", max_iter=40)
            task = Task(description="watch the job", expected_output="x", agent=agent)
            Crew(agents=[agent], tasks=[task]).kickoff()

    poller.drive(FakeOpenAI, lambda f: tool(f.__name__)(f), go, error_flag=False)
