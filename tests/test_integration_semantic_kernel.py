"""Semantic Kernel drives the breaker through its auto function invocation filter: real
`ChatCompletionAgent` runs (and a group chat of two) with Semantic Kernel's OpenAI
connector (`OpenAIChatCompletion` on an `AsyncOpenAI` client) over the wire to a scripted
model server on 127.0.0.1. In the side venv side-semantic-kernel (Semantic Kernel cannot
install beside the test extra; see pyproject.toml). Chat Completions has no error flag on
a tool result, so a refusal is told apart by its text.

Semantic Kernel makes at most 5 rounds of function calls per request by default; each
agent here allows ATTEMPTS, so that the loops run long enough to be refused.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Callable
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES
from support import agent_scenarios as scenario
from support.fake_openai import FakeOpenAI
from support.scripted_server import ScriptedServer

try:
    from openai import AsyncOpenAI
    from semantic_kernel import Kernel
    from semantic_kernel.agents import AgentGroupChat, ChatCompletionAgent, ChatHistoryAgentThread
    from semantic_kernel.agents.strategies import DefaultTerminationStrategy
    from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
    from semantic_kernel.connectors.ai.open_ai import (
        OpenAIChatCompletion,
        OpenAIChatPromptExecutionSettings,
    )
    from semantic_kernel.contents import AuthorRole, ChatHistory, FunctionResultContent
    from semantic_kernel.functions import KernelPlugin, kernel_function

    from dsh_circuit_breaker.integrations.semantic_kernel import (
        SemanticKernelCircuitBreaker,
        guard,
        stop_reason,
    )

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

pytestmark = pytest.mark.side("semantic-kernel")
ATTEMPTS = 60  # rounds of function calls per request (Semantic Kernel's default: 5)


@pytest.fixture(autouse=True)
def _need_semantic_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "semantic-kernel (extra [side-semantic-kernel])")
    scenario.go_offline(monkeypatch)


def service(server: ScriptedServer) -> Any:
    client = AsyncOpenAI(api_key="dummy", base_url=server.url, max_retries=0)
    return OpenAIChatCompletion(ai_model_id="gpt-4o", async_client=client)


def auto() -> Any:
    return FunctionChoiceBehavior.Auto(maximum_auto_invoke_attempts=ATTEMPTS)


def settings() -> Any:
    return OpenAIChatPromptExecutionSettings(function_choice_behavior=auto())


def plugin(functions: list[Callable[..., Any]]) -> Any:
    return KernelPlugin(name="tools", functions=[kernel_function(f) for f in functions])


def agent(server: ScriptedServer, functions: list[Callable[..., Any]], **kw: Any) -> Any:
    kw.setdefault("name", "researcher")
    return ChatCompletionAgent(
        service=service(server),
        plugins=[plugin(functions)],
        function_choice_behavior=auto(),
        **kw,
    )


def respond_to(a: Any, prompt: str) -> Any:
    return asyncio.run(a.get_response(messages=prompt))


def web_tools(ran: list[str]) -> list[Callable[..., Any]]:
    search = scenario.search_function(ran)

    def web_search(query: str) -> str:
        """Search the web."""
        return search(query)

    return [search, web_search]


def test_loop_is_refused_at_the_sixth_copy() -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop(FakeOpenAI.results_of)) as server:
        a = agent(server, [scenario.search_function(ran)])
        shared = guard(a)
        out = respond_to(a, "find it")
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_loop(server, False)
    assert out.message.content == scenario.GIVE_UP
    assert stop_reason(out) is None
    gc.collect()
    assert list(shared.breaker.store.agents()) == []  # the run's state went with its history


def test_healthy_edit_test_cycle_is_never_refused() -> None:
    script = scenario.edit_test_cycle(15)
    ran: list[str] = []
    with FakeOpenAI(
        after=scenario.wire_script(FakeOpenAI.results_of, script, "all green")
    ) as server:
        a = agent(server, list(scenario.edit_test_functions(ran)))
        guard(a)
        out = respond_to(a, "fix the bug")
    scenario.check_wire_healthy(server, script)
    assert ran.count("test") == 16
    assert out.message.content == "all green"


def test_a_looping_agent_is_stopped_at_its_third_refusal() -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop_forever(FakeOpenAI.results_of)) as server:
        a = agent(server, [scenario.search_function(ran)])
        guard(a)
        out = respond_to(a, "find it")
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_stop(server, False)
    assert stop_reason(out) == scenario.STOP_REASON
    # Terminated: the response is the answer to the 9th call, the refusal, as a tool message.
    assert out.message.role == AuthorRole.TOOL
    (result,) = out.message.items
    assert isinstance(result, FunctionResultContent) and result.id == f"loop-{scenario.RUNS + 2}"
    scenario.assert_loop_refusal(str(result.result))


def test_a_streamed_run_is_stopped_too() -> None:
    # invoke_stream yields the model's text only; the function results, the stopping one
    # included, reach on_intermediate_message (and the thread).
    ran: list[str] = []
    steps: list[Any] = []

    async def step(message: Any) -> None:
        steps.append(message)

    with FakeOpenAI(after=scenario.wire_loop_forever(FakeOpenAI.results_of)) as server:
        a = agent(server, [scenario.search_function(ran)])
        guard(a)

        async def go() -> None:
            async for _ in a.invoke_stream(messages="find it", on_intermediate_message=step):
                pass

        asyncio.run(go())
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_stop(server, False)
    assert stop_reason(steps) == scenario.STOP_REASON
    assert stop_reason(steps[-1]) == scenario.STOP_REASON  # the last step: the 9th's answer


def test_stop_after_denials_zero_keeps_the_plain_refusals() -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop(FakeOpenAI.results_of, give_up_after=5)) as server:
        a = agent(server, [scenario.search_function(ran)])
        guard(a, SemanticKernelCircuitBreaker(config=Config(stop_after_denials=0)))
        out = respond_to(a, "find it")
    assert ran == ["same"] * scenario.RUNS
    assert len(server.model_requests) == scenario.RUNS + 5 + 1  # five refusals, then the answer
    assert out.message.content == scenario.GIVE_UP and stop_reason(out) is None


def test_a_web_search_budget_of_12_refuses_the_13th() -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_searching(FakeOpenAI.results_of)) as server:
        a = agent(server, web_tools(ran))
        guard(a, SemanticKernelCircuitBreaker(config=Config(tool_limits={"web_search": 12})))
        out = respond_to(a, "search")
    assert ran == [f"topic {n}" for n in range(12)]
    scenario.check_wire_budget(server, scenario.BUDGET_TEXT, False)
    assert out.message.content == scenario.DONE_SEARCHING


def group_chat(shared: SemanticKernelCircuitBreaker) -> tuple[list[str], list[str]]:
    """Two agents, `first` and `second`, take turns in an AgentGroupChat, two turns each;
    in each turn an agent searches the same thing 4 times, then answers. Returns the
    searches that ran and the texts of the refusals the model was sent."""
    ran: list[str] = []

    def respond(body: dict[str, Any]) -> Any:
        who = "first" if "You are first" in json.dumps(body["messages"][:1]) else "second"
        own = [r for r in FakeOpenAI.results_of(body) if r.call_id.startswith(who)]
        last = body["messages"][-1]
        if own and last.get("role") == "tool" and len(own) % 4 == 0:
            return f"{who}: done"
        return scenario.tool_call("search", {"query": "same"}, f"{who}-{len(own)}")

    with FakeOpenAI(after=respond) as server:
        members = [
            agent(server, [scenario.search_function(ran)], name=n, instructions=f"You are {n}.")
            for n in ("first", "second")
        ]
        guard(AgentGroupChat(agents=members), shared)  # every agent of the chat
        chat = AgentGroupChat(
            agents=members, termination_strategy=DefaultTerminationStrategy(maximum_iterations=4)
        )

        async def talk() -> list[str]:
            await chat.add_chat_message("find it")
            return [str(m.name) async for m in chat.invoke()]

        speakers = asyncio.run(talk())
    assert speakers == ["first", "second", "first", "second"]
    assert server.errors == []
    return ran, [r.text for r in server.tool_results() if scenario.is_refusal(r.text)]


def test_group_chat_agents_are_keyed_apart_per_turn_or_by_name() -> None:
    # Every copy counts (reset_on_new_call=False): one state for the two agents would
    # refuse the 6th search of the four turns' sixteen.
    per_turn = SemanticKernelCircuitBreaker(config=Config(reset_on_new_call=False))
    ran, refused = group_chat(per_turn)
    assert len(ran) == 16 and refused == []
    gc.collect()
    assert list(per_turn.breaker.store.agents()) == []  # each turn's state went with it
    # Keyed by agent name, across turns: each agent's second turn runs 1 (its 5th copy) and
    # is refused 3 (stopAfterDenials=0: the third refusal in a row would stop the agent,
    # which is not what this test is about).
    config = Config(reset_on_new_call=False, reset_on_user_prompt=False, stop_after_denials=0)
    ran, refused = group_chat(SemanticKernelCircuitBreaker(config=config))
    assert len(ran) == 2 * scenario.RUNS and len(refused) == 2 * 3
    for text in refused:
        scenario.assert_loop_refusal(text)


def looper_and_other(shared: SemanticKernelCircuitBreaker) -> tuple[list[Any], int, int]:
    """A group chat of `looper`, which searches the same thing forever, and `other`, which
    answers at once: looper, other, looper. Returns (speaker, role, stop reason) of each
    message the chat yielded, the searches that ran, and the model requests."""
    ran: list[str] = []

    def respond(body: dict[str, Any]) -> Any:
        if "You are other" in json.dumps(body["messages"][:1]):
            return "other: fine"
        own = [r for r in FakeOpenAI.results_of(body) if r.call_id.startswith("looper")]
        return scenario.tool_call("search", {"query": "same"}, f"looper-{len(own)}")

    with FakeOpenAI(after=respond) as server:
        members = [
            agent(server, [scenario.search_function(ran)], name=n, instructions=f"You are {n}.")
            for n in ("looper", "other")
        ]
        guard(members, shared)
        chat = AgentGroupChat(
            agents=members, termination_strategy=DefaultTerminationStrategy(maximum_iterations=3)
        )

        async def talk() -> list[Any]:
            await chat.add_chat_message("find it")
            return [(m.name, m.role, stop_reason(m)) async for m in chat.invoke()]

        said = asyncio.run(talk())
    assert server.errors == []
    return said, len(ran), len(server.model_requests)


def test_a_stop_in_a_group_chat_ends_that_agents_turn_and_the_chat_goes_on() -> None:
    stopped = ("looper", AuthorRole.TOOL, scenario.STOP_REASON)
    said, ran, requests = looper_and_other(SemanticKernelCircuitBreaker())
    assert said == [stopped, ("other", AuthorRole.ASSISTANT, None), stopped]
    # Each turn of looper a run of its own: 5 ran, the 8th call's refusal stopped it.
    assert (ran, requests) == (2 * scenario.RUNS, (scenario.RUNS + 3) + 1 + (scenario.RUNS + 3))
    # Keyed by name: looper is still stopped at its next turn, at its first call.
    config = Config(reset_on_user_prompt=False)
    said, ran, requests = looper_and_other(SemanticKernelCircuitBreaker(config=config))
    again = DEFAULT_MESSAGES["stop"].format(tool="search", kind="duplicate", count=4, limit=3)
    assert said == [stopped, ("other", AuthorRole.ASSISTANT, None), (*stopped[:2], again)]
    assert (ran, requests) == (scenario.RUNS, (scenario.RUNS + 3) + 1 + 1)


def two_turns_in_one_thread(shared: SemanticKernelCircuitBreaker) -> list[str]:
    """Two invocations of one agent in one thread (one event loop: the client keeps its
    connections); the looping model gives up at its first refusal in each."""
    ran: list[str] = []
    loop = scenario.wire_loop(FakeOpenAI.results_of, give_up_after=1)

    def this_turn(body: dict[str, Any]) -> Any:
        messages = body["messages"]
        start = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        return loop(dict(body, messages=messages[start:]))

    with FakeOpenAI(after=this_turn) as server:
        a = agent(server, [scenario.search_function(ran)])
        guard(a, shared)

        async def both() -> None:
            thread = ChatHistoryAgentThread()
            await a.get_response(messages="go", thread=thread)
            await a.get_response(messages="again", thread=thread)

        asyncio.run(both())
    return ran


def test_each_invocation_starts_fresh_unless_state_should_follow_the_agent() -> None:
    keep = Config(reset_on_user_prompt=False)
    assert len(two_turns_in_one_thread(SemanticKernelCircuitBreaker(config=keep))) == scenario.RUNS
    assert len(two_turns_in_one_thread(SemanticKernelCircuitBreaker())) == 2 * scenario.RUNS


def test_a_kept_chat_history_starts_a_new_run_at_each_user_message() -> None:
    # The chat service called directly, turn after turn, with one ChatHistory the program
    # keeps (Semantic Kernel's chat-loop pattern) and a guarded kernel.
    ran: list[str] = []
    loop = scenario.wire_loop_forever(FakeOpenAI.results_of)

    def this_turn(body: dict[str, Any]) -> Any:
        messages = body["messages"]
        start = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        return loop(dict(body, messages=messages[start:]))

    with FakeOpenAI(after=this_turn) as server:
        kernel = Kernel()
        kernel.add_plugin(plugin([scenario.search_function(ran)]))
        shared = guard(kernel, name="chat")
        chat = service(server)
        history = ChatHistory()

        async def turns(history: Any) -> list[Any]:
            answers = []
            for prompt in ("find it", "find it again"):
                history.add_user_message(prompt)
                answers.append(
                    await chat.get_chat_message_contents(history, settings(), kernel=kernel)
                )
            return answers

        answers = asyncio.run(turns(history))
        # Each turn: 5 ran, the 8th call's refusal stopped it (the turn's state fresh).
        assert ran == ["same"] * (2 * scenario.RUNS)
        assert [stop_reason(a) for a in answers] == [scenario.STOP_REASON] * 2
        assert len(server.model_requests) == 2 * (scenario.RUNS + 3)
        assert server.errors == []
        assert len(list(shared.breaker.store.agents())) == 1  # the second turn's, until...
        del history, answers
        gc.collect()
        assert list(shared.breaker.store.agents()) == []  # ... the history goes


def test_no_other_filter_sees_a_refused_call() -> None:
    # The application's own filters, one added before the breaker and one after: the
    # breaker's is outermost either way, so neither sees the refused calls.
    ran: list[str] = []
    seen: list[str] = []

    def counting(label: str) -> Any:
        async def count(context: Any, next: Any) -> None:
            seen.append(label)
            await next(context)

        return count

    with FakeOpenAI(after=scenario.wire_loop(FakeOpenAI.results_of)) as server:
        a = agent(server, [scenario.search_function(ran)])
        a.kernel.add_filter("auto_function_invocation", counting("before"))
        shared = guard(a)
        guard(a, shared)  # the same breaker again: no second filter
        a.kernel.add_filter("auto_function_invocation", counting("after"))
        respond_to(a, "find it")
    scenario.check_wire_loop(server, False)
    assert sorted(seen) == ["after"] * scenario.RUNS + ["before"] * scenario.RUNS
    assert len(a.kernel.auto_function_invocation_filters) == 3


def test_a_cloned_kernel_keeps_the_breaker() -> None:
    # Kernel.clone() deep-copies the filters (the orchestrations clone agents' kernels).
    ran: list[str] = []
    kernel = Kernel()
    shared = guard(kernel, name="researcher")
    clone = kernel.clone()
    assert [f.guard for _, f in clone.auto_function_invocation_filters] == [shared]
    with FakeOpenAI(after=scenario.wire_loop(FakeOpenAI.results_of)) as server:
        respond_to(agent(server, [scenario.search_function(ran)], kernel=clone), "find it")
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_loop(server, False)


@pytest.mark.parametrize("poller", [scenario.MOVING, scenario.FROZEN])
def test_results_as_progress(poller: scenario.Poller) -> None:
    def go(server: Any, tools: list[Any]) -> None:
        a = agent(server, tools)
        guard(a, SemanticKernelCircuitBreaker(config=poller.config))
        respond_to(a, "go")

    poller.drive(FakeOpenAI, lambda f: f, go, error_flag=False)
