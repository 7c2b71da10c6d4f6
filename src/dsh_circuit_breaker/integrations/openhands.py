"""OpenHands SDK: the breaker as the conversation's own `PreToolUse` command hook.

    from dsh_circuit_breaker.integrations.openhands import conversation, stop_reason

    chat = conversation(agent, workspace=".")  # an OpenHands `Conversation`, guarded
    chat.send_message("fix the failing test")
    chat.run()
    print(stop_reason(chat))  # None, or why the breaker stopped the agent

OpenHands runs the hooks of a conversation's `HookConfig` as commands, one process per
event. `hook_config()` is ours: `dsh-circuit-breaker hook --harness openhands` (this
interpreter's, with `config` and `state` as `install --config/--state` would write them)
before every tool call and on every user message, and after every call where the config
observes results. A refused call never runs: OpenHands sends the model `Action rejected:
<the breaker's text>` as its result (harnesses/openhands.py has the wire shapes).

A stop refuses the call the same way, and `conversation()`'s callback then pauses the
conversation (`Conversation.pause()`, OpenHands' own way to end a run between steps):
`run()` returns with the conversation `PAUSED`, and `stop_reason(conversation)` says why.
A later `send_message` and `run()` go on from there (the new message starts the agent
afresh, as any user prompt does with `resetOnUserPrompt`).

Which agent a call belongs to: the conversation, by its id. The state lives in the hook's
store (SQLite in the user's state directory by default, or `state`), so a conversation
resumed by id in another process keeps its counts. A subagent run by the task tool is a
conversation of its own: it is guarded only if its agent definition carries
`hook_config()` (OpenHands does not pass the parent's hooks on), and counted apart.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from openhands.sdk import Conversation
from openhands.sdk.event import HookExecutionEvent, MessageEvent, UserRejectObservation
from openhands.sdk.hooks import HookConfig, HookDefinition, HookMatcher

from ..core.config_file import check_hook
from ..core.invocation import hook_command
from ..harnesses import openhands as wire

# Seconds OpenHands waits for our hook (its default is 60): the hook answers within the
# config's storeTimeout, and a hook that OpenHands times out lets the call run.
TIMEOUT = 30


def hook_config(config: str | None = None, state: str | None = None) -> HookConfig:
    """Our hooks as an OpenHands `HookConfig`: the hook reads the config file `config`
    (default: $DSH_CIRCUIT_BREAKER_CONFIG, else the user config file) and keeps state at
    `state` (default: the config's, else SQLite in the user's state directory). Both are
    loaded and opened here, so a bad key or URL fails now, naming it, not at every call."""
    observes = check_hook(wire, config, state).observes_results
    command = hook_command(config, state, wire.NAME)
    ours = [HookMatcher(matcher="*", hooks=[HookDefinition(command=command, timeout=TIMEOUT)])]
    return HookConfig(
        pre_tool_use=ours,
        user_prompt_submit=ours,
        post_tool_use=ours if observes else [],
    )


def conversation(
    agent: Any,
    *,
    config: str | None = None,
    state: str | None = None,
    hook_config: HookConfig | None = None,
    callbacks: list[Any] | None = None,
    **kwargs: Any,
) -> Any:
    """An OpenHands `Conversation(agent, **kwargs)` with the breaker's hooks first (before
    `hook_config`'s own, so a refused call reaches no other hook) and a callback, after
    `callbacks`, that pauses it when the breaker stops the agent."""
    ours = _hook_config(config, state)
    hooks = HookConfig.merge([ours, hook_config]) if hook_config is not None else ours
    stopper = StopWatch()
    made = Conversation(agent, hook_config=hooks, callbacks=[*(callbacks or []), stopper], **kwargs)
    stopper.conversation = made
    return made


_hook_config = hook_config  # `conversation` takes a `hook_config` argument of its own


class StopWatch:
    """A conversation callback: when our hook's answer to a call is a stop, it pauses
    `conversation` once that call's rejection is in the history (so the transcript stays
    whole: every call has its result)."""

    def __init__(self) -> None:
        self.conversation: Any = None
        self._stopped: set[str] = set()  # ids of the actions a stop refused
        self._lock = threading.Lock()

    def __call__(self, event: Any) -> None:
        if isinstance(event, HookExecutionEvent):
            if event.action_id and _stop_in(event) is not None:
                with self._lock:
                    self._stopped.add(event.action_id)
        elif isinstance(event, UserRejectObservation) and self._stopped:
            with self._lock:
                stopped = event.action_id in self._stopped
                self._stopped.discard(event.action_id)
            if stopped and self.conversation is not None:
                self.conversation.pause()


def _stop_in(event: HookExecutionEvent) -> str | None:
    """The stop reason in our hook's answer to a call, if its answer was a stop."""
    if event.hook_event_type != "PreToolUse" or not event.blocked:
        return None
    if f"--harness {wire.NAME}" not in event.hook_command:
        return None
    try:
        answer = json.loads(event.stdout)
    except ValueError:
        return None
    reason = answer.get("stopReason") if isinstance(answer, dict) else None
    return reason if isinstance(reason, str) else None


def stop_reason(conversation: Any) -> str | None:
    """Why the breaker stopped the agent in this conversation's current run: the stop
    reason of its last stop since the last user message, else None."""
    for event in reversed(list(conversation.state.events)):
        if isinstance(event, MessageEvent) and event.source == "user":
            return None
        if isinstance(event, HookExecutionEvent):
            reason = _stop_in(event)
            if reason is not None:
                return reason
    return None
