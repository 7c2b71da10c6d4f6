"""The shared fake model (tests/support/fake_anthropic.py) speaks the wire format the harnesses
parse: checked here with plain HTTP so a harness test failing points at the harness, not it."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from support.fake_anthropic import FakeAnthropic, Turn, text, tool_use


def _post(url: str, body: dict[str, Any]) -> tuple[str, bytes]:
    request = urllib.request.Request(
        url + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.headers["Content-Type"], response.read()


def _events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in raw.decode().split("\n\n"):
        if not chunk.strip():
            continue
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_streams_a_tool_use_turn_and_logs_tool_results() -> None:
    call = tool_use("bash", {"command": "echo hi", "description": "say hi"})
    with FakeAnthropic([[text("Running."), call], call, "Finished."]) as model:
        kind, raw = _post(model.url, {"model": "m", "stream": True, "messages": []})
        assert kind == "text/event-stream"
        events = _events(raw)
        names = [name for name, _ in events]
        assert names[0] == "message_start" and names[-1] == "message_stop"
        tool_start = next(d for n, d in events if n == "content_block_start" and d["index"] == 1)
        assert tool_start["content_block"]["name"] == "bash"
        partial = "".join(
            d["delta"]["partial_json"]
            for n, d in events
            if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"
        )
        assert json.loads(partial) == call["input"]
        stop = next(d for n, d in events if n == "message_delta")["delta"]["stop_reason"]
        assert stop == "tool_use"

        first_id = model.tool_uses()[0]["id"]
        history = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": model.replies[0].blocks},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": first_id,
                        "is_error": True,
                        "content": [{"type": "text", "text": "Error: denied"}],
                    }
                ],
            },
        ]
        _, raw = _post(model.url, {"model": "m", "stream": False, "messages": history})
        second = json.loads(raw)
        # The same block object scripted twice still gets a fresh id.
        assert second["content"][0]["id"] != first_id
        _, raw = _post(model.url, {"model": "m", "stream": False, "messages": history})
        assert json.loads(raw)["content"] == [{"type": "text", "text": "Finished."}]
        _, raw = _post(model.url, {"model": "m", "stream": False, "messages": history})
        assert json.loads(raw)["content"][0]["text"] == "Done."  # script exhausted

    results = model.tool_results()
    assert len(results) == 1  # repeated history is not double counted
    assert results[0].is_error and results[0].text == "Error: denied"
    assert len(model.requests) == 4


def test_callable_turns_and_side_requests() -> None:
    def answer(body: dict[str, Any]) -> Turn:
        return Turn([text(f"saw {len(body['messages'])}")], stop_reason="end_turn")

    with FakeAnthropic([answer], side=lambda body: body.get("model") == "small") as model:
        _, raw = _post(model.url, {"model": "small", "messages": []})
        assert json.loads(raw)["content"][0]["text"] == "OK"
        _, raw = _post(model.url, {"model": "big", "messages": [{"role": "user", "content": "x"}]})
        assert json.loads(raw)["content"][0]["text"] == "saw 1"
