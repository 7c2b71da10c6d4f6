"""Writes bench/peer_suites/<suite>.json: the tool-call scenarios of other projects' loop
detection tests, transcribed by hand from their public sources, as tau-bench records.

    .venv/bin/python bench/peer_suites/build.py [--out DIR]

Each scenario is a sequence of tool calls (with the tool's result where the test records
one) and the peer's expectation:
- `healthy`: the peer's test asserts the sequence is not blocked ("does not halt",
  "does not block", `stuck: false`, Cline's verdict never `hard`);
- `loop`: the peer's test asserts a halt or block (Qwen/Gemini `true`, OpenClaw
  `critical`, Cline `hard`);
- `warn`: the peer only warns at that length (OpenClaw `warning` on a sequence whose
  longer twin is a `critical` test); reported, but counted neither way.

A healthy scenario is the test's calls exactly, its final probe (the call the test asks
the detector about, `detectToolCallLoop(...)`/`inspect(...)`) included with no result. A
loop does not end by itself: a loop scenario is the test's calls continued by the test's
own pattern (its formula in the call index, or its fixed list again) to LOOP_CALLS calls,
so that a rule which never stops it is stopped only by the 300-call cap.

Left out: tests of hashing, configuration, disabling, and of the peers' own event model
(content/thought streams, API retries, `reset()` for a new prompt), which have no
counterpart in a sequence of executed tool calls.

A result is recorded as the harness would hand it on: a JSON value as its JSON text, a
string as itself, a failure as "Error: <message>" (the tau-bench convention our reader
takes as failed). Qwen's oversized-result stubs are built in the shape of its
`utils/truncation.ts` (marker lines, per-call file path, `Full output sha256:` line); the
bytes around them are ours.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP_CALLS = 320  # past the default 300-call cap

SOURCES = {
    "openclaw": {
        "repository": "openclaw/openclaw",
        "commit": "0410b692512e3dc7f52a82e7a9ddb875b1548581",
        "path": "src/agents/tool-loop-detection.test.ts",
        "licence": "MIT",
    },
    "qwen-code": {
        "repository": "QwenLM/qwen-code",
        "commit": "00aa71b4a0a37df1c392eb9b90e1c53d008fdce5",
        "path": "packages/core/src/services/loopDetectionService.test.ts",
        "licence": "Apache-2.0",
        "note": "includes the result-aware guards of issue/PR #9450",
    },
    "cline": {
        "repository": "cline/cline",
        "commit": "1368c71a76eab98c8e5a41fcdfe2d2e2285da1c7",
        "path": "sdk/packages/core/src/runtime/safety/loop-detection.test.ts",
        "licence": "Apache-2.0",
        "note": "PR #12543 head (refs/pull/12543/head)",
    },
    "gemini-cli": {
        "repository": "google-gemini/gemini-cli",
        "commit": "5411f113cafae26161b4969b0237b8e1e024e2c2",
        "path": "packages/core/src/services/loopDetectionService.test.ts",
        "licence": "Apache-2.0",
    },
}

NO_RESULT = object()


@dataclass
class Call:
    tool: str
    arguments: Any
    result: Any = NO_RESULT
    failed: bool = False


Step = Call | list[Call]  # a list: one assistant turn with parallel calls
Gen = Callable[[int], Step]


@dataclass
class Suite:
    name: str
    scenarios: list[dict[str, Any]] = field(default_factory=list)

    def add(
        self,
        test: str,
        expect: str,
        gen: Gen,
        n: int,
        probe: Call | None = None,
        note: str | None = None,
    ) -> None:
        """`gen(i)` is the test's i-th step, `n` its steps; a loop goes on with gen(n), ..."""
        steps = [gen(i) for i in range(n)]
        if expect == "loop":
            i = n
            while _calls(steps) < LOOP_CALLS:
                steps.append(gen(i))
                i += 1
        elif probe is not None:
            steps.append(probe)
        info: dict[str, Any] = {"suite": self.name, "test": test, "expect": expect}
        if note:
            info["note"] = note
        info["source"] = SOURCES[self.name]
        number = len(self.scenarios) + 1
        self.scenarios.append(
            {
                "task_id": f"{self.name}-{number:03d}",
                "info": info,
                "traj": _messages(steps, number),
            }
        )


def _calls(steps: list[Step]) -> int:
    return sum(len(s) if isinstance(s, list) else 1 for s in steps)


def _text(result: Any) -> str:
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"))


def _messages(steps: list[Step], number: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    k = 0
    for step in steps:
        batch = step if isinstance(step, list) else [step]
        ids = []
        for _ in batch:
            k += 1
            ids.append(f"s{number}c{k}")
        messages.append(
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": cid,
                        "function": {"name": c.tool, "arguments": json.dumps(c.arguments)},
                    }
                    for cid, c in zip(ids, batch, strict=True)
                ],
            }
        )
        for cid, c in zip(ids, batch, strict=True):
            if c.result is NO_RESULT:
                continue
            text = _text(c.result)
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": cid,
                    "content": f"Error: {text}" if c.failed else text,
                }
            )
    return messages


def cycle(items: list[Call]) -> Gen:
    return lambda i: items[i % len(items)]


def same(call: Call) -> Gen:
    return lambda i: call


# ---------------------------------------------------------------- OpenClaw


def oc_result(text: str, details: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "details": details}


def openclaw() -> Suite:
    s = Suite("openclaw")
    read_same = Call("read", {"path": "/same.txt"})
    read_same_out = Call("read", {"path": "/same.txt"}, oc_result("same output", {"ok": True}))
    poll = {"action": "poll", "sessionId": "sess-1"}
    poll_frozen = Call(
        "process",
        poll,
        oc_result(
            "(no new output)\n\nProcess still running.",
            {"status": "running", "aggregated": "steady"},
        ),
    )

    s.add(
        "does not flag unique tool calls",
        "healthy",
        lambda i: Call("read", {"path": f"/file{i}.txt"}),
        15,
        probe=Call("read", {"path": "/new-file.txt"}),
    )
    s.add("detects repeated history within the same run", "warn", same(read_same), 10, read_same)
    s.add("warns on generic repeated tool+args calls", "warn", same(read_same), 10, read_same)
    s.add("blocks generic no-progress loops at critical threshold", "loop", same(read_same_out), 20)
    s.add("warns for known polling no-progress loops", "warn", same(poll_frozen), 10, poll_frozen)
    s.add(
        "blocks known polling no-progress loops at critical threshold",
        "loop",
        same(poll_frozen),
        20,
    )
    s.add(
        "does not block known polling when output progresses",
        "healthy",
        lambda i: Call(
            "process",
            poll,
            oc_result(f"line {i}", {"status": "running", "aggregated": f"line {i}"}),
        ),
        25,
        probe=Call("process", poll),
    )
    s.add("blocks any tool with global no-progress breaker at 30", "loop", same(read_same_out), 30)

    def write(path: str, text: str | None = None, details: dict[str, Any] | None = None) -> Call:
        return Call(
            "write",
            {"path": path, "content": "same content"},
            oc_result(text or f"wrote {path}", details or {"ok": True, "path": path}),
        )

    churn = ["/tmp/a.md", "/tmp/b.md", "/tmp/a.md", "/tmp/a.md", "/tmp/b.md"]
    s.add(
        "blocks repeated stable argument churn with the global circuit breaker",
        "loop",
        lambda i: write(churn[i % len(churn)]),
        30,
    )
    s.add(
        "blocks stable argument churn despite bounded singleton probes",
        "loop",
        lambda i: write(f"/tmp/probe-{i}.md" if i in (8, 19) else f"/tmp/{i % 2}.md"),
        30,
    )
    next_write = Call("write", {"path": "/tmp/next.md", "content": "same content"})
    s.add(
        "does not block a one-shot batch of distinct arguments",
        "healthy",
        lambda i: write(f"/tmp/file-{i}.md", "write complete", {"ok": True}),
        30,
        probe=next_write,
    )
    s.add(
        "does not block a legitimate two-pass batch",
        "healthy",
        lambda i: write(f"/tmp/batch-{i % 15}.md"),
        30,
        probe=next_write,
    )
    s.add(
        "does not block argument churn when a repeated variant makes progress",
        "healthy",
        lambda i: write(
            "/tmp/a.md" if i % 2 == 0 else "/tmp/b.md",
            f"write {'/tmp/a.md' if i % 2 == 0 else '/tmp/b.md'} revision {i}",
            {"ok": True, "revision": i},
        ),
        30,
        probe=Call("write", {"path": "/tmp/c.md", "content": "same content"}),
    )
    grafana = {"command": "grafana-api.sh datasources"}
    s.add(
        "blocks repeated completed exec calls despite volatile runtime details",
        "loop",
        lambda i: Call(
            "exec",
            grafana,
            oc_result(
                "Loki\nPrometheus",
                {
                    "status": "completed",
                    "exitCode": 0,
                    "durationMs": 100 + i,
                    "cwd": f"/tmp/run-{i}",
                    "aggregated": "Loki\nPrometheus",
                },
            ),
        ),
        20,
    )
    tail = {"command": "tail -f /var/log/app.log", "yieldMs": 1000}
    s.add(
        "blocks repeated running exec calls despite volatile session details and text",
        "loop",
        lambda i: Call(
            "exec",
            tail,
            oc_result(
                f"Command still running (session sess-{i}, pid {1000 + i})",
                {
                    "status": "running",
                    "sessionId": f"sess-{i}",
                    "pid": 1000 + i,
                    "startedAt": 1_767_225_600_000 + i,  # the test's Date.now() + index
                    "cwd": f"/tmp/run-{i}",
                    "tail": "(no new output)",
                },
            ),
        ),
        20,
    )
    s.add(
        "keeps changing exec output below the global no-progress breaker",
        "healthy",
        lambda i: Call(
            "exec",
            {"command": "date"},
            oc_result(
                f"tick {i}",
                {
                    "status": "completed",
                    "exitCode": 0,
                    "durationMs": 100 + i,
                    "aggregated": f"tick {i}",
                },
            ),
        ),
        30,
        probe=Call("exec", {"command": "date"}),
        note="the peer warns (level warning) but does not block",
    )
    s.add(
        "keeps changing empty-output exec failures below the global no-progress breaker",
        "healthy",
        lambda i: Call(
            "exec",
            {"command": "openclaw flaky-helper"},
            oc_result(
                f"Runtime failed before spawn: attempt {i}",
                {"status": "failed", "exitCode": None, "durationMs": 100 + i, "aggregated": ""},
            ),
        ),
        30,
        probe=Call("exec", {"command": "openclaw flaky-helper"}),
        note="the peer warns (level warning) but does not block",
    )
    s.add(
        "does not block repeated unknown-tool failures before the unknown-tool threshold",
        "healthy",
        lambda i: Call("exec", {"command": f"echo {i}"}, "Tool exec not found", failed=True),
        9,  # UNKNOWN_TOOL_THRESHOLD - 1, the threshold being 10
        probe=Call("exec", {"command": "echo still allowed"}),
    )
    attempts: list[dict[str, Any]] = [
        {"command": "ls"},
        {"command": "pwd"},
        {"input": "whoami"},
        {"cmd": "env"},
        {"shell": "bash -lc ls"},
        {"command": "printf ok"},
        {"cwd": "/tmp", "command": "ls"},
        {"args": ["ls", "/tmp"]},
        {"command": "find . -maxdepth 1"},
        {"text": "run ls"},
        {"command": "uname -a"},
        {"command": "id"},
        {"command": "date"},
        {"command": "ps"},
        {"command": "df -h"},
        {"command": "free -m"},
        {"command": "ls /tmp"},
        {"command": "ls -la"},
        {"command": "cat /etc/hostname"},
        {"command": "echo done"},
    ]
    s.add(
        "blocks repeated unknown-tool failures even when the args keep changing",
        "loop",
        cycle([Call("exec", a, "Tool exec not found", failed=True) for a in attempts]),
        20,
    )
    read_a, list_ws = {"path": "/a.txt"}, {"dir": "/workspace"}
    s.add(
        "warns on ping-pong alternating patterns",
        "warn",
        lambda i: Call("read", read_a) if i % 2 == 0 else Call("list", list_ws),
        9,
        probe=Call("list", list_ws),
    )

    def ping_pong(text: Callable[[str, int], str]) -> Gen:
        def gen(i: int) -> Call:
            tool, args = ("read", read_a) if i % 2 == 0 else ("list", list_ws)
            return Call(tool, args, oc_result(text(tool, i), {"ok": True}))

        return gen

    s.add(
        "blocks ping-pong alternating patterns at critical threshold",
        "loop",
        ping_pong(lambda tool, i: f"{tool} stable"),
        19,
    )
    s.add(
        "does not block ping-pong at critical threshold when outcomes are progressing",
        "healthy",
        ping_pong(lambda tool, i: f"{tool} {i}"),
        19,
        probe=Call("list", list_ws),
        note="the peer warns (level warning) but does not block",
    )
    broken = [
        Call("read", read_a),
        Call("list", list_ws),
        Call("read", read_a),
        Call("write", {"path": "/tmp/out.txt"}),
    ]
    s.add(
        "does not flag ping-pong when alternation is broken",
        "healthy",
        cycle(broken),
        4,
        probe=Call("list", list_ws),
    )

    def send_payload(i: int) -> dict[str, Any]:
        return {
            "ok": True,
            "channel": "feishu",
            "chatId": "oc_chat",
            "runId": f"run_{i}",
            "messageId": f"om_{i}",
            "receipt": {"platformMessageId": f"p_{i}"},
        }

    def send(tool: str, args: dict[str, Any], payload: dict[str, Any]) -> Call:
        # jsonResult(payload): the text is the payload pretty-printed, details the payload
        text = json.dumps(payload, indent=2)
        return Call(tool, args, {"content": [{"type": "text", "text": text}], "details": payload})

    ping = {"action": "send", "target": "feishu:oc_chat", "text": "ping"}
    s.add(
        "escalates identical-arg send loops to critical even though every id differs",
        "loop",
        lambda i: send("message", ping, send_payload(i)),
        20,
    )
    s.add(
        "also blocks sessions_send loops whose result carries a fresh runId",
        "loop",
        lambda i: send(
            "sessions_send",
            {"sessionKey": "agent:main:peer", "text": "ping"},
            {"ok": True, "runId": f"run_{i}"},
        ),
        20,
    )
    s.add(
        "escalates provider-docked send-tool loops (e.g. telegram) whose result carries fresh ids",
        "loop",
        lambda i: send("telegram", {"to": "telegram:123", "text": "ping"}, send_payload(i)),
        20,
    )
    s.add(
        "escalates sibling delivery actions (reply) the same as send",
        "loop",
        lambda i: send(
            "message",
            {"action": "reply", "target": "feishu:oc_chat", "text": "ping"},
            send_payload(i),
        ),
        20,
    )
    s.add(
        "blocks upload-file loops whose result carries a fresh file id",
        "loop",
        lambda i: send(
            "message",
            {"action": "upload-file", "target": "feishu:oc_chat", "media": "img.png"},
            {"ok": True, "channel": "feishu", "fileId": f"f_{i}", "messageId": f"om_{i}"},
        ),
        20,
    )
    s.add(
        "blocks poll loops whose result carries a fresh poll id",
        "loop",
        lambda i: send(
            "message",
            {"action": "poll", "target": "tg:chat-1", "question": "?"},
            {
                "ok": True,
                "channel": "telegram",
                "messageId": f"om_{i}",
                "chatId": "c1",
                "pollId": f"pl_{i}",
            },
        ),
        20,
    )
    s.add(
        "does not flag distinct messages (different args) as a no-progress loop",
        "healthy",
        lambda i: send(
            "message",
            {"action": "send", "target": "feishu:oc_chat", "text": f"line {i}"},
            send_payload(i),
        ),
        20,
        probe=Call("message", {"action": "send", "target": "feishu:oc_chat", "text": "line final"}),
    )
    s.add(
        "still escalates repeated plugin/approval vetoes to a critical loop",
        "loop",
        same(
            Call(
                "message",
                {"action": "read", "target": "feishu:oc_chat"},
                oc_result(
                    "blocked", {"status": "blocked", "deniedReason": "plugin-before-tool-call"}
                ),
            )
        ),
        20,
    )
    hello = {"action": "send", "to": "feishu:chat-1", "content": "hello"}
    s.add(
        "blocks plugin-shaped send results whose message object carries a bare per-send id",
        "loop",
        lambda i: send(
            "message",
            hello,
            {
                "message": {
                    "id": f"qa_{i}",
                    "accountId": "default",
                    "direction": "outbound",
                    "conversation": {"id": "loop-room", "chatType": "channel"},
                    "senderId": "openclaw",
                    "text": "hello",
                    "timestamp": 1_800_000_000_000 + i,
                }
            },
        ),
        20,
    )
    s.add(
        "does not escalate when a stable conversation id changes between sends",
        "healthy",
        lambda i: send(
            "message",
            hello,
            {
                "message": {
                    "id": f"qa_{i}",
                    "direction": "outbound",
                    "conversation": {"id": f"loop-room-{i}", "chatType": "channel"},
                    "text": "hello",
                }
            },
        ),
        20,
        probe=Call("message", hello),
        note="the peer may warn but must not reach critical",
    )
    return s


# ---------------------------------------------------------------- Gemini CLI


def gemini() -> Suite:
    s = Suite("gemini-cli")
    t = Call("testTool", {"param": "value"})
    s.add(
        "should not detect a loop for fewer than TOOL_CALL_LOOP_THRESHOLD identical calls",
        "healthy",
        same(t),
        4,
    )
    s.add(
        "should detect a loop on the TOOL_CALL_LOOP_THRESHOLD-th identical call", "loop", same(t), 5
    )
    s.add("should detect a loop on subsequent identical calls", "loop", same(t), 6)
    three = [
        Call("testTool", {"param": "value1"}),
        Call("testTool", {"param": "value2"}),
        Call("anotherTool", {"param": "value1"}),
    ]
    s.add("should not detect a loop for different tool calls", "healthy", cycle(three), 9)
    s.add(
        "should not reset tool call counter for other event types",
        "loop",
        same(t),
        5,
        note="the non-tool event between the 4th and 5th call is not a tool call",
    )
    files = [Call("read_file", {"file_path": f"loop_{x}.txt"}) for x in "abc"]
    s.add(
        "should detect an alternating tool call loop (cycle of length 2)",
        "loop",
        cycle(files[:2]),
        15,
    )
    s.add("should detect a cyclic tool call loop of length 3", "loop", cycle(files), 20)
    s.add(
        "should detect a cyclic tool call loop of length 5",
        "loop",
        cycle([Call("t", {"id": k}) for k in range(1, 6)]),
        30,
    )
    a, b, c = files
    s.add(
        "should not detect loops for non-looping alternating sequences that vary",
        "healthy",
        cycle([a, b, a, b, c, a, b, a, b]),
        9,
    )
    return s


# ---------------------------------------------------------------- Qwen Code

TASK_LIST_ARGS = {"status": "in_progress", "owner": "peer-a", "blockedBy": ""}
UNCHANGED = "#1 [in_progress] @peer-a — task"
FROZEN_BOARD = "task row for a frozen board\n" * 1500


def tl(result: Any = NO_RESULT) -> Call:
    return Call("task_list", TASK_LIST_ARGS, result if result is NO_RESULT else {"output": result})


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def persisted_stub(call_id: str, board: str) -> str:
    return (
        "<persisted-output>\n"
        f"Output too large ({len(board.encode())} bytes). Full output saved to: "
        f"/tmp/qwen/tool-results/{call_id}.txt\n"
        f"Full output sha256: {sha(board)}\n\n"
        f"Preview (up to 2000 chars):\n{board[:2000]}\n"
        "</persisted-output>"
    )


def unwrapped_stub(note: str, board: str) -> str:
    return (
        f"Output too large ({len(board.encode())} bytes). {note}\n"
        f"Full output sha256: {sha(board)}\n\n"
        f"Preview (up to 2000 chars):\n{board[:2000]}"
    )


def truncated_stub(spill: str, name: str, content: str, head: int, tail: int) -> str:
    lines = content.split("\n")
    part = "\n".join(lines[:head]) + "\n\n---\n... [CONTENT TRUNCATED] ...\n---\n\n"
    part += "\n".join(lines[-tail:])
    return (
        "Tool output was too large and has been truncated.\n"
        f"The full output has been saved to: {spill}/{name}.output\n"
        "To read the complete output, use the read_file tool with the absolute file path "
        "above.\nThe truncated output below shows the beginning and end of the content. The "
        "marker '... [CONTENT TRUNCATED] ...' indicates where content was removed.\n"
        f"Full output sha256: {sha(content)}\n\nTruncated part of the output:\n{part}"
    )


def budget_fit(call_id: str, board: str) -> str:
    head, tail = board[:500], board[-900:]
    return (
        f"[Output fitted to the batch budget; full output: /tmp/qwen/tool-results/{call_id}.txt]\n"
        f"Full output sha256: {sha(board)}\n{head}\n... [fitted] ...\n{tail}"
    )


def qwen() -> Suite:
    s = Suite("qwen-code")
    t = Call("testTool", {"param": "value"})
    s.add(
        "should not detect a loop for fewer than TOOL_CALL_LOOP_THRESHOLD identical calls",
        "healthy",
        same(t),
        4,
    )
    s.add(
        "should detect a loop on the TOOL_CALL_LOOP_THRESHOLD-th identical call", "loop", same(t), 5
    )
    s.add("should detect a loop on subsequent identical calls", "loop", same(t), 6)
    s.add(
        "should not detect a loop for different tool calls",
        "healthy",
        cycle(
            [
                Call("testTool", {"param": "value1"}),
                Call("testTool", {"param": "value2"}),
                Call("anotherTool", {"param": "value1"}),
            ]
        ),
        9,
    )
    s.add("should not reset tool call counter for other event types", "loop", same(t), 5)
    s.add("should expose the current consecutive tool-call count", "loop", same(t), 5)
    stuck = Call("stuck_tool", {"p": "same"})
    s.add("halts consecutive identical calls via the always-on guard", "loop", same(stuck), 5)
    s.add(
        "treats reordered argument fields as identical for the consecutive guard",
        "loop",
        lambda i: Call("stuck_tool", {"a": 1, "b": 2} if i % 2 == 0 else {"b": 2, "a": 1}),
        5,
    )

    def shell(command: str, description: str = "Inspect repository changes") -> Call:
        return Call("run_shell_command", {"command": command, "description": description})

    git8 = [
        "git status --short",
        "git status --short && git diff --stat",
        "git diff --name-only HEAD",
        "git status --porcelain=v1",
        "git diff --stat HEAD",
        "git -C . status --short",
        "git --no-pager diff --stat",
        "git ls-files --modified",
    ]
    s.add(
        "halts repeated git inspection command variants via the always-on guard",
        "loop",
        cycle([shell(c) for c in git8]),
        8,
    )
    git7 = [
        "git status --short",
        "git diff --stat",
        "git ls-files --modified",
        "git status --porcelain=v1",
        "git diff --name-only HEAD",
        "git -C . status --short",
        "git --no-pager diff --stat",
    ]
    interrupted = [shell(c) for c in git7]
    interrupted += [Call("read_file", {"absolute_path": "/repo/README.md"}), *interrupted]
    s.add(
        "resets the streak when a non-inspection tool call interrupts the run",
        "healthy",
        cycle(interrupted),
        15,
    )
    s.add(
        "does not bucket compound commands that also write to the repository",
        "healthy",
        lambda i: shell(
            f"git add file-{i}.txt && git status --short && git commit -m progress-{i}",
            "Stage, inspect, and commit progress",
        ),
        8,
    )
    s.add(
        "does not bucket shell chains that include non-git commands",
        "healthy",
        lambda i: shell(
            f"git status --short && npm test -- --runInBand={i}",
            "Inspect repository changes and run tests",
        ),
        8,
    )
    s.add(
        "does not halt repeated non-git shell commands",
        "healthy",
        lambda i: shell(f"npm test -- --runInBand={i}", "Run tests"),
        10,
    )
    newline_git = [
        "git diff --stat\ngit status --short",
        "git diff --name-only HEAD\ngit ls-files --modified",
        "git --no-pager diff --stat\ngit status --porcelain=v1",
        "git diff --stat HEAD\ngit ls-files --others",
        "git diff --name-only\ngit status --short",
        "git diff --stat\ngit -C . status --short",
        "git --no-pager diff --stat\ngit ls-files --modified",
        "git diff --name-only HEAD\ngit status --short",
    ]
    s.add(
        "halts newline-separated git inspection command variants",
        "loop",
        cycle([shell(c) for c in newline_git]),
        8,
    )
    review = ["git status --short", "git diff --stat"]
    s.add(
        "does not halt file-specific git diff review commands",
        "healthy",
        cycle([shell(c) for c in review + [f"git diff -- src/{x}.ts" for x in "abcdef"]]),
        8,
    )
    s.add(
        "does not halt file-specific git diff review commands without -- separator",
        "healthy",
        cycle([shell(c) for c in review + [f"git diff src/{x}.ts" for x in "abcdef"]]),
        8,
    )

    prime = Call("write_file", {"path": "prime.txt", "content": ""})
    s.add(
        "should detect excessive file read operations",
        "loop",
        lambda i: prime if i == 0 else Call("read_file", {"path": f"file{i - 1}.txt"}),
        9,
    )
    s.add(
        "should exempt opening exploration from READ_FILE_LOOP (cold start)",
        "healthy",
        lambda i: Call("read_file" if i % 2 == 0 else "list_directory", {"path": f"f{i}"}),
        20,
    )

    def activated(i: int) -> Call:
        if i < 7:
            return Call("read_file", {"path": f"pre{i}.txt"})
        if i == 7:
            return Call("write_file", {"path": "out.txt", "content": "x"})
        return Call("read_file", {"path": f"post{i - 8}.txt"})

    s.add(
        "should activate READ_FILE_LOOP once a non-read tool lands mid-prompt",
        "loop",
        activated,
        25,
    )
    read_likes = [
        Call("read_many_files", {"paths": ["file1.txt"]}),
        Call("list_directory", {"path": "."}),
        Call("read_resource", {"uri": "a"}),
        Call("zoom_image", {"file_path": "chart.png", "x1": 0, "y1": 0, "x2": 500, "y2": 500}),
        Call("list_projects", {}),
        Call("read_file", {"path": "file5.txt"}),
        Call("read_many_files", {"paths": ["file6.txt"]}),
        Call("list_directory", {"path": "nested"}),
    ]
    s.add(
        "should detect other read-like operations (exact names + read_/list_ prefixes)",
        "loop",
        lambda i: prime if i == 0 else read_likes[(i - 1) % len(read_likes)],
        9,
    )
    names = ["review", "concat_chunks", "viewport_set", "listener_bind"]
    s.add(
        "should not treat tools that merely contain read-like substrings as file reads",
        "healthy",
        lambda i: prime if i == 0 else Call(names[(i - 1) % 4], {"i": i - 1}),
        7,
    )
    mixed = [
        prime,
        Call("read_file", {"path": "file1.txt"}),
        Call("write_file", {"path": "file2.txt", "content": "test"}),
        Call("read_file", {"path": "file3.txt"}),
        Call("execute", {"command": "ls"}),
        Call("read_file", {"path": "file4.txt"}),
        Call("read_file", {"path": "file5.txt"}),
    ]
    s.add("should not detect loop with mixed operations", "healthy", cycle(mixed), 7)
    s.add(
        "should detect action stagnation when the same tool is repeated with varying args",
        "loop",
        lambda i: Call("search_code", {"query": f"term{i}"}),
        8,
    )

    def stagnation_reset(i: int) -> Call:
        if i < 5:
            return Call("search_code", {"query": f"a{i}"})
        if i == 5:
            return Call("write_file", {"path": "out.txt", "content": "x"})
        return Call("search_code", {"query": f"b{i - 6}"})

    s.add(
        "should reset stagnation streak when a different tool is called",
        "healthy",
        stagnation_reset,
        11,
    )

    any_i = lambda i: Call("any_tool", {"i": i})  # noqa: E731
    s.add("does not fire at or below the soft cap", "healthy", any_i, 10, note="soft cap 10")
    s.add(
        "does not fire on diverse calls above the soft cap (productive turn)",
        "healthy",
        any_i,
        99,
        note="soft cap 10, hard cap 100",
    )

    def interleave(prefix: int, stuck_args: Callable[[int], Any], filler: str) -> Gen:
        def gen(i: int) -> Call:
            if i < prefix:
                return Call("any_tool", {"i": i})
            j = i - prefix
            if j % 2 == 0:
                return Call("any_tool", stuck_args(j // 2))
            return Call("any_tool", {filler: j})

        return gen

    s.add(
        "fires when a stuck signal accumulates between the soft and hard cap",
        "loop",
        interleave(10, lambda k: {"stuck": True}, "filler"),
        22,
    )

    def round_trips(i: int) -> Call:
        rt, k = divmod(i, 4)
        if k in (0, 2):
            return Call("t", {"same": True})
        return Call("t", {"d": rt * 2 + (k == 3)})

    s.add(
        "fires on a stuck signal accumulated across Finished round-trips", "loop", round_trips, 12
    )
    variants = [
        {"a": 1, "b": 2, "c": 3, "nested": {"x": 10, "y": 20}},
        {"nested": {"y": 20, "x": 10}, "c": 3, "b": 2, "a": 1},
        {"b": 2, "a": 1, "nested": {"x": 10, "y": 20}, "c": 3},
        {"c": 3, "nested": {"y": 20, "x": 10}, "a": 1, "b": 2},
        {"nested": {"x": 10, "y": 20}, "a": 1, "c": 3, "b": 2},
        {"b": 2, "c": 3, "a": 1, "nested": {"y": 20, "x": 10}},
    ]
    s.add(
        "treats reordered argument fields as one call for the stuck signal",
        "loop",
        interleave(0, lambda k: variants[k % len(variants)], "filler"),
        16,
    )
    s.add(
        "fires at the hard cap regardless of diversity",
        "loop",
        lambda i: Call("t", {"i": i}),
        101,
        note="a runaway varying its arguments on every call; hard cap 100",
    )
    s.add(
        "fires at the soft cap when a stuck-repetition signal is present",
        "loop",
        interleave(0, lambda k: {"stuck": True}, "distinct"),
        16,
    )
    s.add(
        "allows diverse calls past the built-in default soft cap",
        "healthy",
        lambda i: Call("t", {"i": i}),
        101,
        note="DEFAULT_MAX_TOOL_CALLS_PER_TURN = 100",
    )
    s.add(
        "still accumulates across committed round-trips to trip the cap",
        "loop",
        lambda i: Call("t", {"rt": i // 15, "i": i % 15}),
        101,
        note="diverse calls across round-trips; hard cap 100",
    )
    st = Call("stuck_tool", {"param": "same"})
    s.add(
        "should not fire when same call appears fewer than threshold times", "healthy", same(st), 5
    )
    others = [Call("other_a", {"x": 1}), Call("other_b", {"y": 2}), Call("other_c", {"z": 3})]
    s.add(
        "should fire when same (tool, args) appears threshold times non-consecutively",
        "loop",
        lambda i: st if i % 2 == 0 else others[(i // 2) % 3],
        11,
    )
    s.add(
        "should not fire for different (tool, args) pairs",
        "healthy",
        lambda i: Call("stuck_tool", {"param": i}),
        6,
    )
    s.add("global-duplicate also fires for a consecutive identical run", "loop", same(st), 6)
    ea, eb, ec = (Call(f"tool_{x}", {"param": x}) for x in "abc")
    s.add("should fire for a clean ABABAB alternating pattern", "loop", cycle([ea, eb]), 6)
    s.add(
        "should not fire when calls alternate but with varying keys",
        "healthy",
        lambda i: Call("tool_a" if i % 2 == 0 else "tool_b", {"param": i // 2}),
        10,
    )
    s.add(
        "should reset alternating window after a different third pattern",
        "loop",
        lambda i: [ea, eb, ea, eb, ec][i] if i < 5 else [ea, eb][(i - 5) % 2],
        11,
    )

    # Result-aware guards (issue #9450)
    s.add(
        "still halts at the threshold when no results were recorded (fail-safe)",
        "loop",
        same(tl()),
        5,
    )
    s.add(
        "still halts at the threshold when every result is unchanged",
        "loop",
        same(tl(UNCHANGED)),
        5,
    )
    s.add(
        "does not halt while the task board keeps changing between identical calls",
        "healthy",
        lambda i: tl(f"board state v{i}"),
        20,
    )
    s.add(
        "keeps productive polling alive past the adaptive per-turn cap",
        "healthy",
        lambda i: tl(f"board state v{i}"),
        120,
    )
    restart = ["v1", "v1", "v2", "v1", "v1", "v1", "v1", "v1"]
    s.add(
        "restarts the streak when a result changed, then halts on a fresh unchanged streak",
        "loop",
        lambda i: tl(restart[i]) if i < len(restart) else tl("v1"),
        9,
    )
    s.add(
        "does not change behavior for deterministic (non-stateful) tools",
        "loop",
        lambda i: Call("read_file", {"file_path": "/a"}, {"output": f"content v{i}"}),
        5,
        note="results change, but the peer judges read_file by its arguments alone",
    )
    s.add(
        "records results by callId pairing from ToolCallRequest events",
        "healthy",
        lambda i: tl(f"board state v{i}") if i < 4 else tl(),
        5,
    )

    def flood(i: int) -> Call:
        if i == 0:
            return tl("v1")
        if i <= 510:
            return Call("tool_b", {"step": i - 1})
        k = i - 510  # tl-2 ... tl-6
        return tl(f"v{k + 1}") if k <= 3 else tl()

    s.add(
        "keeps task_list pairing evidence alive through a flood of non-stateful callIds",
        "healthy",
        flood,
        516,
        note="516 calls: more than our default 300-call cap",
    )

    def rounds(
        names: list[str], board: Callable[[int], Any], other: Callable[[str, int], Any]
    ) -> Gen:
        def gen(i: int) -> Call:
            rnd, k = divmod(i, len(names))
            name = names[k]
            if name == "task_list":
                return tl(board(rnd))
            return Call(name, other(name, rnd))

        return gen

    step = lambda name, rnd: {"step": rnd}  # noqa: E731
    work = lambda name, rnd: {"step": "work"}  # noqa: E731
    three = ["task_list", "tool_b", "tool_c"]
    s.add(
        "counts global duplicates on (call, result) pairs when heuristics run",
        "healthy",
        rounds(three, lambda r: f"state-{r}", step),
        21,
        note="first half of the test: changing results, 7 rounds",
    )
    s.add(
        "counts global duplicates on (call, result) pairs when heuristics run",
        "loop",
        rounds(three, lambda r: "frozen board", step),
        16,
        note="second half of the test: the same poll frozen",
    )
    s.add(
        "does not halt a board oscillating between two states (order-aware pair counts)",
        "healthy",
        rounds(three, lambda r: ["state-a", "state-b"][r % 2], step),
        39,
    )
    pair = ["task_list", "tool_b"]
    s.add(
        "keeps the adaptive cap from arming on oscillating results",
        "healthy",
        rounds(pair, lambda r: ["state-a", "state-b"][r % 2], step),
        80,
    )
    s.add(
        "does not halt an ABAB task_list poller whose results keep changing",
        "healthy",
        rounds(pair, lambda r: f"board state v{r}", work),
        8,
    )
    s.add(
        "still halts an ABAB pattern with a stateful participant on frozen results",
        "loop",
        rounds(pair, lambda r: "frozen board", work),
        6,
    )
    s.add(
        "still halts ABAB with a stateful participant when no results were recorded (fail-safe)",
        "loop",
        lambda i: tl() if i % 2 == 0 else Call("tool_b", {"step": "work"}),
        6,
    )

    def batched(board: Callable[[int], str], reverse: bool = False) -> Gen:
        def gen(i: int) -> list[Call]:
            calls = [tl(board(i)), Call("tool_b", {"step": "work"})]
            return calls[::-1] if reverse else calls

        return gen

    s.add(
        "does not halt a batched [task_list, tool_b] ABAB poller whose results keep changing",
        "healthy",
        batched(lambda r: f"board state v{r}"),
        4,
    )
    s.add(
        "keeps the batched [tool_b, task_list] ordering exonerated",
        "healthy",
        batched(lambda r: f"board state v{r}", reverse=True),
        4,
    )
    s.add(
        "still halts a batched ABAB pattern when the stateful results are frozen (fail-safe)",
        "loop",
        batched(lambda r: "frozen board"),
        3,
    )
    s.add(
        "treats changed results as progress for action stagnation",
        "healthy",
        lambda i: Call("task_list", {"owner": f"peer-{i % 3}"}, {"output": f"state v{i}"}),
        12,
        note="first half of the test: changing results",
    )
    s.add(
        "treats changed results as progress for action stagnation",
        "loop",
        lambda i: Call("task_list", {"owner": f"peer-{i % 3}"}, {"output": "frozen board"}),
        8,
        note="second half of the test: the board frozen",
    )
    s.add(
        "halts an interleaved frozen poller just past the adaptive soft cap",
        "loop",
        rounds(pair, lambda r: "frozen board", step),
        22,
    )

    def resumed(i: int) -> Call:
        if i < 4:
            return tl(UNCHANGED)
        if i == 4:
            return Call("tool_b", {"step": 1})
        if i == 5:
            return tl("board changed")
        return tl()

    s.add(
        "re-judges a resumed streak on fresh result evidence after a streak break",
        "loop",
        resumed,
        10,
        note="after one changed result the peer records no more results",
    )
    s.add(
        "disarms the adaptive cap when a frozen board thaws (no latched peak)",
        "healthy",
        rounds(pair, lambda r: "frozen board" if r < 6 else f"thawed board v{r}", step),
        80,
    )
    s.add(
        "still arms the adaptive cap on a permanently frozen board",
        "loop",
        rounds(pair, lambda r: "frozen board", step),
        22,
    )
    s.add(
        "still halts a continuously frozen poller across Finished round-trips",
        "loop",
        rounds(pair, lambda r: "frozen board", step),
        22,
    )

    def abandoned(i: int) -> Step:
        if i < 16:
            return rounds(pair, lambda r: "frozen board", step)(i)
        return Call("tool_c", {"i": i - 16})

    s.add(
        "releases the adaptive cap when a frozen poller is abandoned for productive work",
        "healthy",
        abandoned,
        46,
    )
    quoted = "deadbeef" * 8
    s.add(
        "does not collapse the fingerprint when board content merely quotes the digest label",
        "healthy",
        lambda i: tl(
            f"board row changing {i}\nFull output sha256: {quoted}\nmore changing content {i}"
        ),
        20,
    )
    s.add(
        "still halts when board content quoting the digest label is frozen",
        "loop",
        same(tl(f"frozen board row\nFull output sha256: {quoted}\nfrozen tail")),
        5,
    )
    s.add(
        "halts on a frozen oversized board despite per-call unique stub paths",
        "loop",
        lambda i: tl(persisted_stub(f"poll_{i}", FROZEN_BOARD)),
        5,
    )
    s.add(
        "keeps oversized polling alive while the board keeps changing",
        "healthy",
        lambda i: tl(persisted_stub(f"poll_{i}", f"board state v{i}")),
        20,
    )
    header = "task row header line\n" * (2000 // 21 + 11)
    s.add(
        "keeps oversized polling alive when the board changes beyond the preview window",
        "healthy",
        lambda i: tl(persisted_stub(f"poll_{i}", f"{header}tail state v{i}")),
        20,
    )
    s.add(
        "counts global duplicates on frozen oversized results when heuristics run",
        "loop",
        rounds(three, lambda r: persisted_stub(f"poll_{r}", FROZEN_BOARD), step),
        16,
    )
    s.add(
        "halts an interleaved frozen oversized poller just past the adaptive soft cap",
        "loop",
        rounds(pair, lambda r: persisted_stub(f"tl-{r}", FROZEN_BOARD), step),
        22,
    )
    notes = ["(file too large to persist)", "(session disk budget exhausted)"]
    s.add(
        "halts on a frozen unwrapped oversized stub (disk unavailable)",
        "loop",
        lambda i: tl(unwrapped_stub(notes[i % 2], FROZEN_BOARD)),
        5,
    )
    spill = "/tmp/loop-detection-stub-Xq3v9T"  # the test's fs.mkdtemp directory
    s.add(
        "halts on a frozen truncated-output stub despite per-call unique file paths",
        "loop",
        lambda i: tl(truncated_stub(spill, f"task_list_poll_{i}", FROZEN_BOARD, 4, 16)),
        5,
    )
    head = "task row head line\n" * 30
    tail_rows = "task row tail line\n" * 30
    s.add(
        "keeps truncated-output polling alive when the board changes in the truncated middle band",
        "healthy",
        lambda i: tl(
            truncated_stub(
                spill,
                f"task_list_poll_{i}",
                head + f"middle band state v{i}\n" * 400 + tail_rows,
                4,
                16,
            )
        ),
        20,
    )
    s.add(
        "halts on a frozen batch-budget result despite per-call unique artifact paths",
        "loop",
        lambda i: tl(budget_fit(f"poll_{i}", FROZEN_BOARD)),
        5,
    )
    tail80 = "task row tail line\n" * 80
    s.add(
        "keeps batch-budget polling alive when the board changes beyond the fitted window",
        "healthy",
        lambda i: tl(budget_fit(f"poll_{i}", head + f"middle band state v{i}\n" * 800 + tail80)),
        20,
    )
    return s


# ---------------------------------------------------------------- Cline


def poll(output: Any = NO_RESULT, successful: bool = True, name: str = "poll") -> Call:
    return Call(name, {"command": "status"}, output, failed=not successful)


def cline() -> Suite:
    s = Suite("cline")
    s.add(
        "resets the ordinary counter after changed successful output",
        "healthy",
        cycle([poll("10%"), poll("20%")]),
        2,
        probe=poll(),
    )
    s.add("escalates unchanged successful output", "loop", same(poll("same")), 2)
    s.add(
        "does not treat changing failures as progress",
        "loop",
        lambda i: poll(f"error {i + 1}", successful=False),
        2,
    )
    s.add(
        "bounds continually changing output without interpreting it",
        "loop",
        lambda i: poll({"status": "pending", "timestamp": i + 1}),
        11,
    )
    s.add(
        "does not interpret dates as ratio progress",
        "loop",
        lambda i: poll({"timestamp": f"{i + 1}/{i + 2}/2026", "nonce": i + 1}),
        11,
    )
    progress: list[tuple[str, Callable[[int], Any]]] = [
        ("percentages", lambda k: f"{k}%"),
        ("numeric progress fields", lambda k: {"progress": k / 100}),
        ("ratios", lambda k: f"{k}/100"),
    ]

    for name, output in progress:
        s.add(
            f"allows explicit {name} beyond the fallback limit",
            "healthy",
            cycle([poll(output(k)) for k in range(1, 16)]),
            15,
        )
    steps = [0, 25, 50, 75, 100]
    s.add(
        "allows bounded explicit progress restarts",
        "healthy",
        lambda i: poll({"progress": steps[i % 5]}),
        20,
    )
    s.add(
        "bounds oscillating explicit progress",
        "loop",
        lambda i: poll({"progress": (i + 1) % 2}),
        112,
    )
    s.add(
        "keeps the absolute limit across interleaved signatures",
        "loop",
        lambda i: poll(f"poll {i // 2 + 1}") if i % 2 == 0 else poll("other", name="other"),
        22,
    )
    s.add(
        "treats parallel outcomes as one order-independent batch",
        "loop",
        lambda i: [poll("10%"), poll("20%")] if i % 2 == 0 else [poll("20%"), poll("10%")],
        2,
    )
    s.add(
        "treats sequential outcomes in one iteration as one batch",
        "warn",
        same(poll("same")),
        3,
        probe=poll(),
        note="the peer's verdict for the 4th copy is soft (a warning)",
    )
    s.add(
        "retains progress from every parallel outcome",
        "healthy",
        lambda i: [poll("10%"), poll("10%")] if i == 0 else [poll("20%"), poll("10%")],
        2,
        probe=poll(),
    )
    s.add("bounds a parallel batch whose calls never finish", "loop", same(poll()), 12)
    s.add(
        "does not charge unfinished batches to the absolute limit",
        "healthy",
        lambda i: [poll(), Call("other", {"iteration": i + 1}, "done")],
        12,
    )
    s.add(
        "uses stable object fingerprints",
        "loop",
        lambda i: poll({"first": 1, "second": 2} if i % 2 == 0 else {"second": 2, "first": 1}),
        2,
    )
    typed: list[tuple[str, Any, Any]] = [
        ("number and string", 1, "1"),
        ("null and string", None, "null"),
        ("boolean and string", True, "true"),
    ]
    for name, first, second in typed:
        # a JSON value's text against a string's: 1 against "1" is a change in the tool's output
        s.add(
            f"preserves output types for {name}",
            "healthy",
            cycle([poll(json.dumps(first)), poll(json.dumps(second))]),
            2,
            probe=poll(),
        )
    s.add(
        "preserves serializable non-plain output values",
        "healthy",
        lambda i: poll({"updatedAt": f"2026-01-0{i + 1}T00:00:00.000Z"}),
        2,
        probe=poll(),
    )
    return s


def write(suite: Suite, out: str) -> str:
    path = os.path.join(out, f"{suite.name}.json")
    lines = [json.dumps(record, ensure_ascii=False) for record in suite.scenarios]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("[\n" + ",\n".join(lines) + "\n]\n")
    return path


def build(out: str) -> list[str]:
    """Write every suite's file into `out`; their paths."""
    return [write(suite, out) for suite in (openclaw(), qwen(), cline(), gemini())]


def main() -> None:
    parser = argparse.ArgumentParser(description="write the peer suites' scenario files")
    parser.add_argument("--out", required=True, help="directory to write to")
    out = parser.parse_args().out
    for suite in (openclaw(), qwen(), cline(), gemini()):
        kinds: dict[str, int] = {}
        for scenario in suite.scenarios:
            expect = scenario["info"]["expect"]
            kinds[expect] = kinds.get(expect, 0) + 1
        path = write(suite, out)
        counts = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        print(f"{os.path.relpath(path)}: {len(suite.scenarios)} scenarios ({counts})")


if __name__ == "__main__":
    main()
