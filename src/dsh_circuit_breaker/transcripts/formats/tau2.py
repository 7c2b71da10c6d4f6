"""tau2-bench results files: `{timestamp, info, tasks, simulations: [...]}`.

Each simulation is one run (its `messages`, `termination_reason`, `start_time`/`end_time`).
A call is one entry of a message's `tool_calls` (`{id, name, arguments}`, arguments already
a JSON object): tool = `name`, arguments = `arguments`. Calls whose `requestor` is the user
simulator (tau2's telecom domain gives the user tools) are a separate agent,
`<simulation id>/user`. The outcome is the `role: "tool"` message with the same `id`, whose
`error` flag says whether it failed. Simulations are read one at a time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..common import Pending, messages_of, new_call, parse_time
from ..head import Head
from ..jsonstream import JsonStream, JsonStreamError
from ..model import Problems, RecordedCall, Transcript
from ..sources import open_text

NAME = "tau2"
HARNESS = None
SUFFIXES: tuple[str, ...] = ()


def sniff(head: Head) -> bool:
    """A `simulations` key: read no further than it (the rest is the runs)."""
    return "simulations" in head.keys(until="simulations")


def read(path: str, problems: Problems) -> Iterator[Transcript]:
    base = os.path.basename(path)
    info: dict[str, Any] = {}
    found = False
    with open_text(path) as fh:
        stream = JsonStream(fh)
        try:
            for key in stream.members():
                if key == "info":
                    value = stream.value()
                    if isinstance(value, dict):
                        info = {k: value[k] for k in ("max_steps", "max_errors") if k in value}
                elif key == "simulations" and stream.peek() == "[":
                    found = True
                    for index, _ in enumerate(stream.items()):
                        line = stream.line
                        sim = stream.value()
                        if isinstance(sim, dict) and isinstance(sim.get("messages"), list):
                            yield _simulation(path, base, index, line, sim, info, problems)
                        else:
                            problems.report(path, line, f"simulation {index} has no messages")
                else:
                    stream.skip()  # tasks, timestamp: not needed, decoded one at a time
            stream.end()
        except JsonStreamError as exc:
            problems.report(path, exc.line, f"invalid JSON ({exc}); rest of file skipped")
    if not found:
        problems.report(path, None, "no 'simulations' list: not a tau2-bench results file")


def _simulation(
    path: str,
    base: str,
    index: int,
    line: int,
    sim: dict[str, Any],
    info: dict[str, Any],
    problems: Problems,
) -> Transcript:
    sim_id = sim.get("id") if isinstance(sim.get("id"), str) else f"{base}#{index}"
    task, trial = sim.get("task_id"), sim.get("trial")
    label = f"{base} task {task}" + (f" trial {trial}" if trial is not None else "")
    meta: dict[str, Any] = {
        k: sim[k] for k in ("task_id", "trial", "termination_reason") if k in sim
    }
    reward = sim.get("reward_info")
    if isinstance(reward, dict) and "reward" in reward:
        meta["reward"] = reward["reward"]
    meta.update(info)

    def produce(t: Transcript) -> Iterator[RecordedCall]:
        t.saw_time(parse_time(sim.get("start_time")))
        t.saw_time(parse_time(sim.get("end_time")))
        return _calls(t, str(sim_id), sim["messages"], problems)

    return Transcript(source=path, format=NAME, label=label, line=line, meta=meta, _calls=produce)


def _calls(
    t: Transcript, sim_id: str, messages: list[Any], problems: Problems
) -> Iterator[RecordedCall]:
    pending = Pending()
    for message, when in messages_of(t, messages, problems):
        if message.get("role") == "tool":
            failed = bool(message.get("error"))
            yield from pending.resolve(message.get("id"), failed, message.get("content"))
            continue
        for tc in message.get("tool_calls") or ():
            if not isinstance(tc, dict) or not isinstance(tc.get("name"), str):
                problems.report(t.source, t.line, f"{t.label}: a tool call without a name")
                continue
            requestor = tc.get("requestor") or message.get("role")
            agent = sim_id if requestor in (None, "assistant") else f"{sim_id}/{requestor}"
            call = new_call(agent, tc["name"], tc.get("arguments"), when, tc.get("id"))
            yield from pending.add(call)
    yield from pending.drain()
