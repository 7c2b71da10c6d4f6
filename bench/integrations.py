"""What each framework integration adds to a tool call, inside the real framework.

    .venv/bin/python bench/integrations.py [--calls 200] [--rounds 5] [--only langgraph,agno]
        [--set resultProgress=true]

For each framework, one agent with a scripted model makes `--calls` tool calls, each a
new one (`search(query=<n>)`, so every call is checked and recorded and none is refused),
then answers with text. The same run is timed with the breaker and without it (the
baseline, same framework, same script), alternating, `--rounds` times each; the table
shows the fastest round's wall time per tool call of each (the least disturbed by other
work on the machine), their ratio, the difference in microseconds per call, and the ratio
of the medians. With `--set KEY=VALUE` the baseline is the breaker with the defaults and
the other run adds those keys, so the difference is what they cost (`resultProgress`: the
result observed and digested after every call). The model is in-process, so this is the
framework's own overhead plus the breaker's: with a real model the ratio is far closer to 1.

The Claude Agent SDK's run time is dominated by the CLI subprocess, so for it only the
hook callback is timed, awaited in a loop, against a hook that returns {} at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

Runner = Callable[[Any], None]  # run(config): a breaker with that Config, or None for none


def pydantic_ai(calls: int) -> Runner:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    from dsh_circuit_breaker.integrations.pydantic_ai import CircuitBreakerCapability

    def respond(messages: list[Any], info: Any) -> ModelResponse:
        n = sum(isinstance(p, ToolReturnPart) for m in messages for p in getattr(m, "parts", []))
        if n < calls:
            return ModelResponse(
                parts=[ToolCallPart("search", {"query": str(n)}, tool_call_id=f"c{n}")]
            )
        return ModelResponse(parts=[TextPart("done")])

    def run(config: Any) -> None:
        caps = [CircuitBreakerCapability(config=config)] if config is not None else []
        agent = Agent(FunctionModel(respond), capabilities=caps)
        agent.tool_plain(lambda query: "r", name="search")
        agent.run_sync("go", usage_limits=_pydantic_limits(calls))

    return run


def _pydantic_limits(calls: int) -> Any:
    from pydantic_ai.usage import UsageLimits

    return UsageLimits(request_limit=calls + 10)


def langchain(calls: int) -> Runner:
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    from dsh_circuit_breaker.integrations.langchain import CircuitBreakerMiddleware

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            n = sum(isinstance(m, ToolMessage) for m in messages)
            if n < calls:
                tc = [{"name": "search", "args": {"query": str(n)}, "id": f"c{n}"}]
                message = AIMessage(content="", tool_calls=tc)
            else:
                message = AIMessage(content="done")
            return ChatResult(generations=[ChatGeneration(message=message)])

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    @tool
    def search(query: str) -> str:
        """Search."""
        return "r"

    def run(config: Any) -> None:
        middleware = [CircuitBreakerMiddleware(config=config)] if config is not None else []
        agent = create_agent(Scripted(), [search], middleware=middleware)
        agent.invoke({"messages": [HumanMessage("go")]}, {"recursion_limit": 4 * calls + 20})

    return run


def langgraph(calls: int) -> Runner:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from dsh_circuit_breaker.integrations.langgraph import CircuitBreakerToolWrapper, after_tools

    def agent(state: MessagesState) -> dict[str, Any]:
        n = sum(isinstance(m, ToolMessage) for m in state["messages"])
        if n < calls:
            tc = [{"name": "search", "args": {"query": str(n)}, "id": f"c{n}"}]
            return {"messages": [AIMessage(content="", tool_calls=tc)]}
        return {"messages": [AIMessage(content="done")]}

    @tool
    def search(query: str) -> str:
        """Search."""
        return "r"

    def run(config: Any) -> None:
        graph = StateGraph(MessagesState)
        graph.add_node("agent", agent)
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        if config is not None:
            graph.add_node("tools", CircuitBreakerToolWrapper(config=config).tool_node([search]))
            graph.add_conditional_edges("tools", after_tools("agent"))
        else:
            graph.add_node("tools", ToolNode([search]))
            graph.add_edge("tools", "agent")
        app = graph.compile()
        app.invoke({"messages": [HumanMessage("go")]}, {"recursion_limit": 4 * calls + 20})

    return run


def openai_agents(calls: int) -> Runner:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from dsh_circuit_breaker.integrations.openai_agents import guard_agent

    set_tracing_disabled(True)

    def respond(call: Any) -> Any:
        n = sum(
            1 for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"
        )
        if n < calls:
            return [function_call("search", {"query": str(n)}, call_id=f"c{n}")]
        return [assistant_message("done")]

    def run(config: Any) -> None:
        @function_tool
        def search(query: str) -> str:
            """Search."""
            return "r"

        model = ScriptedModel([ModelStep.respond(respond)] * (calls + 1))
        agent = Agent(name="bench", model=model, tools=[search])
        if config is not None:
            guard_agent(agent, config=config)
        Runner.run_sync(agent, "go", max_turns=calls + 5)

    return run


def strands(calls: int) -> Runner:
    from strands import Agent, tool
    from strands.models.model import Model

    from dsh_circuit_breaker.integrations.strands import CircuitBreakerHooks

    class Scripted(Model):
        def update_config(self, **model_config: Any) -> None:
            pass

        def get_config(self) -> Any:
            return {}

        def structured_output(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            n = sum("toolResult" in b for m in messages for b in m["content"])
            yield {"messageStart": {"role": "assistant"}}
            if n < calls:
                start = {"toolUse": {"name": "search", "toolUseId": f"c{n}"}}
                yield {"contentBlockStart": {"start": start}}
                delta = {"toolUse": {"input": json.dumps({"query": str(n)})}}
                yield {"contentBlockDelta": {"delta": delta}}
                stop = "tool_use"
            else:
                yield {"contentBlockStart": {"start": {}}}
                yield {"contentBlockDelta": {"delta": {"text": "done"}}}
                stop = "end_turn"
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": stop}}

    @tool
    def search(query: str) -> str:
        """Search.

        Args:
            query: what
        """
        return "r"

    def run(config: Any) -> None:
        hooks = [CircuitBreakerHooks(config=config)] if config is not None else []
        Agent(model=Scripted(), tools=[search], hooks=hooks, callback_handler=None)("go")

    return run


def google_adk(calls: int) -> Runner:
    from google.adk.agents import LlmAgent
    from google.adk.agents.run_config import RunConfig
    from google.adk.apps import App
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    from dsh_circuit_breaker.integrations.google_adk import CircuitBreakerPlugin

    class Scripted(BaseLlm):
        model: str = "scripted"

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            n = sum(1 for c in llm_request.contents for p in c.parts or [] if p.function_response)
            if n < calls:
                fc = types.FunctionCall(id=f"c{n}", name="search", args={"query": str(n)})
                part = types.Part(function_call=fc)
            else:
                part = types.Part(text="done")
            yield LlmResponse(content=types.Content(role="model", parts=[part]))

    def search(query: str) -> str:
        """Search."""
        return "r"

    def run(config: Any) -> None:
        agent = LlmAgent(name="bench", model=Scripted(), tools=[search])
        plugins = [CircuitBreakerPlugin(config=config)] if config is not None else []
        runner = InMemoryRunner(app=App(name="bench", root_agent=agent, plugins=plugins))

        async def go() -> None:
            await runner.session_service.create_session(
                app_name="bench", user_id="u", session_id="s"
            )
            message = types.Content(role="user", parts=[types.Part(text="go")])
            config = RunConfig(max_llm_calls=calls + 10)
            async for _ in runner.run_async(
                user_id="u", session_id="s", new_message=message, run_config=config
            ):
                pass

        asyncio.run(go())

    return run


def agno(calls: int) -> Runner:
    from agno.agent import Agent
    from agno.models.base import Model
    from agno.models.response import ModelResponse

    from dsh_circuit_breaker.integrations.agno import CircuitBreakerToolHook

    class Scripted(Model):  # type: ignore[misc]
        def _answer(self, messages: Any) -> ModelResponse:
            n = sum(m.role == "tool" for m in messages)
            if n < calls:
                call = {"name": "search", "arguments": json.dumps({"query": str(n)})}
                return ModelResponse(
                    role="assistant",
                    tool_calls=[{"id": f"c{n}", "type": "function", "function": call}],
                )
            return ModelResponse(role="assistant", content="done")

        def invoke(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            return self._answer(messages)

        async def ainvoke(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            return self._answer(messages)

        def invoke_stream(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def ainvoke_stream(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
            return response  # type: ignore[no-any-return]

        def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
            return response  # type: ignore[no-any-return]

    def search(query: str) -> str:
        """Search."""
        return "r"

    def run(config: Any) -> None:
        hooks = [CircuitBreakerToolHook(config=config)] if config is not None else None
        agent = Agent(
            model=Scripted(id="scripted"), tools=[search], tool_hooks=hooks, telemetry=False
        )
        agent.run("go")

    return run


def agent_framework(calls: int) -> Runner:
    from agent_framework import Agent, BaseChatClient, ChatResponse, Content, Message
    from agent_framework._middleware import ChatMiddlewareLayer
    from agent_framework._tools import FunctionInvocationLayer

    from dsh_circuit_breaker.integrations.agent_framework import circuit_breaker_middleware

    # The framework's own function-calling loop around a scripted model, as its provider
    # clients compose it (no telemetry layer: nothing to export).
    class Scripted(FunctionInvocationLayer, ChatMiddlewareLayer, BaseChatClient):  # type: ignore[misc]
        def _inner_get_response(
            self, *, messages: Any, stream: bool, options: Any, **kw: Any
        ) -> Any:
            n = sum(c.type == "function_result" for m in messages for c in m.contents)

            async def answer() -> Any:
                if n < calls:
                    call = Content.from_function_call(
                        call_id=f"c{n}", name="search", arguments={"query": str(n)}
                    )
                    return ChatResponse(messages=[Message(role="assistant", contents=[call])])
                return ChatResponse(messages=[Message(role="assistant", contents=["done"])])

            return answer()

    def search(query: str) -> str:
        """Search."""
        return "r"

    def run(config: Any) -> None:
        middleware = circuit_breaker_middleware(config=config) if config is not None else None
        client = Scripted(function_invocation_configuration={"max_iterations": calls + 10})
        agent = Agent(client=client, tools=[search], middleware=middleware)
        out = asyncio.run(agent.run("go"))
        assert out.text == "done", out.text  # every call ran within the loop's limits

    return run


def smolagents(calls: int) -> Runner:
    from smolagents import ChatMessage, Model, ToolCallingAgent, tool
    from smolagents.models import ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole
    from smolagents.monitoring import LogLevel

    from dsh_circuit_breaker.integrations.smolagents import guard

    class Scripted(Model):  # type: ignore[misc]
        def generate(self, messages: list[Any], **kw: Any) -> Any:
            n = sum(m.role == MessageRole.TOOL_RESPONSE for m in messages)
            name, arguments = (
                ("search", {"query": str(n)}) if n < calls else ("final_answer", {"answer": "done"})
            )
            call = ChatMessageToolCall(
                ChatMessageToolCallFunction(arguments, name), f"c{n}", "function"
            )
            return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])

    @tool
    def search(query: str) -> str:
        """Search.

        Args:
            query: what to search for.
        """
        return "r"

    def run(with_breaker: bool) -> None:
        agent = ToolCallingAgent(
            tools=[search], model=Scripted(), max_steps=calls + 10, verbosity_level=LogLevel.OFF
        )
        if with_breaker:
            guard(agent)
        assert agent.run("go") == "done"  # every call ran within the step limit

    return run


def dspy_react(calls: int) -> Runner:
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
    import dspy
    from dspy.utils.dummies import DummyLM

    from dsh_circuit_breaker.integrations.dspy import guard

    steps = [
        {"next_thought": "t", "next_tool_name": "search", "next_tool_args": {"query": str(n)}}
        for n in range(calls)
    ]
    finish = {"next_thought": "t", "next_tool_name": "finish", "next_tool_args": {}}
    answers = [*steps, finish, {"reasoning": "r", "answer": "done"}]

    def search(query: str) -> str:
        """Search."""
        return "r"

    def run(with_breaker: bool) -> None:
        react = dspy.ReAct("question -> answer", tools=[search], max_iters=calls + 10)
        if with_breaker:
            guard(react)
        with dspy.context(lm=DummyLM(answers)):
            assert react(question="go").answer == "done"

    return run


# The side-venv frameworks (pyproject.toml's side-* extras): run with that venv's python,
# e.g. .installed/side-crewai/bin/python bench/integrations.py --only crewai.


def crewai(calls: int) -> Runner:
    import os

    for key in ("CREWAI_DISABLE_TELEMETRY", "CREWAI_DISABLE_TRACKING", "OTEL_SDK_DISABLED"):
        os.environ.setdefault(key, "true")  # no uploads from a benchmark
    os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
    from crewai import Agent, Crew, Task
    from crewai.llms.base_llm import BaseLLM
    from crewai.tools import tool

    from dsh_circuit_breaker.integrations.crewai import CrewAICircuitBreaker

    @tool("search")
    def search(query: str) -> str:
        """Search."""
        return "r"

    def run(config: Any) -> None:
        made = [0]

        # Text tool calls (CrewAI's ReAct format): a custom LLM without native function
        # calling; CrewAI parses them and runs the tool through its tool-call hooks.
        class Scripted(BaseLLM):  # type: ignore[misc]
            def call(self, messages: Any, *args: Any, **kw: Any) -> Any:
                n, made[0] = made[0], made[0] + 1
                if n < calls:
                    arguments = json.dumps({"query": str(n)})
                    return f"Thought: t\nAction: search\nAction Input: {arguments}"
                return "Thought: t\nFinal Answer: done"

            def supports_function_calling(self) -> bool:
                return False

        agent = Agent(
            role="r",
            goal="g",
            backstory="b",
            tools=[search],
            llm=Scripted(model="scripted"),
            cache=False,  # CrewAI's tool cache: every call is new here anyway
            max_iter=calls + 10,
            verbose=False,
        )
        crew = Crew(
            agents=[agent], tasks=[Task(description="go", expected_output="x", agent=agent)]
        )
        if config is None:
            out = crew.kickoff()
        else:
            with CrewAICircuitBreaker(config=config):  # its hooks are global: out again after
                out = crew.kickoff()
        assert str(out) == "done", out
        assert made[0] == calls + 1  # every call ran within the iteration limit

    return run


def llamaindex(calls: int) -> Runner:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
    from llama_index.core.llms.mock import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool

    from dsh_circuit_breaker.integrations.llamaindex import LlamaIndexCircuitBreaker, guard

    def search(query: str) -> str:
        """Search."""
        return "r"

    def run(config: Any) -> None:
        made = [0]

        def respond(messages: Any, **kw: Any) -> Any:
            n, made[0] = made[0], made[0] + 1
            if n < calls:
                call = ToolCallBlock(
                    tool_call_id=f"c{n}", tool_name="search", tool_kwargs={"query": str(n)}
                )
                return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
            return ChatMessage(role=MessageRole.ASSISTANT, content="done")

        llm = MockFunctionCallingLLM(response_generator=respond)
        agent = FunctionAgent(tools=[FunctionTool.from_defaults(search)], llm=llm)
        if config is not None:
            guard(agent, LlamaIndexCircuitBreaker(config=config))

        async def go() -> str:
            return str(await agent.run(user_msg="go", max_iterations=calls + 10))

        assert asyncio.run(go()) == "done"
        assert made[0] == calls + 1

    return run


def semantic_kernel(calls: int) -> Runner:
    from semantic_kernel.agents import ChatCompletionAgent
    from semantic_kernel.connectors.ai.chat_completion_client_base import (
        ChatCompletionClientBase,
    )
    from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
    from semantic_kernel.contents import AuthorRole, ChatMessageContent, FunctionCallContent
    from semantic_kernel.functions import KernelPlugin, kernel_function

    from dsh_circuit_breaker.integrations.semantic_kernel import (
        SemanticKernelCircuitBreaker,
        guard,
    )

    def search(query: str) -> str:
        """Search."""
        return "r"

    def run(config: Any) -> None:
        made = [0]

        # Semantic Kernel's own function-calling loop (get_chat_message_contents) around a
        # scripted inner request, as its connectors do it.
        class Scripted(ChatCompletionClientBase):  # type: ignore[misc]
            SUPPORTS_FUNCTION_CALLING = True

            async def _inner_get_chat_message_contents(self, history: Any, settings: Any) -> Any:
                n, made[0] = made[0], made[0] + 1
                if n < calls:
                    arguments = json.dumps({"query": str(n)})
                    item = FunctionCallContent(id=f"c{n}", name="tools-search", arguments=arguments)
                    return [ChatMessageContent(role=AuthorRole.ASSISTANT, items=[item])]
                return [ChatMessageContent(role=AuthorRole.ASSISTANT, content="done")]

        agent = ChatCompletionAgent(
            service=Scripted(ai_model_id="scripted"),
            name="bench",
            plugins=[KernelPlugin(name="tools", functions=[kernel_function(search)])],
            function_choice_behavior=FunctionChoiceBehavior.Auto(
                maximum_auto_invoke_attempts=calls + 10
            ),
        )
        if config is not None:
            guard(agent, SemanticKernelCircuitBreaker(config=config))
        out = asyncio.run(agent.get_response(messages="go"))
        assert out.message.content == "done", out.message
        assert made[0] == calls + 1

    return run


def openhands(calls: int) -> Runner:
    """A conversation whose model (the SDK's own `TestLLM`, in-process) makes the calls;
    the breaker is its command hook, a process per call, with the config in a file and
    the state in a SQLite file of its own, as a user runs it."""
    import os
    import tempfile

    from openhands.sdk import Agent, Conversation
    from openhands.sdk.llm import Message, MessageToolCall, TextContent
    from openhands.sdk.testing import TestLLM
    from openhands.sdk.tool import (
        Action,
        Observation,
        Tool,
        ToolDefinition,
        ToolExecutor,
        register_tool,
    )

    from dsh_circuit_breaker.integrations.openhands import conversation

    class BenchSearchAction(Action):
        query: str

    class BenchSearchObservation(Observation):
        pass

    class Run(ToolExecutor):  # type: ignore[type-arg]
        def __call__(self, action: Any, conversation: Any = None) -> Any:
            return BenchSearchObservation.from_text("r")

    class BenchSearchTool(ToolDefinition[BenchSearchAction, BenchSearchObservation]):
        @classmethod
        def create(cls, conv_state: Any = None, **params: Any) -> Any:
            kinds = {"action_type": BenchSearchAction, "observation_type": BenchSearchObservation}
            return [cls(description="Search.", executor=Run(), **kinds)]

    register_tool("bench_search", BenchSearchTool)
    where = tempfile.mkdtemp(prefix="bench-openhands-")

    def script() -> list[Any]:
        made = [
            Message(
                role="assistant",
                content=[],
                tool_calls=[
                    MessageToolCall(
                        id=f"c{n}",
                        name="bench_search",
                        arguments=json.dumps({"query": str(n)}),
                        origin="completion",
                    )
                ],
            )
            for n in range(calls)
        ]
        return [*made, Message(role="assistant", content=[TextContent(text="done")])]

    def run(config: Any) -> None:
        agent = Agent(llm=TestLLM.from_messages(script()), tools=[Tool(name="bench_search")])
        kw: dict[str, Any] = {"workspace": where, "visualizer": None, "stuck_detection": False}
        if config is None:
            chat = Conversation(agent, **kw)
        else:
            path = os.path.join(where, "config.json")
            with open(path, "w") as file:
                json.dump(config.to_mapping(), file)
            state = f"sqlite:///{where}/state.db"
            chat = conversation(agent, config=path, state=state, **kw)
        chat.send_message("go")
        chat.run()
        said = [e for e in chat.state.events if type(e).__name__ == "MessageEvent"]
        assert said[-1].llm_message.content[0].text == "done"

    return run


def claude_hook(calls: int) -> tuple[float, float]:
    """Microseconds per awaited hook call: the breaker's PreToolUse callback, and a no-op."""
    from dsh_circuit_breaker.integrations.claude_agent_sdk import ClaudeCircuitBreaker

    hook = ClaudeCircuitBreaker().pre_tool_use
    context: Any = {"signal": None}

    async def noop(data: Any, tool_use_id: Any, ctx: Any) -> Any:
        return {}

    async def timed(fn: Any) -> float:
        started = time.perf_counter()
        for n in range(calls):
            data = {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": f"echo {n}"}}
            await fn(data, f"t{n}", context)
        return (time.perf_counter() - started) / calls * 1e6

    return asyncio.run(timed(hook)), asyncio.run(timed(noop))


FRAMEWORKS: dict[str, Callable[[int], Runner]] = {
    "pydantic-ai": pydantic_ai,
    "langchain": langchain,
    "langgraph": langgraph,
    "openai-agents": openai_agents,
    "strands": strands,
    "google-adk": google_adk,
    "agno": agno,
    "agent-framework": agent_framework,
    "smolagents": smolagents,
    "dspy": dspy_react,
    "crewai": crewai,
    "llamaindex": llamaindex,
    "semantic-kernel": semantic_kernel,
    "openhands": openhands,
}


def observe_cost(calls: int, config: Any) -> tuple[float, float]:
    """Microseconds per call outside any framework, in memory: `check` alone with the
    defaults, and `check` then `observe` of a poll-like result with `config`. New calls
    each time, the cap off, so every one is allowed and its result recorded."""
    from dsh_circuit_breaker import CircuitBreaker, Config

    result = "job 7: 3 books ingested, checked at 04:44:05"

    def timed(breaker: CircuitBreaker, observe: bool) -> float:
        started = time.perf_counter()
        for n in range(calls):
            arguments = {"query": str(n)}
            breaker.check("agent", "search", arguments)
            if observe:
                breaker.observe("agent", "search", arguments, result)
        return (time.perf_counter() - started) / calls * 1e6

    plain = Config.from_mapping({"maxCallsPerAgent": 0})
    keys = Config.from_mapping({"maxCallsPerAgent": 0}, base=config)
    best = [
        min(timed(CircuitBreaker(c), o) for _ in range(5))
        for c, o in ((plain, False), (keys, True))
    ]
    return best[0], best[1]


def _configs(keys: list[str]) -> tuple[Any, Any]:
    """(baseline, guarded) configs: none and the defaults, or with `keys` (KEY=VALUE) the
    defaults and the defaults plus those keys."""
    from dsh_circuit_breaker import Config

    if not keys:
        return None, Config()
    values = {}
    for item in keys:
        key, _, value = item.partition("=")
        values[key] = json.loads(value)
    return Config(), Config.from_mapping(values)


def main() -> None:
    import logging

    logging.disable(logging.WARNING)  # frameworks log per call about the scripted model
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--only", help="comma-separated framework names (default: all)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config keys for the breaker (JSON values); the baseline is then the breaker "
        "with the defaults, so 'added us' is what the keys cost",
    )
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(FRAMEWORKS)
    baseline, guard = _configs(args.set)
    against = "the breaker with the defaults" if args.set else "no breaker"
    print(f"{args.calls} new tool calls per run, {args.rounds} rounds, against {against}:")
    print(
        f"{'framework':<15}{'baseline ms':>13}{'breaker ms':>12}{'ratio':>8}"
        f"{'added us':>10}{'median ratio':>14}"
    )
    for name in chosen:
        try:
            run = FRAMEWORKS[name](args.calls)
        except ImportError as error:  # a side-venv framework, run from another venv
            print(f"{name:<16}skipped: not importable here ({error})")
            continue
        run(guard)  # warm up imports and caches for both
        run(baseline)
        base: list[float] = []
        guarded: list[float] = []
        for _ in range(args.rounds):
            for config, out in ((baseline, base), (guard, guarded)):
                started = time.perf_counter()
                run(config)
                out.append((time.perf_counter() - started) / args.calls)
        b, g = min(base), min(guarded)
        median_ratio = statistics.median(guarded) / statistics.median(base)
        print(
            f"{name:<15}{b * 1e3:>13.3f}{g * 1e3:>12.3f}{g / b:>8.3f}"
            f"{(g - b) * 1e6:>10.1f}{median_ratio:>14.3f}"
        )
    if args.set:
        alone, observed = observe_cost(20_000, guard)
        print(
            f"outside a framework: check {alone:.1f} us per call; check + observe with the "
            f"keys {observed:.1f} us (a 45-character poll result)"
        )
    if args.only:
        return
    hook, noop = claude_hook(10_000)
    print(
        f"claude-agent-sdk PreToolUse callback alone: {hook:.1f} us per call "
        f"(no-op hook {noop:.1f} us; the CLI round trip around it is milliseconds)"
    )


if __name__ == "__main__":
    main()
