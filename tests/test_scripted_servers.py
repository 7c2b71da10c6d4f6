"""The scripted OpenAI and Gemini servers (tests/support/fake_openai.py, fake_gemini.py)
speak what the real clients parse: checked with plain HTTP for the raw framing and with the
official `openai` and `google-genai` clients, so a harness test failing points at the
harness, not at the fake. (The Anthropic fake is checked in test_dsh_fake_model.py.)"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from conftest import require
from support.fake_gemini import FakeGemini
from support.fake_openai import FakeOpenAI
from support.scripted_server import Turn, tool_call

try:
    import openai
    from google import genai
    from google.genai import types

    HAVE = True
except ImportError:  # pragma: no cover - only without the test extra
    HAVE = False

SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
REFUSAL = "Circuit breaker: NOT run, a repeat"


@pytest.fixture(autouse=True)
def _need_clients() -> None:
    require(HAVE, "the openai and google-genai clients (extra [test])")


def post(url: str, body: dict[str, Any]) -> tuple[str, bytes]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.headers["Content-Type"], response.read()


def sse_data(raw: bytes) -> list[str]:
    lines = raw.decode().splitlines()
    return [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]


def test_chat_completions_stream_tool_call_deltas_and_done() -> None:
    call = tool_call("search", {"query": "same"})
    with FakeOpenAI([[call, call]]) as model:
        kind, raw = post(
            f"{model.origin}/chat/completions",  # also without /v1, as some clients send it
            {"model": "m", "stream": True, "messages": [], "stream_options": {"include_usage": 1}},
        )
    assert kind == "text/event-stream"
    data = sse_data(raw)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [t for d in deltas for t in d.get("tool_calls", [])]
    for index in (0, 1):
        mine = [t for t in calls if t["index"] == index]
        assert mine[0]["function"]["name"] == "search" and mine[0]["id"]
        assert json.loads("".join(t["function"]["arguments"] for t in mine)) == call["input"]
    ids = [t["id"] for t in calls if "id" in t]
    assert len(set(ids)) == 2  # one block scripted twice: two distinct calls
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"


def test_chat_completions_through_the_openai_client() -> None:
    turns: list[Any] = [tool_call("search", {"query": "same"}), "found it"]
    with FakeOpenAI(turns, model="fake-chat") as model:
        client = openai.OpenAI(base_url=model.url, api_key="dummy", max_retries=0, timeout=5)
        assert [m.id for m in client.models.list()] == ["fake-chat"]
        first = client.chat.completions.create(
            model="fake-chat", messages=[{"role": "user", "content": "go"}], tools=[SEARCH]
        )
        (call,) = first.choices[0].message.tool_calls or []
        assert first.choices[0].finish_reason == "tool_calls"
        history = [
            {"role": "user", "content": "go"},
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": REFUSAL},
        ]
        stream = client.chat.completions.create(
            model="fake-chat", messages=history, tools=[SEARCH], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == "found it"
        result = model.result_in_next_request(call.id)
    assert (result.name, result.text, result.is_error) == ("search", REFUSAL, False)
    assert model.next_request(call.id) is model.model_requests[1]


def test_responses_plain_and_streamed_through_the_openai_client() -> None:
    with FakeOpenAI([tool_call("search", {"query": "same"}), "found it"]) as model:
        client = openai.OpenAI(base_url=model.url, api_key="dummy", max_retries=0, timeout=5)
        first = client.responses.create(model="m", input="go")
        (call,) = [item for item in first.output if item.type == "function_call"]
        history: list[Any] = [
            {"role": "user", "content": "go"},
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": REFUSAL},
        ]
        with client.responses.stream(model="m", input=history) as stream:
            for _ in stream:
                pass
            assert stream.get_final_response().output_text == "found it"
        result = model.result_in_next_request(call.call_id)
    assert (result.name, result.text, result.is_error) == ("search", REFUSAL, False)


def test_gemini_through_the_google_genai_client() -> None:
    turns: list[Any] = [tool_call("search", {"query": "same"}), Turn([], "max_tokens")]
    with FakeGemini(turns, model="gemini-fake") as model:
        options = types.HttpOptions(base_url=model.url, timeout=5000)
        client = genai.Client(api_key="dummy", http_options=options)
        assert [m.name for m in client.models.list()] == ["models/gemini-fake"]
        assert client.models.count_tokens(model="gemini-fake", contents="go").total_tokens
        first = client.models.generate_content(model="gemini-fake", contents="go")
        (call,) = first.function_calls or []
        assert (call.name, call.args) == ("search", {"query": "same"})
        answer = types.FunctionResponse(id=call.id, name="search", response={"error": REFUSAL})
        history = [
            types.Content(role="user", parts=[types.Part(text="go")]),
            first.candidates[0].content,  # type: ignore[index]
            types.Content(role="user", parts=[types.Part(function_response=answer)]),
        ]
        chunks = list(client.models.generate_content_stream(model="gemini-fake", contents=history))
        assert chunks[-1].candidates[0].finish_reason == "MAX_TOKENS"  # type: ignore[index]
        result = model.result_in_next_request(str(call.id))
    assert (result.name, result.text, result.is_error) == ("search", REFUSAL, True)


def test_gemini_results_without_ids_are_keyed_by_name_and_place() -> None:
    body = {
        "contents": [
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "s", "response": {"a": 1, "b": 2}}}],
            },
            {"role": "user", "parts": [{"functionResponse": {"name": "s", "response": "ok"}}]},
        ]
    }
    with FakeGemini() as model:
        post(f"{model.url}/v1beta/models/g:generateContent", body)
        results = model.tool_results()
    assert [(r.call_id, r.text, r.is_error) for r in results] == [
        ("s#1", '{"a": 1, "b": 2}', False),
        ("s#2", "ok", False),
    ]
