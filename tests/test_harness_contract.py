"""Every harness module in `harnesses.HARNESSES` keeps the same contract (see the
Protocols of harnesses/_contract.py, which mypy holds every module to), checked here
once for all of them, at run time:

- its members are there, with the right types;
- its real captured probe (tests/fixtures/harness-events/NAME) through `hook --harness
  NAME`: five calls allowed, the sixth denied in the harness's own shape, although the
  harness's annotation arguments differ on every call, and the eighth (the third refusal
  in a row) answered as a stop;
- its answer to a stop: `stop.json` where the harness can end the agent, else `deny.json`
  (the plain refusal), and always the refusal;
- `install`, `doctor` and `uninstall` in a scratch HOME against the harness's own
  settings file, the doctor finding the harness's real CLI (tests/e2e, or the Python
  agent's venv that scripts/setup makes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.core.breaker import Decision
from dsh_circuit_breaker.core.config import DEFAULT_IGNORE_ARGS
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from dsh_circuit_breaker.harnesses import HARNESSES, load
from dsh_circuit_breaker.judge import Call, Prompt
from hook_support import hook_env, run_hook
from support.command_hook_harnesses import HARNESSES as DESCRIBED

FIXTURES = Path(__file__).parent / "fixtures" / "harness-events"
CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]
NAMES = sorted(HARNESSES)
# Harnesses whose hook event carries only the command: Codex drops `justification` (the
# model's per-call annotation of exec_command) before its PreToolUse hook; Mistral Vibe's
# bash takes no annotation at all (its schema forbids any argument but command and timeout);
# Hermes Agent's terminal tool takes none (command, background, timeout, workdir, pty, ...);
# OpenHands builds the action its hook sees without the model's `summary` and `security_risk`.
NO_ANNOTATIONS = {"codex", "mistral-vibe", "hermes", "openhands-cli"}


def probe_events(name: str) -> list[dict[str, Any]]:
    lines = (FIXTURES / name / "probe.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.mark.parametrize("name", NAMES)
def test_members(name: str) -> None:
    harness = load(name)
    assert name == harness.NAME
    for attribute in ("LABEL", "CLI", "CLI_PACKAGE"):
        assert isinstance(getattr(harness, attribute), str) and getattr(harness, attribute)
    for attribute in ("EXEMPT", "ANNOTATION_ARGS"):
        value = getattr(harness, attribute)
        assert isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    for function in ("parse", "answer", "probe_events"):
        assert callable(getattr(harness, function))
    own = [hasattr(harness, f) for f in ("install", "uninstall", "doctor")]
    if not all(own):  # the shared command-hook install/uninstall/doctor
        assert not any(own)
        assert isinstance(harness.SCOPES, tuple) and harness.SCOPES
        assert isinstance(harness.SETTINGS_EVENTS, tuple) and harness.SETTINGS_EVENTS
        assert harness.FILE_OPTION.startswith("--")
        assert callable(harness.settings_path)
    assert harness.answer(Decision(True)) in (None, "{}")
    for event in harness.probe_events("contract"):
        assert isinstance(harness.parse(event), (Call, Prompt))


@pytest.mark.parametrize("name", NAMES)
def test_captured_probe_denies_the_sixth_call_and_stops_at_the_eighth(
    name: str, tmp_path: Path
) -> None:
    harness = load(name)
    events = probe_events(name)
    parsed = [harness.parse(event) for event in events]
    calls = [(e, p) for e, p in zip(events, parsed, strict=True) if isinstance(p, Call)]
    assert len(calls) >= 9, "the fixture must hold at least nine calls"
    annotations = (*DEFAULT_IGNORE_ARGS, *harness.ANNOTATION_ARGS)
    varied = {
        key
        for key in annotations
        if len({json.dumps(c.arguments.get(key)) for _, c in calls}) == len(calls)
    }
    if name in NO_ANNOTATIONS:
        assert not any(key in c.arguments for _, c in calls for key in annotations)
    else:
        assert varied, f"no annotation argument ({annotations}) differs on every call"
    assert len({(c.agent, c.tool) for _, c in calls}) == 1

    env = hook_env(tmp_path)
    outputs = []
    for event, what in zip(events, parsed, strict=True):
        done = run_hook(event, env, "--harness", name)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        if isinstance(what, Call):
            outputs.append(done.stdout.strip())
    allowed = harness.answer(Decision(True)) or ""
    assert outputs[:5] == [allowed] * 5
    tool = calls[5][1].tool
    denials = [json.loads(output) for output in outputs[5:8]]
    message = _find_message(denials[0])
    assert message == render(DEFAULT_MESSAGES["duplicate"], tool, "duplicate", 6, 6)
    assert denials[:2] == [expected(name, message)] * 2
    # The third refusal in a row (stopAfterDenials 3) is a stop, with the rendered reason.
    reason = render(DEFAULT_MESSAGES["stop"], tool, "duplicate", 3, 3)
    assert denials[2] == expected(name, message, reason)


def expected(name: str, message: str, stop_reason: str | None = None) -> Any:
    """The answer the harness expects: its `stop.json` for a stop where it has one, else its
    `deny.json`, with the texts in place of the placeholders."""
    stop_file = FIXTURES / name / "stop.json"
    use_stop = stop_reason is not None and stop_file.exists()
    template = (stop_file if use_stop else FIXTURES / name / "deny.json").read_text("utf-8")
    filled = template.replace("{message}", json.dumps(message)[1:-1])
    return json.loads(filled.replace("{stopReason}", json.dumps(stop_reason or "")[1:-1]))


@pytest.mark.parametrize("name", NAMES)
def test_a_stop_answer_still_refuses(name: str) -> None:
    harness = load(name)
    message = 'Circuit breaker: NOT run, a repeat. "quoted" \\ text'
    reason = "Circuit breaker: this agent is being stopped \u2014 why"
    stop = Decision(False, "duplicate", message, 6, 6, stop=True, stop_reason=reason)
    answered = json.loads(harness.answer(stop))
    assert answered == expected(name, message, reason)
    assert _find_message(answered) == message  # the refusal is never lost to the stop
    plain = json.loads(harness.answer(Decision(False, "duplicate", message, 6, 6)))
    assert plain == expected(name, message)  # no stop: the plain refusal, nothing more


def _find_message(value: Any) -> str:
    if isinstance(value, str) and value.startswith("Circuit breaker:"):
        return value
    children = value.values() if isinstance(value, dict) else value
    if isinstance(value, (dict, list)):
        for child in children:
            found = _find_message(child)
            if found:
                return found
    return ""


@pytest.mark.parametrize("name", NAMES)
def test_install_doctor_uninstall(name: str, tmp_path: Path) -> None:
    harness = load(name)
    cli_dir = DESCRIBED[name].cli_dir()
    env = hook_env(tmp_path, PATH=f"{cli_dir}{os.pathsep}{os.environ['PATH']}")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *args, name], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    installed = cli("install")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    doctor = cli("doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert (
        "PROBLEM" not in doctor.stdout
        and f"{harness.LABEL} is installed: {cli_dir}" in doctor.stdout
    )
    removed = cli("uninstall")
    assert removed.returncode == 0 and "removed from" in removed.stdout
    after = cli("doctor")
    assert after.returncode == 1 and "the hook is not installed" in after.stdout
