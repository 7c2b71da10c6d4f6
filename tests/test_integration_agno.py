"""Agno drives the breaker through its `tool_hooks` chain: real `Agent` and `Team` runs,
with Agno's own Anthropic (`Claude`) and OpenAI (`OpenAIChat`, Chat Completions) model
classes over the wire to a scripted model server on 127.0.0.1.

Agno rewrites a call id that does not look like its provider's own, so the OpenAI calls
are scripted with `call_` ids. Neither model class sends Agno's `tool_call_error` on the
wire (Anthropic's `is_error` stays unset), so a refusal is told apart by its text.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES
from support import agent_scenarios as scenario
from support.fake_anthropic import FakeAnthropic
from support.fake_openai import FakeOpenAI
from support.scripted_server import ScriptedServer

try:
    from agno.agent import Agent
    from agno.models.anthropic import Claude
    from agno.models.openai import OpenAIChat
    from agno.team import Team

    from dsh_circuit_breaker.integrations import agno as cb_agno
    from dsh_circuit_breaker.integrations.agno import CircuitBreakerToolHook, guard, stop_reason

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

PROVIDERS = {"anthropic": (FakeAnthropic, "loop"), "openai": (FakeOpenAI, "call_loop")}
STOP_REASON = DEFAULT_MESSAGES["stop"].format(tool="search", kind="duplicate", count=3, limit=3)
BUDGET_TEXT = DEFAULT_MESSAGES["budget"].format(
    tool="web_search", kind="budget", count=12, limit=12
)


@pytest.fixture(autouse=True)
def _need_agno(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "agno (extra [agno])")
    scenario.go_offline(monkeypatch)
    monkeypatch.setenv("AGNO_TELEMETRY", "false")


def model(server: ScriptedServer) -> Any:
    if isinstance(server, FakeAnthropic):
        return Claude(
            id="claude-sonnet-4-5", api_key="dummy", client_params={"base_url": server.origin}
        )
    return OpenAIChat(id="gpt-4o", api_key="dummy", base_url=server.url, max_retries=0)


def agent(server: ScriptedServer, tools: list[Any], hook: Any, **kw: Any) -> Any:
    return Agent(model=model(server), tools=tools, tool_hooks=[hook], telemetry=False, **kw)


def web_tools(ran: list[str]) -> list[Any]:
    search = scenario.search_function(ran)

    def web_search(query: str) -> str:
        """Search the web."""
        return search(query)

    return [search, web_search]


def run(a: Any, prompt: str, mode: str = "sync") -> Any:
    return asyncio.run(a.arun(prompt)) if mode == "async" else a.run(prompt)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_loop_is_refused_at_the_sixth_copy(provider: str, mode: str) -> None:
    fake, tag = PROVIDERS[provider]
    ran: list[str] = []
    with fake(after=scenario.wire_loop(fake.results_of, tag=tag)) as server:
        out = run(
            agent(server, [scenario.search_function(ran)], CircuitBreakerToolHook()),
            "find it",
            mode,
        )
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_loop(server, False, tag=tag)
    refused = [m for m in out.messages if m.role == "tool" and m.tool_call_error]
    assert [m.tool_call_id for m in refused] == [
        f"{tag}-{scenario.RUNS}",
        f"{tag}-{scenario.RUNS + 1}",
    ]
    assert out.content == scenario.GIVE_UP
    assert stop_reason(out) is None


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_healthy_edit_test_cycle_is_never_refused(provider: str) -> None:
    fake, tag = PROVIDERS[provider]
    script = [
        (name, args, f"{tag}-{i}") for i, (name, args, _) in enumerate(scenario.edit_test_cycle(15))
    ]
    ran: list[str] = []
    with fake(after=scenario.wire_script(fake.results_of, script, "all green")) as server:
        out = agent(server, list(scenario.edit_test_functions(ran)), CircuitBreakerToolHook()).run(
            "fix the bug"
        )
    scenario.check_wire_healthy(server, script)
    assert ran.count("test") == 16
    assert out.content == "all green"


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_looping_agent_is_stopped_at_its_third_refusal(provider: str, mode: str) -> None:
    fake, tag = PROVIDERS[provider]
    ran: list[str] = []
    with fake(after=scenario.wire_loop_forever(fake.results_of, tag=tag)) as server:
        out = run(
            agent(server, [scenario.search_function(ran)], CircuitBreakerToolHook()),
            "find it",
            mode,
        )
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_stop(server, False, tag=tag)
    # StopAgentRun: the refusal answers the 8th call, then the stop reason ends the run.
    result, last = out.messages[-2:]
    assert result.tool_call_id == f"{tag}-{scenario.RUNS + 2}" and result.tool_call_error
    scenario.assert_loop_refusal(result.content)
    assert last.role == "assistant" and last.content == STOP_REASON
    assert stop_reason(out) == STOP_REASON


def test_stop_after_denials_zero_keeps_the_plain_refusals() -> None:
    ran: list[str] = []
    hook = CircuitBreakerToolHook(config=Config(stop_after_denials=0))
    with FakeAnthropic(
        after=scenario.wire_loop(FakeAnthropic.results_of, give_up_after=5)
    ) as server:
        out = agent(server, [scenario.search_function(ran)], hook).run("find it")
    assert ran == ["same"] * scenario.RUNS
    assert len(server.model_requests) == scenario.RUNS + 5 + 1  # five refusals, then the answer
    assert out.content == scenario.GIVE_UP and stop_reason(out) is None


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_web_search_budget_of_12_refuses_the_13th(provider: str) -> None:
    fake, tag = PROVIDERS[provider]
    tag = "call_s" if fake is FakeOpenAI else "s"
    ran: list[str] = []
    hook = CircuitBreakerToolHook(config=Config(tool_limits={"web_search": 12}))
    with fake(after=scenario.wire_searching(fake.results_of, tag=tag)) as server:
        out = agent(server, web_tools(ran), hook).run("search")
    assert ran == [f"topic {n}" for n in range(12)]
    scenario.check_wire_budget(server, BUDGET_TEXT, False, tag=tag)
    assert out.content == scenario.DONE_SEARCHING


def test_a_team_member_has_its_own_state_and_its_stop_ends_only_its_run() -> None:
    # The leader searches 4 times, then delegates to a member that loops on the same search
    # forever. With reset_on_new_call=False every copy counts, so a shared state would
    # refuse the member's 2nd call: it must get its own 5, then be stopped; the leader goes on.
    ran: list[str] = []

    def respond(body: dict[str, Any]) -> Any:
        results = FakeAnthropic.results_of(body)
        names = {t["name"] for t in body.get("tools") or []}
        if "delegate_task_to_member" not in names:  # the member
            return scenario.tool_call(*scenario.loop_call("m", len(results)))
        if len(results) < 4:
            return scenario.tool_call(*scenario.loop_call("p", len(results)))
        if len(results) == 4:
            return scenario.tool_call(
                "delegate_task_to_member", {"member_id": "searcher", "task": "dig"}, "d"
            )
        return "team done"

    with FakeAnthropic(after=respond) as server:
        member = Agent(
            id="searcher",
            name="searcher",
            model=model(server),
            tools=[scenario.search_function(ran)],
            telemetry=False,
        )
        team = Team(
            members=[member],
            model=model(server),
            tools=[scenario.search_function(ran)],
            telemetry=False,
        )
        hook = guard(team, CircuitBreakerToolHook(config=Config(reset_on_new_call=False)))
        assert member.tool_hooks == [hook]
        out = team.run("go")
    assert ran == ["same"] * (4 + scenario.RUNS)  # 4 for the leader, 5 for the member
    assert not any(
        scenario.is_refusal(server.result_in_next_request(f"p-{n}").text) for n in range(4)
    )
    scenario.assert_loop_refusal(server.result_in_next_request(f"m-{scenario.RUNS}").text)
    member_requests = [
        b for b in server.model_requests if "delegate_task_to_member" not in str(b.get("tools"))
    ]
    assert (
        len(member_requests) == scenario.RUNS + 3
    )  # the member was stopped: no request after its 8th call
    leader_last = [b for b in server.model_requests if b not in member_requests][-1]
    (handed_back,) = [r for r in FakeAnthropic.results_of(leader_last) if r.call_id == "d"]
    # What the leader gets back: the member's tool results (Agno's hand-back when the
    # member's run ended with no answer of its own), the refusals among them.
    assert handed_back.text.count(scenario.DENIED) == 3
    assert out.content == "team done"


def test_a_new_run_starts_fresh_and_old_runs_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cb_agno, "KEEP_RUNS", 2)
    ran: list[str] = []
    hook = CircuitBreakerToolHook()
    with FakeAnthropic(
        after=scenario.wire_loop(FakeAnthropic.results_of, give_up_after=1)
    ) as server:
        a = agent(server, [scenario.search_function(ran)], hook)
        for _ in range(3):
            a.run("go")
    assert len(ran) == 3 * scenario.RUNS  # each run its own 5
    assert len(list(hook.breaker.store.agents())) == 2
    # reset_on_user_prompt=False: the session's count goes on across runs.
    ran.clear()
    keep = CircuitBreakerToolHook(CircuitBreaker(Config(reset_on_user_prompt=False)))
    with FakeAnthropic(
        after=scenario.wire_loop(FakeAnthropic.results_of, give_up_after=1)
    ) as server:
        a = agent(server, [scenario.search_function(ran)], keep, session_id="s1")
        a.run("go")
        a.run("again")
    assert len(ran) == scenario.RUNS


@pytest.mark.parametrize(
    ("poller", "mode"),
    [
        (scenario.MOVING, "sync"),
        (scenario.MOVING, "async"),
        (scenario.FROZEN, "async"),
        (scenario.INTERLEAVED, "sync"),
    ],
)
def test_results_as_progress(poller: scenario.Poller, mode: str) -> None:
    def go(server: ScriptedServer, tools: list[Any]) -> None:
        run(agent(server, tools, CircuitBreakerToolHook(config=poller.config)), "go", mode)

    poller.drive(FakeAnthropic, lambda f: f, go, error_flag=False)  # Agno sends no flag
