"""The OpenHands SDK drives the breaker through its real hook path: `LocalConversation` runs
`dsh-circuit-breaker hook --harness openhands` (the installed wheel's, a new process per
event) from the `HookConfig` the integration builds, and the agent's LLM (LiteLLM, OpenAI
Chat Completions) talks over the wire to a scripted model server on 127.0.0.1. In the side
venv side-openhands (Python 3.12: the SDK needs it). Chat Completions has no error flag on
a tool result, so a refusal is told apart by its text, which OpenHands prefixes with
`Action rejected: `.

OpenHands' own stuck detection ends a run after four identical action-observation pairs,
before the breaker's refusal of the sixth; the loop scenarios turn it off (`stuck_detection=False`)
to reach the breaker, and one test shows what happens with it on.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from support import agent_scenarios as scenario
from support.fake_openai import FakeOpenAI
from support.scripted_server import ScriptedServer, tool_call

try:
    from openhands.sdk import LLM, Agent
    from openhands.sdk.conversation.state import ConversationExecutionStatus
    from openhands.sdk.hooks import HookConfig, HookDefinition, HookMatcher
    from openhands.sdk.tool import (
        Action,
        Observation,
        Tool,
        ToolDefinition,
        ToolExecutor,
        register_tool,
    )
    from pydantic import Field, create_model

    from dsh_circuit_breaker.integrations.openhands import conversation, hook_config, stop_reason

    HAVE = True
except ImportError:  # pragma: no cover - only without the extra
    HAVE = False

pytestmark = [pytest.mark.side("openhands"), pytest.mark.timeout(180)]
REJECTED = "Action rejected: "  # OpenHands' framing of a hook's reason


@pytest.fixture(autouse=True)
def _need_openhands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    require(HAVE, "openhands-sdk (extra [side-openhands], Python 3.12+)")
    scenario.go_offline(monkeypatch)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no cost map fetched
    # The hook processes get OpenHands' copy of this environment: a HOME of the test's own,
    # so the default state (SQLite in the user's state directory) is the test's alone.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "DSH_CIRCUIT_BREAKER_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("DSH_CIRCUIT_BREAKER_STATE", raising=False)
    monkeypatch.chdir(tmp_path)


def unframed(text: str) -> str:
    assert text.startswith(REJECTED), text
    return text.removeprefix(REJECTED)


def results_of(body: dict[str, Any]) -> list[Any]:
    return FakeOpenAI.results_of(body)


def tool(function: Callable[..., str]) -> Any:
    """`function` as an OpenHands tool (its action's fields: the function's parameters),
    registered under the function's name."""
    name = function.__name__
    camel = "".join(part.title() for part in name.split("_"))
    fields: dict[str, Any] = {
        p: (str, Field(description=p)) for p in inspect.signature(function).parameters
    }
    action = create_model(f"{camel}Action", __base__=Action, **fields)
    observation = create_model(f"{camel}Observation", __base__=Observation)

    class Run(ToolExecutor):  # type: ignore[type-arg]
        def __call__(self, act: Any, conversation: Any = None) -> Any:
            return observation.from_text(function(**act.model_dump(exclude={"kind"})))

    def create(cls: Any, conv_state: Any = None, **params: Any) -> list[Any]:
        doc = function.__doc__ or name
        return [
            cls(description=doc, action_type=action, observation_type=observation, executor=Run())
        ]

    definition = type(
        f"{camel}Tool", (ToolDefinition[action, observation],), {"create": classmethod(create)}
    )
    register_tool(name, definition)
    return Tool(name=name)


def agent(server: ScriptedServer, functions: list[Callable[..., str]]) -> Any:
    llm = LLM(
        model="openai/gpt-4o",
        base_url=server.url,
        api_key="dummy",
        num_retries=0,
        usage_id="agent",
    )
    return Agent(llm=llm, tools=[tool(f) for f in functions])


def config_file(tmp_path: Path, **keys: Any) -> str:
    path = tmp_path / "breaker.json"
    path.write_text(json.dumps(keys))
    return str(path)


def run(chat: Any, prompt: str) -> Any:
    chat.send_message(prompt)
    chat.run()
    return chat


def last_answer(chat: Any) -> str:
    from openhands.sdk.event import MessageEvent

    said = [e for e in chat.state.events if isinstance(e, MessageEvent) and e.source == "agent"]
    return "".join(c.text for c in said[-1].llm_message.content) if said else ""


def web_tools(ran: list[str]) -> list[Callable[..., str]]:
    search = scenario.search_function(ran)

    def web_search(query: str) -> str:
        """Search the web."""
        return search(query)

    return [search, web_search]


def looping(server: ScriptedServer, ran: list[str], **kw: Any) -> Any:
    return conversation(
        agent(server, [scenario.search_function(ran)]),
        workspace=".",
        visualizer=None,
        stuck_detection=False,
        **kw,
    )


def test_loop_is_refused_at_the_sixth_copy() -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop(results_of)) as server:
        chat = run(looping(server, ran), "find it")
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_loop(server, False, refusal=unframed)
    assert last_answer(chat) == scenario.GIVE_UP
    assert stop_reason(chat) is None
    assert chat.state.execution_status == ConversationExecutionStatus.FINISHED


def test_healthy_edit_test_cycle_is_never_refused() -> None:
    script = scenario.edit_test_cycle(15)
    ran: list[str] = []
    run_tests, edit = scenario.edit_test_functions(ran)
    with FakeOpenAI(after=scenario.wire_script(results_of, script, "fixed")) as server:
        chat = conversation(agent(server, [run_tests, edit]), workspace=".", visualizer=None)
        run(chat, "fix the tests")
    assert ran == ["test", "edit"] * 15 + ["test"]
    scenario.check_wire_healthy(server, script)
    assert last_answer(chat) == "fixed"


def test_a_looping_agent_is_stopped_at_its_third_refusal() -> None:
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop_forever(results_of)) as server:
        chat = run(looping(server, ran), "find it")
    assert ran == ["same"] * scenario.RUNS
    scenario.check_wire_stop(server, False, refusal=unframed)
    assert chat.state.execution_status == ConversationExecutionStatus.PAUSED
    assert stop_reason(chat) == scenario.STOP_REASON


def test_a_stopped_conversation_goes_on_at_the_next_message() -> None:
    ran: list[str] = []
    loop = scenario.wire_loop_forever(results_of)

    def respond(body: dict[str, Any]) -> Any:
        text = json.dumps(body["messages"][-1])
        return "back to work" if "try again" in text else loop(body)

    with FakeOpenAI(after=respond) as server:
        chat = run(looping(server, ran), "find it")
        assert stop_reason(chat) == scenario.STOP_REASON
        run(chat, "try again")
    assert stop_reason(chat) is None
    assert last_answer(chat) == "back to work"
    assert chat.state.execution_status == ConversationExecutionStatus.FINISHED


def test_stop_after_denials_zero_keeps_the_plain_refusals(tmp_path: Path) -> None:
    ran: list[str] = []
    config = config_file(tmp_path, stopAfterDenials=0)
    with FakeOpenAI(after=scenario.wire_loop(results_of)) as server:
        chat = run(looping(server, ran, config=config), "find it")
    scenario.check_wire_loop(server, False, refusal=unframed)
    assert stop_reason(chat) is None
    assert chat.state.execution_status == ConversationExecutionStatus.FINISHED


def test_a_web_search_budget_of_12_refuses_the_13th(tmp_path: Path) -> None:
    ran: list[str] = []
    config = config_file(tmp_path, toolLimits={"web_search": scenario.BUDGET})
    with FakeOpenAI(after=scenario.wire_searching(results_of)) as server:
        chat = conversation(
            agent(server, web_tools(ran)), workspace=".", visualizer=None, config=config
        )
        run(chat, "research it")
    assert len(ran) == scenario.BUDGET
    sent = server.tool_results()
    assert sent[-1].text == REJECTED + scenario.BUDGET_TEXT
    server_view = [r.text for r in sent[:-1]]
    assert server_view == [f"results for topic {n}" for n in range(scenario.BUDGET)]
    assert last_answer(chat) == scenario.DONE_SEARCHING


def test_conversations_are_keyed_apart() -> None:
    """Two conversations looping on the same call: each is an agent of its own (keyed by
    its conversation id), so each runs its five before its refusals."""
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop(results_of)) as server:
        first = run(looping(server, ran), "find it")
        second = run(looping(server, ran), "find it")
    assert first.id != second.id
    assert ran == ["same"] * (2 * scenario.RUNS)
    texts = [r.text for r in server.tool_results()]
    assert sum(scenario.is_refusal(t) for t in texts) == 2 * scenario.GIVE_UP_AFTER


def test_a_bad_config_fails_when_the_hooks_are_built(tmp_path: Path) -> None:
    bad = config_file(tmp_path, maxRepeats=-1)
    with pytest.raises(ValueError, match="maxRepeats"):
        hook_config(bad)
    with pytest.raises(ValueError, match="nope"):
        hook_config(state="sqlite:///x.db?nope=1")


def test_our_hook_runs_first_and_no_other_hook_sees_a_refused_call(tmp_path: Path) -> None:
    seen = tmp_path / "other-hook.log"
    other = HookConfig(
        pre_tool_use=[HookMatcher(hooks=[HookDefinition(command=f"cat >> {seen}; echo >> {seen}")])]
    )
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop(results_of)) as server:
        run(looping(server, ran, hook_config=other), "find it")
    lines = [json.loads(line) for line in seen.read_text().splitlines() if line.strip()]
    # The five allowed calls; the two refused ones stopped at ours.
    assert len(lines) == scenario.RUNS
    assert all(line["tool_name"] == "search" for line in lines)


def test_with_results_observed_a_moving_poll_is_not_refused(tmp_path: Path) -> None:
    """resultProgress, on by default: the post-tool hook goes in too, and a poll whose
    output changes every time is progress, not a loop. Turned off, no post-tool hook."""
    config = config_file(tmp_path)
    assert hook_config(config).post_tool_use and hook_config().post_tool_use
    (tmp_path / "off").mkdir()
    assert not hook_config(config_file(tmp_path / "off", resultProgress=False)).post_tool_use
    count = {"n": 0}

    def status(job: str) -> str:
        """Poll the job."""
        count["n"] += 1
        return f"running, {count['n'] * 10}% done"

    def respond(body: dict[str, Any]) -> Any:
        n = len(results_of(body))
        return "finished" if n >= 10 else tool_call("status", {"job": "j1"}, f"p{n}")

    with FakeOpenAI(after=respond) as server:
        chat = conversation(
            agent(server, [status]),
            workspace=".",
            visualizer=None,
            stuck_detection=False,
            config=config,
        )
        run(chat, "wait for the job")
    assert count["n"] == 10
    assert not any(scenario.is_refusal(r.text) for r in server.tool_results())


def test_a_task_subagent_with_our_hooks_is_guarded_and_counted_on_its_own() -> None:
    """The task tool runs a subagent as a conversation of its own, with the hooks of its
    agent definition (not its parent's): given `hook_config()`, its loop is refused after
    its own five runs, though its parent ran the very same call five times before.

    The subagent's search answers a little differently each time (the time it took), as
    live searches do: OpenHands' stuck detection, which the task tool leaves on in a
    subagent, looks for identical observations and so never ends this loop; the breaker
    masks durations before comparing results, so no copy counts as progress, and it
    does."""
    from openhands.sdk.subagent import AgentDefinition, register_agent_if_absent
    from openhands.tools.task import TaskToolSet

    ran: list[str] = []

    def search(query: str) -> str:
        """Search the web."""
        ran.append(query)
        return f"results for {query} in {len(ran)}ms"

    definition = AgentDefinition(
        name="searcher", description="Searches the web.", tools=["search"], hooks=hook_config()
    )
    register_agent_if_absent(
        "searcher", lambda llm: Agent(llm=llm, tools=[tool(search)]), definition
    )
    sub_loop = scenario.wire_loop(results_of, tag="sub")

    def respond(body: dict[str, Any]) -> Any:
        first = json.dumps([m for m in body["messages"] if m.get("role") == "user"][:1])
        if "delegate" not in first:  # the subagent's conversation
            return sub_loop(body)
        n = len(results_of(body))
        if n < scenario.RUNS:
            return tool_call(*scenario.loop_call("parent", n))
        if n == scenario.RUNS:
            task = {"prompt": "find it", "subagent_type": "searcher", "description": "search"}
            return tool_call("task", task, "task-0")
        return "delegated"

    with FakeOpenAI(after=respond) as server:
        llm = agent(server, []).llm
        parent = Agent(llm=llm, tools=[tool(search), Tool(name=TaskToolSet.name)])
        chat = conversation(parent, workspace=".", visualizer=None, stuck_detection=False)
        run(chat, "delegate the search")
    # The parent's five, then the subagent's own five.
    assert ran == ["same"] * (2 * scenario.RUNS)
    for n in range(scenario.RUNS + scenario.GIVE_UP_AFTER):
        result = server.result_in_next_request(f"sub-{n}")
        if n < scenario.RUNS:
            assert result.text == f"results for same in {scenario.RUNS + 1 + n}ms"
        else:
            scenario.assert_loop_refusal(unframed(result.text))
    task_result = [r.text for r in server.tool_results() if r.call_id == "task-0"]
    assert len(task_result) == 1 and scenario.GIVE_UP in task_result[0]
    assert last_answer(chat) == "delegated"


def test_with_stuck_detection_on_openhands_ends_an_identical_loop_first() -> None:
    """OpenHands' default: four identical action-observation pairs make the conversation
    STUCK, before the breaker's refusal of the sixth; nothing is refused and the breaker
    stays quiet."""
    ran: list[str] = []
    with FakeOpenAI(after=scenario.wire_loop(results_of)) as server:
        chat = conversation(
            agent(server, [scenario.search_function(ran)]), workspace=".", visualizer=None
        )
        run(chat, "find it")
    assert ran == ["same"] * 4
    assert chat.state.execution_status == ConversationExecutionStatus.STUCK
    assert not any(scenario.is_refusal(r.text) for r in server.tool_results())
    assert stop_reason(chat) is None
