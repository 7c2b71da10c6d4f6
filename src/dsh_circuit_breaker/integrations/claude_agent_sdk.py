"""Claude Agent SDK: the breaker as a PreToolUse hook callback.

    from claude_agent_sdk import ClaudeAgentOptions
    from dsh_circuit_breaker.integrations.claude_agent_sdk import circuit_breaker_hooks

    options = ClaudeAgentOptions(hooks=circuit_breaker_hooks())

The Claude Code CLI that the SDK drives calls the `PreToolUse` callback before every tool
(built-in, MCP and SDK tools alike, in the main agent and in subagents). A denied call gets
`permissionDecision: "deny"` with the breaker's text as the reason: the tool does not run
and the model receives the text as an error tool result for that tool_use id. When the
breaker stops the agent (`stopAfterDenials` refusals in a row), the same answer also
carries `"continue": false` and the stop reason as `stopReason`: the CLI records the
refusal, makes no further model request, and ends the session. With `resultProgress` or
`sameResultLimit` set, `PostToolUse` and `PostToolUseFailure` callbacks report an allowed
call's `tool_response` (or its `error`) to the breaker (docs/results.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, HookMatcher
from claude_agent_sdk.types import (
    HookContext,
    HookEvent,
    HookInput,
    HookJSONOutput,
    SyncHookJSONOutput,
)

from ..core.breaker import CircuitBreaker
from ..core.config import Config
from ..harnesses.claude_code import EXEMPT as CLAUDE_CODE_EXEMPT
from ._common import RanCalls, acheck, areset, model_arguments, refusal_text, warn_allowed


def default_config() -> Config:
    """SPEC's defaults plus Claude Code's spelling of the exempt tools."""
    base = Config()
    return Config.from_mapping({"exempt": [*base.exempt, *CLAUDE_CODE_EXEMPT]}, base=base)


class ClaudeCircuitBreaker:
    """The hook callbacks. `hooks()` gives the mapping for `ClaudeAgentOptions(hooks=...)`.

    Agent identity: the hook input's `session_id` for the main agent, and
    `session_id` + `agent_id` inside a subagent (the CLI sets `agent_id` on tool hooks of
    Task-spawned subagents; parallel subagents interleave, and it is the one reliable way to
    tell them apart). With `reset_on_user_prompt` (the default) a `UserPromptSubmit` resets
    the main agent's state: a person has spoken.
    """

    def __init__(self, breaker: CircuitBreaker | None = None, *, config: Config | None = None):
        if breaker is not None and config is not None:
            raise TypeError("pass either breaker= or config=, not both")
        self.breaker = breaker or CircuitBreaker(config or default_config())
        self._ran = RanCalls(self.breaker)

    def hooks(self) -> dict[HookEvent, list[HookMatcher]]:
        hooks: dict[HookEvent, list[HookMatcher]] = {
            "PreToolUse": [HookMatcher(matcher=None, hooks=[self.pre_tool_use])],
            "UserPromptSubmit": [HookMatcher(matcher=None, hooks=[self.user_prompt_submit])],
        }
        if self.breaker.config.observes_results:  # else the CLI's extra round trip buys nothing
            for event in ("PostToolUse", "PostToolUseFailure"):
                hooks[event] = [HookMatcher(matcher=None, hooks=[self.post_tool_use])]
        return hooks

    async def pre_tool_use(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        try:
            data: Mapping[str, Any] = input_data
            agent = agent_key(data)
            tool = data.get("tool_name")
            if agent is None or not isinstance(tool, str) or not tool:
                return {}  # not a call we can attribute: never deny by accident
            arguments = model_arguments(data.get("tool_input"))
            decision = await acheck(self.breaker, agent, tool, arguments)
            self._ran.add((agent, tool_use_id), (agent, tool, arguments), decision)
            if decision.allowed:
                return {}
            answer: SyncHookJSONOutput = {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": refusal_text(decision),
                }
            }
            if decision.stop:
                # The CLI's own stop, in the same answer as the deny, so both always land.
                answer["continue_"] = False
                answer["stopReason"] = decision.stop_reason or ""
            return answer
        except Exception:
            warn_allowed("PreToolUse hook")
            return {}

    async def post_tool_use(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """The call's `tool_response` (`PostToolUse`) or `error` (`PostToolUseFailure`)."""
        data: Mapping[str, Any] = input_data
        failed = data.get("hook_event_name") == "PostToolUseFailure"
        result = data.get("error") if failed else data.get("tool_response")
        await self._ran.observe((agent_key(data), tool_use_id), result)
        return {}

    async def user_prompt_submit(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        data: Mapping[str, Any] = input_data
        session = data.get("session_id")
        if self.breaker.config.reset_on_user_prompt and isinstance(session, str) and session:
            await areset(self.breaker, f"claude-agent-sdk:{session}")
        return {}


def agent_key(data: Mapping[str, Any]) -> str | None:
    session = data.get("session_id")
    if not isinstance(session, str) or not session:
        return None
    subagent = data.get("agent_id")
    if isinstance(subagent, str) and subagent:
        return f"claude-agent-sdk:{session}:{subagent}"
    return f"claude-agent-sdk:{session}"


def circuit_breaker_hooks(
    breaker: CircuitBreaker | None = None, *, config: Config | None = None
) -> dict[HookEvent, list[HookMatcher]]:
    """The hooks mapping for `ClaudeAgentOptions(hooks=...)`."""
    return ClaudeCircuitBreaker(breaker, config=config).hooks()


def with_circuit_breaker(
    options: ClaudeAgentOptions,
    breaker: CircuitBreaker | None = None,
    *,
    config: Config | None = None,
) -> ClaudeAgentOptions:
    """Add the breaker's hooks to `options`, first in each event's list and keeping the
    hooks already there; returns `options`."""
    merged: dict[HookEvent, list[HookMatcher]] = dict(options.hooks or {})
    for event, matchers in circuit_breaker_hooks(breaker, config=config).items():
        merged[event] = [*matchers, *merged.get(event, [])]
    options.hooks = merged
    return options
