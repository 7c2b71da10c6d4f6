"""mini-swe-agent trajectories (`<instance>.traj.json`: `{info, messages, trajectory_format}`).

mini-swe-agent runs exactly one ```bash block per assistant message; a message with none
or several is a format error that runs nothing, so it is not a call. A call is tool
`bash` with arguments `{"command": <the block's text, stripped as mini-swe-agent does>}`
(the same shape as DSH's and Claude Code's bash tool). The next user message is its
output; a `<returncode>` other than 0, or a timeout notice, counts as failed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from ..common import parse_time, text_of
from ..head import Head
from ..jsonstream import JsonStream, JsonStreamError
from ..model import Problems, RecordedCall, Transcript
from ..sources import open_text

NAME = "mini-swe-agent"
HARNESS = None
SUFFIXES = (".traj.json",)
# mini-swe-agent's own action pattern (DefaultAgent.parse_action).
ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")


def sniff(head: Head) -> bool:
    return bool(head.keys() & {"trajectory_format", "instance_id"})


def read(path: str, problems: Problems) -> Iterator[Transcript]:
    yield Transcript(
        source=path,
        format=NAME,
        label=os.path.basename(path).removesuffix(".traj.json"),
        _calls=lambda t: _calls(t, problems),
    )


def action_of(content: Any) -> str | None:
    actions = ACTION.findall(text_of(content))
    return actions[0].strip() if len(actions) == 1 else None


def _calls(t: Transcript, problems: Problems) -> Iterator[RecordedCall]:
    agent = t.label
    with open_text(t.source) as fh:
        stream = JsonStream(fh)
        waiting: RecordedCall | None = None
        try:
            for key in stream.members():
                if key == "messages" and stream.peek() == "[":
                    for _ in stream.items():
                        line = stream.line
                        message = stream.value()
                        if not isinstance(message, dict):
                            problems.report(t.source, line, "a message is not an object")
                            continue
                        when = parse_time(message.get("timestamp"))
                        t.saw_time(when)
                        role = message.get("role")
                        if role == "assistant":
                            if waiting is not None:
                                yield waiting
                                waiting = None
                            action = action_of(message.get("content"))
                            if action is not None:
                                waiting = RecordedCall(agent, "bash", {"command": action}, when)
                        elif role == "user" and waiting is not None:
                            output = text_of(message.get("content"))
                            waiting.failed, waiting.result = _failed(output), output
                            yield waiting
                            waiting = None
                elif key == "info":
                    info = stream.value()
                    if isinstance(info, dict) and "exit_status" in info:
                        t.meta["exit_status"] = info["exit_status"]
                elif key == "instance_id":
                    value = stream.value()
                    if isinstance(value, str) and value:
                        t.meta["instance_id"] = value
                else:
                    stream.skip()
            stream.end()
        except JsonStreamError as exc:
            problems.report(t.source, exc.line, f"invalid JSON ({exc}); rest of file skipped")
        if waiting is not None:
            yield waiting


def _failed(output: str) -> bool | None:
    found = RETURNCODE.search(output[:200])
    if found:
        return found.group(1) != "0"
    if "timed out" in output[:500]:
        return True
    return None
