"""Running the command hook as the harness does: a new process per event, JSON on stdin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent / "dsh-circuit-breaker"
HOOK_COMMAND = (
    [str(BIN), "hook"]
    if BIN.exists()
    else [sys.executable, "-m", "dsh_circuit_breaker.cli", "hook"]
)


def hook_env(home: Path, **extra: str) -> dict[str, str]:
    """A private HOME/XDG world, so no test sees the developer's own config or state."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DSH_CIRCUIT_BREAKER_", "XDG_")) and k != "HOME"
    }
    env.update(
        HOME=str(home),
        XDG_STATE_HOME=str(home / "state"),
        XDG_CONFIG_HOME=str(home / "config"),
    )
    env.update(extra)
    return env


def pre_tool_use(
    tool: str = "Bash",
    tool_input: Any = None,
    session: str = "sess-1",
    agent_id: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "session_id": session,
        "transcript_path": f"/tmp/{session}.jsonl",
        "cwd": "/tmp",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {"command": "echo cbprobe4"} if tool_input is None else tool_input,
        "tool_use_id": "toolu_01",
    }
    if agent_id is not None:
        event.update(agent_id=agent_id, agent_type="general-purpose")
    event.update(more)
    return event


def prompt_submit(session: str = "sess-1", prompt: str = "go on") -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": f"/tmp/{session}.jsonl",
        "cwd": "/tmp",
        "hook_event_name": "UserPromptSubmit",
        "prompt": prompt,
    }


def run_hook(
    payload: dict[str, Any] | bytes | str,
    env: dict[str, str],
    *args: str,
    user: int | None = None,
) -> subprocess.CompletedProcess[str]:
    data = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
    if isinstance(data, str):
        data = data.encode()
    done = subprocess.run(
        [*HOOK_COMMAND, *args],
        input=data,
        env=env,
        capture_output=True,
        timeout=60,
        user=user,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def denial(out: str) -> str | None:
    """The denial reason in a hook's stdout, None when it allowed (printed nothing)."""
    if not out.strip():
        return None
    decision = json.loads(out)
    specific = decision["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse"
    assert specific["permissionDecision"] == "deny"
    reason: str = specific["permissionDecisionReason"]
    return reason


def make_read_only(directory: Path) -> Callable[[], None] | None:
    """Make `directory` read-only even for root; returns how to undo it, or None."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return lambda: directory.chmod(0o755)
    # Root ignores permission bits: use a read-only mount, or else the immutable flag.
    mount = ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(directory)]
    if subprocess.run(mount, capture_output=True).returncode == 0:
        return lambda: subprocess.run(["umount", str(directory)], check=True)
    if subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode == 0:
        return lambda: subprocess.run(["chattr", "-i", str(directory)], check=True)
    return None


def runs_then_refusal(tool: str, **config: Any) -> tuple[int, str]:
    """How many identical calls of `tool` run under `config` (Config's keyword names)
    before one is refused, and that refusal's text: asked of the breaker itself, so a test
    of a real harness follows its rules."""
    from dsh_circuit_breaker import CircuitBreaker, Config

    breaker = CircuitBreaker(Config(**config))
    for ran in range(1000):
        decision = breaker.check("agent", tool, {"command": "true"})
        if not decision.allowed:
            return ran, decision.message
    raise AssertionError("never refused")
