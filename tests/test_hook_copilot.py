"""The Copilot harness module: its event shape (no event name, camelCase, subagents as
sessions of their own) and its hooks file of our own (merged with others' entries, deleted
when only ours was in it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.core.invocation import hook_command
from dsh_circuit_breaker.harnesses import copilot
from dsh_circuit_breaker.harnesses._settings import SettingsError
from dsh_circuit_breaker.judge import Call, Malformed, Prompt
from hook_support import hook_env, run_hook

CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]


def call(args: Any = None, **more: Any) -> dict[str, Any]:
    event = {"sessionId": "s1", "timestamp": 1, "cwd": "/w", "toolName": "bash"}
    event["toolArgs"] = {"command": "ls"} if args is None else args
    event.update(more)
    return event


def test_a_call_and_a_prompt() -> None:
    what = copilot.parse(call())
    assert isinstance(what, Call)
    assert (what.agent, what.tool, what.arguments) == ("s1", "bash", {"command": "ls"})
    prompt = copilot.parse({"sessionId": "s1", "timestamp": 1, "cwd": "/w", "prompt": "hi"})
    assert isinstance(prompt, Prompt) and prompt.agent == "s1"


def test_tool_args_as_a_json_string_and_as_an_unparsable_string() -> None:
    parsed = copilot.parse(call('{"command": "ls"}'))
    assert isinstance(parsed, Call) and parsed.arguments == {"command": "ls"}
    raw = copilot.parse(call('{"command": "ls"'))
    assert isinstance(raw, Call) and raw.arguments == '{"command": "ls"'


def test_big_tool_args_as_a_json_string_are_read_in_bounded_memory() -> None:
    """Past 1 MiB, as a big event is (bounded.py): its big containers as their digests,
    the same for the same text, another for text differing in one byte."""
    rows = [{"a": i} for i in range(131_072)]
    texts = [json.dumps({"command": "psql", "rows": [*rows, {"a": last}]}) for last in (1, 2)]
    first, again, other = (copilot.parse(call(text)) for text in (texts[0], texts[0], texts[1]))
    assert isinstance(first, Call) and isinstance(again, Call) and isinstance(other, Call)
    assert first.arguments["command"] == "psql"
    assert set(first.arguments["rows"]) == {"dsh-circuit-breaker/opaque"}
    assert first.arguments == again.arguments != other.arguments


def test_a_subagent_is_keyed_under_its_parent_and_its_prompt_is_not_a_reset() -> None:
    sub = {"agentId": "a1", "agentType": "general-purpose", "parentAgentId": "s1"}
    what = copilot.parse(call(sessionId="a1", **sub))
    assert isinstance(what, Call) and what.agent == "s1/a1"
    assert copilot.parse({"sessionId": "a1", "prompt": "the task", **sub}) is None
    alone = copilot.parse(call(sessionId="a1", agentId="a1"))
    assert isinstance(alone, Call) and alone.agent == "a1"


@pytest.mark.parametrize(
    "event",
    [
        {"sessionId": "s1", "timestamp": 1},
        call(sessionId=""),
        call(toolName=7),
        {"sessionId": "s1", "toolName": "bash"},
        {"prompt": "hi"},
    ],
)
def test_malformed_events(event: dict[str, Any]) -> None:
    with pytest.raises(Malformed):
        copilot.parse(event)


def test_the_hook_allows_malformed_input_silently(tmp_path: Path) -> None:
    done = run_hook({"sessionId": "s1", "toolArgs": {}}, hook_env(tmp_path), "--harness", "copilot")
    assert (done.returncode, done.stdout) == (0, "")
    assert "not a preToolUse or userPromptSubmitted event" in done.stderr


def test_settings_keep_others_and_replace_ours() -> None:
    other = {"type": "command", "bash": "./audit.sh", "timeoutSec": 5}
    settings = {"version": 1, "hooks": {"preToolUse": [other], "sessionStart": [other]}}
    first = copilot.with_ours(settings, hook_command(harness="copilot"))
    again = copilot.with_ours(first, hook_command("/x.toml", harness="copilot"))
    assert again["hooks"]["sessionStart"] == [other]
    assert again["hooks"]["preToolUse"][0] == other
    assert [len(again["hooks"][e]) for e in copilot.SETTINGS_EVENTS] == [2, 1]
    assert copilot.with_ours(again, hook_command("/x.toml", harness="copilot")) == again
    assert copilot.without_ours(again) == settings
    assert copilot.without_ours(copilot.with_ours({}, "x dsh-circuit-breaker hook")) == (
        copilot.EMPTY_FILE
    )


@pytest.mark.parametrize(
    "text", ['{"version": 2, "hooks": {}}', '{"hooks": []}', '{"hooks": {"preToolUse": {}}}']
)
def test_a_file_we_do_not_understand_is_never_touched(tmp_path: Path, text: str) -> None:
    path = tmp_path / "dsh-circuit-breaker.json"
    path.write_text(text)
    with pytest.raises(SettingsError):
        copilot.read_settings(path)
    done = subprocess.run(
        [*CLI, "install", "copilot", "--hooks-file", str(path)],
        env=hook_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and done.stderr.startswith("dsh-circuit-breaker: ")
    assert path.read_text() == text


def test_uninstall_deletes_our_file_only_when_nothing_else_is_in_it(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    hooks = tmp_path / ".copilot" / "hooks"

    def cli(*args: str) -> str:
        done = subprocess.run(
            [*CLI, *args], env=env, capture_output=True, text=True, timeout=60, check=True
        )
        return done.stdout

    cli("install", "copilot")
    ours = hooks / copilot.FILE_NAME
    cli("uninstall", "copilot", "--no-backup")
    assert list(hooks.iterdir()) == []
    cli("install", "copilot", "--no-backup")
    data = json.loads(ours.read_text())
    data["hooks"]["agentStop"] = [{"type": "command", "bash": "./notify.sh"}]
    ours.write_text(json.dumps(data))
    assert "backup:" in cli("uninstall", "copilot")
    assert json.loads(ours.read_text()) == {
        "version": 1,
        "hooks": {"agentStop": [{"type": "command", "bash": "./notify.sh"}]},
    }
    assert len(list(hooks.glob(f"{copilot.FILE_NAME}.bak-*"))) == 1
