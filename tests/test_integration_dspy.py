"""DSPy drives the breaker through its ReAct tools: real `dspy.ReAct` calls with `dspy.LM`
(LiteLLM, OpenAI Chat Completions) over the wire to a scripted model server on 127.0.0.1.

ReAct sends no tool calls on the wire (the model answers in DSPy's ChatAdapter fields;
each call's result comes back in the trajectory's text): support/fake_dspy.py speaks
that, each call's id its thought. Once ReAct picks `finish`, it asks the model once more
for the signature's outputs (the extract step), which the fake answers on the side.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config
from support import agent_scenarios as scenario
from support.fake_dspy import FakeDSPy, dspy_results
from support.scripted_server import tool_call

try:
    import dspy

    from dsh_circuit_breaker.integrations.dspy import (
        CircuitBreakerGuard,
        CircuitBreakerStop,
        guard,
        stop_reason,
    )

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False


@pytest.fixture(autouse=True)
def _need_dspy(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "dspy (extra [dspy])")
    scenario.go_offline(monkeypatch)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no cost map fetched


def lm(server: FakeDSPy) -> Any:
    return dspy.LM(
        "openai/gpt-4o", api_base=server.url, api_key="dummy", cache=False, num_retries=0
    )


def react(tools: list[Any], **kw: Any) -> Any:
    return dspy.ReAct("question -> answer", tools=tools, **kw)


def ask(server: FakeDSPy, module: Any, question: str, mode: str = "sync") -> Any:
    with dspy.context(lm=lm(server)):
        if mode == "async":
            return asyncio.run(module.acall(question=question))
        return module(question=question)


def web_tools(ran: list[str]) -> list[Any]:
    search = scenario.search_function(ran)

    def web_search(query: str) -> str:
        """Search the web."""
        return search(query)

    return [search, web_search]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_loop_is_refused_at_the_sixth_copy(mode: str) -> None:
    ran: list[str] = []
    with FakeDSPy(after=scenario.wire_loop(dspy_results)) as server:
        out = ask(server, guard(react([scenario.search_function(ran)])), "find it", mode)
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_loop(server, False)
    assert out.answer == scenario.GIVE_UP


def test_healthy_edit_test_cycle_is_never_refused() -> None:
    script = scenario.edit_test_cycle(15)
    ran: list[str] = []
    with FakeDSPy(after=scenario.wire_script(dspy_results, script, "all green")) as server:
        module = guard(react(list(scenario.edit_test_functions(ran)), max_iters=40))
        out = ask(server, module, "fix the bug")
    scenario.check_wire_healthy(server, script)
    assert ran.count("test") == 16
    assert out.answer == "all green"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_looping_agent_is_stopped_at_its_third_refusal(mode: str) -> None:
    ran: list[str] = []
    with FakeDSPy(after=scenario.wire_loop_forever(dspy_results)) as server:
        module = guard(react([scenario.search_function(ran)], max_iters=50))
        with pytest.raises(CircuitBreakerStop) as stopped:
            ask(server, module, "find it", mode)
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_stop(server, False)  # eight requests: no extract step either
    assert stop_reason(stopped.value) == scenario.STOP_REASON == str(stopped.value)
    assert not isinstance(stopped.value, Exception)  # past ReAct's `except Exception`


def test_stop_after_denials_zero_keeps_the_plain_refusals() -> None:
    ran: list[str] = []
    with FakeDSPy(after=scenario.wire_loop(dspy_results, give_up_after=5)) as server:
        module = guard(react([scenario.search_function(ran)]), config=Config(stop_after_denials=0))
        out = ask(server, module, "find it")
    assert ran == ["same"] * scenario.RUNS
    # 5 ran, 5 refused, then `finish` and the extract step.
    assert len(server.model_requests) == scenario.RUNS + 5 + 2
    assert out.answer == scenario.GIVE_UP


def test_a_web_search_budget_of_12_refuses_the_13th() -> None:
    ran: list[str] = []
    with FakeDSPy(after=scenario.wire_searching(dspy_results)) as server:
        module = guard(react(web_tools(ran)), config=Config(tool_limits={"web_search": 12}))
        out = ask(server, module, "search")
    assert ran == [f"topic {n}" for n in range(12)]
    sent = server.tool_results()
    assert [r.call_id for r in sent] == [f"s-{n}" for n in range(13)]
    assert [r.text for r in sent[:12]] == [f"results for topic {n}" for n in range(12)]
    assert sent[-1].text == scenario.BUDGET_TEXT
    assert len(server.model_requests) == 15  # 13 calls, `finish`, the extract step
    assert out.answer == scenario.DONE_SEARCHING and server.errors == []


def test_a_subagent_has_its_own_state_and_its_stop_ends_only_its_call() -> None:
    # The parent searches 4 times, then hands a task to a child ReAct (called from its
    # `delegate` tool) that loops on the same search forever. reset_on_new_call=False: a
    # shared state would refuse the child's 2nd call; it gets its own 5, then is stopped,
    # and the parent reads the stop reason as its delegate call's result and goes on.
    ran: list[str] = []
    g = CircuitBreakerGuard(config=Config(reset_on_new_call=False))
    child = g.guard(react([scenario.search_function(ran)], max_iters=50), name="child")

    def delegate(task: str) -> str:
        """Hand a task to a subagent."""
        return str(child(question=task).answer)

    def is_child(body: dict[str, Any]) -> bool:
        return "delegate" not in json.dumps(body.get("messages"))

    def respond(body: dict[str, Any]) -> Any:
        results = dspy_results(body)
        if is_child(body):
            return tool_call(*scenario.loop_call("c", len(results)))
        if len(results) < 4:
            return tool_call(*scenario.loop_call("p", len(results)))
        if len(results) == 4:
            return tool_call("delegate", {"task": "dig"}, "d")
        return "parent done"

    with FakeDSPy(after=respond) as server:
        parent = g.guard(react([scenario.search_function(ran), delegate]), name="parent")
        out = ask(server, parent, "go")
    assert ran == ["same"] * (4 + scenario.RUNS)  # 4 for the parent, 5 for the child
    parent_results = [server.result_in_next_request(f"p-{n}").text for n in range(4)]
    assert not any(scenario.is_refusal(t) for t in parent_results)
    scenario.assert_loop_refusal(server.result_in_next_request(f"c-{scenario.RUNS}").text)
    assert len([b for b in server.model_requests if is_child(b)]) == scenario.RUNS + 3
    # The request after the `delegate` call is the child's first; the parent's next one
    # carries the call's result.
    handed_back = [r for r in server.tool_results() if r.call_id == "d"]
    assert [r.text for r in handed_back] == [scenario.STOP_REASON]
    assert out.answer == "parent done"
    assert list(g.breaker.store.agents()) == []  # each call's state dropped at its end


def test_each_call_starts_fresh_unless_state_should_follow_the_module() -> None:
    def two_calls(config: Config) -> list[str]:
        ran: list[str] = []
        with FakeDSPy(after=scenario.wire_loop(dspy_results, give_up_after=1)) as server:
            module = guard(react([scenario.search_function(ran)]), CircuitBreaker(config))
            ask(server, module, "go")
            ask(server, module, "again")
        return ran

    assert len(two_calls(Config())) == 2 * scenario.RUNS  # each call its own 5
    assert len(two_calls(Config(reset_on_user_prompt=False))) == scenario.RUNS


def test_every_react_in_a_program_is_guarded_under_its_attribute_path() -> None:
    class Program(dspy.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.researcher = react([scenario.search_function([])])

        def forward(self, question: str) -> Any:
            return self.researcher(question=question)

    program = guard(Program(), config=Config(reset_on_user_prompt=False))
    (scope,) = program.researcher.callbacks
    assert scope.name == "Program.researcher"
    assert type(program.researcher.tools["search"]).__name__ == "GuardedTool"
    assert type(program.researcher.tools["finish"]).__name__ == "Tool"
    # A tool added later is guarded by guarding again, under the same one scope.
    program.researcher.tools["web_search"] = dspy.Tool(web_tools([])[1])
    guard(program)
    assert type(program.researcher.tools["web_search"]).__name__ == "GuardedTool"
    assert len(program.researcher.callbacks) == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("poller", [scenario.MOVING, scenario.FROZEN, scenario.INTERLEAVED])
def test_results_as_progress(poller: scenario.Poller, mode: str) -> None:
    def go(server: Any, tools: list[Any]) -> None:
        module = guard(react(tools, max_iters=40), config=poller.config)
        ask(server, module, "go", mode)

    # ReAct's own last request extracts the answer from the trajectory.
    poller.drive(FakeDSPy, lambda f: f, go, error_flag=False, extra_requests=1)
