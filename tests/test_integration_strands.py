"""Strands Agents drives the breaker through a real Agent. The loop and the healthy cycle
run through Strands' real model providers (AnthropicModel on the Anthropic Messages API,
GeminiModel on the Gemini API), their clients pointed at a scripted model server on
127.0.0.1; the rest use a small strands Model subclass that streams Bedrock-style events
computed from the messages it is sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from conftest import require
from support import agent_scenarios as scenario
from support.fake_anthropic import FakeAnthropic
from support.fake_gemini import FakeGemini
from support.scripted_server import ScriptedServer

try:
    from google.genai import types as genai_types
    from strands import Agent, tool
    from strands.hooks import BeforeToolCallEvent, HookProvider, HookRegistry
    from strands.models.anthropic import AnthropicModel
    from strands.models.gemini import GeminiModel
    from strands.models.model import Model

    from dsh_circuit_breaker.integrations.strands import CircuitBreakerHooks

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

from dsh_circuit_breaker import CircuitBreaker, Config

# provider -> its scripted server, and whether Strands sends an error flag through it.
# Strands' GeminiModel sends every toolResult as {"output": [...]}, its status dropped: the
# model reads the refusal's text, with no `error` key to mark it as failed.
PROVIDERS = {"anthropic": (FakeAnthropic, True), "gemini": (FakeGemini, False)}


@pytest.fixture(autouse=True)
def _need_strands(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE, "strands-agents (extra [strands]) with its anthropic and gemini clients")
    scenario.go_offline(monkeypatch)


def provider_model(server: ScriptedServer) -> Model:
    """The provider's real Strands model, its client pointed at the scripted server."""
    if isinstance(server, FakeAnthropic):
        client = {"api_key": "dummy", "base_url": server.url, "max_retries": 0, "timeout": 10}
        return AnthropicModel(client_args=client, model_id="claude-sonnet-4-5", max_tokens=1024)
    options = genai_types.HttpOptions(base_url=server.url, timeout=10_000)
    client = {"api_key": "dummy", "http_options": options}
    return GeminiModel(client_args=client, model_id="gemini-2.5-flash")


if HAVE:

    class ScriptedModel(Model):
        """Answers with `respond(messages)`: a text or a tool call, streamed as events."""

        def __init__(self, respond: Callable[[list[Any]], str | scenario.Call]) -> None:
            self.respond = respond
            self.seen: list[list[Any]] = []

        def update_config(self, **model_config: Any) -> None:
            pass

        def get_config(self) -> Any:
            return {}

        def structured_output(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            self.seen.append(json.loads(json.dumps(messages, default=str)))
            answer = self.respond(messages)
            yield {"messageStart": {"role": "assistant"}}
            if isinstance(answer, str):
                yield {"contentBlockStart": {"start": {}}}
                yield {"contentBlockDelta": {"delta": {"text": answer}}}
                yield {"contentBlockStop": {}}
                stop = "end_turn"
            else:
                name, args, use_id = answer
                yield {
                    "contentBlockStart": {"start": {"toolUse": {"name": name, "toolUseId": use_id}}}
                }
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}}
                yield {"contentBlockStop": {}}
                stop = "tool_use"
            yield {"messageStop": {"stopReason": stop}}
            usage = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
            yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}


def results(messages: list[Any]) -> list[dict[str, Any]]:
    return [
        block["toolResult"]
        for m in messages
        if m["role"] == "user"
        for block in m["content"]
        if "toolResult" in block
    ]


def text_of(result: dict[str, Any]) -> str:
    return " ".join(str(c.get("text", "")) for c in result["content"])


def refusals(messages: list[Any]) -> list[dict[str, Any]]:
    return [r for r in results(messages) if scenario.is_refusal(text_of(r))]


def this_turn(messages: list[Any]) -> list[Any]:
    return scenario.since_last_prompt(
        messages, lambda m: m["role"] == "user" and any("text" in b for b in m["content"])
    )


def looping(tag: str, give_up_after: int = scenario.GIVE_UP_AFTER) -> ScriptedModel:
    def respond(messages: list[Any]) -> str | scenario.Call:
        turn = this_turn(messages)
        if len(refusals(turn)) >= give_up_after:
            return scenario.GIVE_UP
        return scenario.loop_call(tag, len(results(turn)))

    return ScriptedModel(respond)


def search_tool(ran: list[str]) -> Any:
    @tool
    def search(query: str) -> str:
        """Search the web.

        Args:
            query: what to look for
        """
        ran.append(query)
        return f"results for {query}"

    return search


def make_agent(model: Model, tools: list[Any], hooks: list[Any]) -> Agent:
    return Agent(model=model, tools=tools, hooks=hooks, callback_handler=None)


def check_loop(agent: Agent, reply: Any, ran: list[str], tag: str = "loop") -> None:
    assert ran == ["same"] * scenario.RUNS
    messages = agent.messages
    denied = refusals(messages)
    assert [r["toolUseId"] for r in denied] == [
        f"{tag}-{scenario.RUNS}",
        f"{tag}-{scenario.RUNS + 1}",
    ]
    for r in denied:
        assert r["status"] == "error"
        scenario.assert_loop_refusal(text_of(r))
    assert all(r["status"] == "success" for r in results(messages)[: scenario.RUNS])
    # Every toolUse is answered once, by id, in the next message.
    for i, m in enumerate(messages):
        uses = [b["toolUse"]["toolUseId"] for b in m["content"] if "toolUse" in b]
        if uses:
            assert [r["toolUseId"] for r in results([messages[i + 1]])] == uses
    assert str(reply).strip() == scenario.GIVE_UP


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_loop_is_refused_at_the_sixth_copy_sync(provider: str) -> None:
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []
    with fake(after=scenario.wire_loop(fake.results_of)) as server:
        agent = make_agent(provider_model(server), [search_tool(ran)], [CircuitBreakerHooks()])
        reply = agent("find it")
    check_loop(agent, reply, ran)
    scenario.check_wire_loop(server, error_flag)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_loop_is_refused_at_the_sixth_copy_async(provider: str) -> None:
    fake, error_flag = PROVIDERS[provider]
    ran: list[str] = []
    with fake(after=scenario.wire_loop(fake.results_of)) as server:
        agent = make_agent(provider_model(server), [search_tool(ran)], [CircuitBreakerHooks()])
        reply = asyncio.run(agent.invoke_async("find it"))
    check_loop(agent, reply, ran)
    scenario.check_wire_loop(server, error_flag)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_healthy_edit_test_cycle_is_never_refused(provider: str) -> None:
    fake, _ = PROVIDERS[provider]
    edits = 15
    script = scenario.edit_test_cycle(edits)
    ran: list[str] = []

    @tool
    def run_tests(path: str) -> str:
        """Run the tests.

        Args:
            path: where the tests are
        """
        ran.append("test")
        return "1 failed"

    @tool
    def edit(file: str, text: str) -> str:
        """Edit a file.

        Args:
            file: the file
            text: the new text
        """
        ran.append("edit")
        return "ok"

    with fake(after=scenario.wire_script(fake.results_of, script, "all green")) as server:
        agent = make_agent(provider_model(server), [run_tests, edit], [CircuitBreakerHooks()])
        reply = agent("fix the bug")
    scenario.check_wire_healthy(server, script)
    assert refusals(agent.messages) == []
    assert ran.count("test") == edits + 1
    assert str(reply).strip() == "all green"


def test_agents_sharing_a_provider_and_an_agent_as_tool_have_their_own_state() -> None:
    # reset_on_new_call=False: every copy counts, so a shared state would trip the inner
    # agent at its 2nd call. The outer agent searches 4 times, then asks the inner agent,
    # which loops on the same search; it must get its own 5.
    hooks = CircuitBreakerHooks(config=Config(reset_on_new_call=False))
    ran: list[str] = []
    inner = make_agent(looping("in"), [search_tool(ran)], [hooks])

    @tool
    def ask_inner(task: str) -> str:
        """Ask the inner agent.

        Args:
            task: the task
        """
        return str(inner(task))

    def outer_respond(messages: list[Any]) -> str | scenario.Call:
        n = len(results(messages))
        if n < 4:
            return ("search", {"query": "same"}, f"o{n}")
        if n == 4:
            return ("ask_inner", {"task": "dig"}, "ask")
        return "outer done"

    outer = make_agent(ScriptedModel(outer_respond), [search_tool(ran), ask_inner], [hooks])
    reply = outer("go")
    assert str(reply).strip() == "outer done"
    assert refusals(outer.messages) == []
    check_loop(inner, scenario.GIVE_UP, ran[4:], tag="in")
    assert len(ran) == 4 + scenario.RUNS


def test_new_invocation_resets_unless_configured_not_to() -> None:
    ran: list[str] = []
    agent = make_agent(looping("loop", 1), [search_tool(ran)], [CircuitBreakerHooks()])
    agent("go")
    agent("again")
    assert len(ran) == 2 * scenario.RUNS

    ran.clear()
    keep = CircuitBreakerHooks(CircuitBreaker(Config(reset_on_user_prompt=False)))
    agent = make_agent(looping("loop", 1), [search_tool(ran)], [keep])
    agent("go")
    agent("again")  # the first call of the second invocation is refused at once
    assert len(ran) == scenario.RUNS
    assert [r["toolUseId"] for r in refusals(this_turn(agent.messages))] == ["loop-0"]


def test_a_later_hook_cannot_undo_a_refusal_and_a_cancelled_call_is_not_counted() -> None:
    class Undo(HookProvider):
        def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
            registry.add_callback(BeforeToolCallEvent, self.undo)

        def undo(self, event: BeforeToolCallEvent) -> None:
            event.cancel_tool = False  # runs at the default order, before the breaker

    ran: list[str] = []
    agent = make_agent(looping("loop"), [search_tool(ran)], [CircuitBreakerHooks(), Undo()])
    check_loop(agent, agent("go"), ran)

    class CancelAll(HookProvider):
        def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
            registry.add_callback(BeforeToolCallEvent, self.cancel)

        def cancel(self, event: BeforeToolCallEvent) -> None:
            event.cancel_tool = "not today"

    hooks = CircuitBreakerHooks()
    ran.clear()

    def eight_then_done(messages: list[Any]) -> str | scenario.Call:
        n = len(results(messages))
        return ("search", {"query": "same"}, f"s{n}") if n < 8 else "done"

    agent = make_agent(ScriptedModel(eight_then_done), [search_tool(ran)], [hooks, CancelAll()])
    agent("go")
    assert ran == []
    assert [text_of(r) for r in results(agent.messages)] == ["not today"] * 8
    assert list(hooks.breaker.store.agents()) == []  # nothing was counted


@pytest.mark.parametrize("poller", [scenario.MOVING, scenario.FROZEN, scenario.INTERLEAVED])
def test_results_as_progress(poller: scenario.Poller) -> None:
    def go(server: ScriptedServer, tools: list[Any]) -> None:
        hooks = [CircuitBreakerHooks(config=poller.config)]
        make_agent(provider_model(server), tools, hooks)("watch job 7")

    poller.drive(FakeAnthropic, tool, go, error_flag=True)
