"""Google ADK drives the breaker through a real Runner and LlmAgents. The loop and the
healthy cycle run through ADK's real Gemini model (google-genai underneath, its base_url on
a scripted Gemini API server on 127.0.0.1); the rest use a small BaseLlm subclass answering
from the request contents it is sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest

from conftest import require
from support import agent_scenarios as scenario
from support.fake_gemini import FakeGemini

try:
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.google_llm import Gemini
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.adk.tools.agent_tool import AgentTool
    from google.genai import types
    from pydantic import Field

    from dsh_circuit_breaker.integrations.google_adk import CircuitBreakerPlugin

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

from dsh_circuit_breaker import CircuitBreaker, Config

Response = tuple[str, str, dict[str, Any]]  # call id, name, response


@pytest.fixture(autouse=True)
def _need_adk(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "google-adk (extra [google-adk])")
    scenario.go_offline(monkeypatch)


def gemini(server: FakeGemini) -> Gemini:
    """ADK's real Gemini model on the scripted server, with no retries."""
    once = types.HttpRetryOptions(attempts=1)
    return Gemini(model="gemini-2.5-flash", base_url=server.url, retry_options=once)


if HAVE:

    class ScriptedLlm(BaseLlm):
        """Answers with `respond(contents)`: a text, or one function call."""

        model: str = "scripted"
        respond: Any = None
        seen: list[Any] = Field(default_factory=list)

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            contents = list(llm_request.contents)
            self.seen.append(contents)
            answer = self.respond(contents)
            if isinstance(answer, str):
                part = types.Part(text=answer)
            else:
                name, args, call_id = answer
                part = types.Part(
                    function_call=types.FunctionCall(id=call_id, name=name, args=args)
                )
            yield LlmResponse(content=types.Content(role="model", parts=[part]))


def responses(contents: list[Any]) -> list[Response]:
    found = []
    for content in contents:
        for part in content.parts or []:
            r = part.function_response
            if r is not None:
                found.append((str(r.id), str(r.name), dict(r.response or {})))
    return found


def refusals(contents: list[Any]) -> list[Response]:
    return [r for r in responses(contents) if scenario.is_refusal(str(r[2].get("error", "")))]


def this_turn(contents: list[Any]) -> list[Any]:
    return scenario.since_last_prompt(
        contents, lambda c: c.role == "user" and any(p.text for p in c.parts or [])
    )


def looping(tag: str, give_up_after: int = scenario.GIVE_UP_AFTER) -> ScriptedLlm:
    def respond(contents: list[Any]) -> str | scenario.Call:
        turn = this_turn(contents)
        if len(refusals(turn)) >= give_up_after:
            return scenario.GIVE_UP
        mine = [r for r in responses(turn) if r[0].startswith(tag)]
        return scenario.loop_call(tag, len(mine))

    return ScriptedLlm(respond=respond, seen=[])


def scripted(respond: Callable[[list[Any]], str | scenario.Call]) -> ScriptedLlm:
    return ScriptedLlm(respond=respond, seen=[])


def search_tool(ran: list[str]) -> Any:
    return scenario.search_function(ran)


def runner_for(agent: Any, plugin: Any) -> InMemoryRunner:
    return InMemoryRunner(app=App(name="test_app", root_agent=agent, plugins=[plugin]))


def message(text: str) -> Any:
    return types.Content(role="user", parts=[types.Part(text=text)])


def run_sync(runner: InMemoryRunner, text: str, session: str = "s1") -> list[Any]:
    _ensure_session(runner, session)
    return list(runner.run(user_id="u", session_id=session, new_message=message(text)))


async def run_async(runner: InMemoryRunner, text: str, session: str = "s1") -> list[Any]:
    await runner.session_service.create_session(
        app_name=runner.app_name, user_id="u", session_id=session
    )
    return [
        e
        async for e in runner.run_async(user_id="u", session_id=session, new_message=message(text))
    ]


def _ensure_session(runner: InMemoryRunner, session: str) -> None:
    async def make() -> None:
        found = await runner.session_service.get_session(
            app_name=runner.app_name, user_id="u", session_id=session
        )
        if found is None:
            await runner.session_service.create_session(
                app_name=runner.app_name, user_id="u", session_id=session
            )

    asyncio.run(make())


def final_text(events: list[Any]) -> str:
    texts = [p.text for e in events if e.content for p in e.content.parts or [] if p.text]
    return texts[-1] if texts else ""


def check_loop(last: list[Any], events: list[Any], ran: list[str], tag: str = "loop") -> None:
    """The run as ADK recorded it, `last` the contents of the last model request (the
    wire itself is checked by scenario.check_wire_loop)."""
    assert ran == ["same"] * scenario.RUNS
    denied = refusals(last)
    assert [r[0] for r in denied] == [f"{tag}-{scenario.RUNS}", f"{tag}-{scenario.RUNS + 1}"]
    for _, name, response in denied:
        assert name == "search"
        scenario.assert_loop_refusal(str(response["error"]))
    mine = [r for r in responses(last) if r[0].startswith(tag)]
    assert all("result" in r[2] for r in mine[: scenario.RUNS])
    assert final_text(events) == scenario.GIVE_UP


def last_contents(server: FakeGemini) -> list[Any]:
    """The contents of the last model request, as google-genai objects."""
    body = server.model_requests[-1]
    return [types.Content.model_validate(c) for c in body["contents"]]


@pytest.mark.parametrize("how", ["sync", "async"])
def test_loop_is_refused_at_the_sixth_copy_over_the_gemini_api(how: str) -> None:
    ran: list[str] = []
    plugin = CircuitBreakerPlugin()
    with FakeGemini(after=scenario.wire_loop(FakeGemini.results_of)) as server:
        agent = LlmAgent(name="looper", model=gemini(server), tools=[search_tool(ran)])
        runner = runner_for(agent, plugin)
        if how == "sync":
            events = run_sync(runner, "find it")
        else:
            events = asyncio.run(run_async(runner, "find it"))
    check_loop(last_contents(server), events, ran)
    scenario.check_wire_loop(server, error_flag=True)  # ADK sends {"error": <refusal>}
    assert list(plugin.breaker.store.agents()) == []  # dropped when the invocation ended


def test_healthy_edit_test_cycle_is_never_refused() -> None:
    edits = 15
    script = scenario.edit_test_cycle(edits)
    ran: list[str] = []
    run_tests, edit = scenario.edit_test_functions(ran)
    turns = scenario.wire_script(FakeGemini.results_of, script, "all green")
    with FakeGemini(after=turns) as server:
        agent = LlmAgent(name="coder", model=gemini(server), tools=[run_tests, edit])
        events = run_sync(runner_for(agent, CircuitBreakerPlugin()), "fix the bug")
    scenario.check_wire_healthy(server, script)
    assert ran.count("test") == edits + 1
    assert final_text(events) == "all green"


def four_then(tag: str, then: scenario.Call) -> ScriptedLlm:
    def respond(contents: list[Any]) -> str | scenario.Call:
        mine = [r for r in responses(contents) if r[0].startswith(tag)]
        if len(mine) < 4:
            return ("search", {"query": "same"}, f"{tag}{len(mine)}")
        if len(mine) == 4:
            return then
        return f"{tag} done"

    return scripted(respond)


def test_transfer_target_and_agent_tool_have_their_own_state() -> None:
    # reset_on_new_call=False: every copy counts, so a shared state would trip the second
    # agent at its 2nd call. The first agent searches 4 times, then hands over (a transfer
    # in the same invocation, or an AgentTool sub-run); the second loops on the same search
    # and must get its own 5.
    for how in ("transfer", "agent_tool"):
        ran: list[str] = []
        child_model = looping("c")
        child = LlmAgent(
            name="child", model=child_model, tools=[search_tool(ran)], description="digs"
        )
        if how == "transfer":
            then: scenario.Call = ("transfer_to_agent", {"agent_name": "child"}, "p-go")
            root = LlmAgent(
                name="root",
                model=four_then("p", then),
                tools=[search_tool(ran)],
                sub_agents=[child],
            )
        else:
            then = ("child", {"request": "dig"}, "p-go")
            root = LlmAgent(
                name="root", model=four_then("p", then), tools=[search_tool(ran), AgentTool(child)]
            )
        plugin = CircuitBreakerPlugin(config=Config(reset_on_new_call=False))
        runner = runner_for(root, plugin)
        events = run_sync(runner, "go")
        assert len(ran) == 4 + scenario.RUNS, how
        assert len(refusals(child_model.seen[-1])) == 2, how
        every = [r for contents in child_model.seen for r in refusals(contents)]
        assert {r[0] for r in every} == {f"c-{scenario.RUNS}", f"c-{scenario.RUNS + 1}"}, how
        if how == "agent_tool":
            assert final_text(events) == "p done"


def test_new_message_resets_unless_configured_not_to() -> None:
    ran: list[str] = []
    agent = LlmAgent(name="a", model=looping("loop", 1), tools=[search_tool(ran)])
    runner = runner_for(agent, CircuitBreakerPlugin())
    run_sync(runner, "go")
    run_sync(runner, "again")
    assert len(ran) == 2 * scenario.RUNS

    ran.clear()
    model = looping("loop", 1)
    agent = LlmAgent(name="a", model=model, tools=[search_tool(ran)])
    keep = CircuitBreakerPlugin(CircuitBreaker(Config(reset_on_user_prompt=False)))
    runner = runner_for(agent, keep)
    run_sync(runner, "go")
    run_sync(runner, "again")  # same session: the first call of the new message is refused
    assert len(ran) == scenario.RUNS
    assert [r[0] for r in refusals(this_turn(model.seen[-1]))] == ["loop-0"]
    # Another session of the same user and agent is another agent.
    run_sync(runner, "go", session="s2")
    assert len(ran) == 2 * scenario.RUNS


@pytest.mark.parametrize("poller", [scenario.MOVING, scenario.FROZEN])
def test_results_as_progress(poller: scenario.Poller) -> None:
    def go(server: Any, tools: list[Any]) -> None:
        agent = LlmAgent(name="poller", model=gemini(server), tools=tools)
        plugin = CircuitBreakerPlugin(config=poller.config)
        asyncio.run(run_async(runner_for(agent, plugin), "watch job 7"))

    poller.drive(FakeGemini, lambda f: f, go, error_flag=True)  # ADK sends {"error": ...}
