"""The console script: --version and the demo, run as a user would."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from dsh_circuit_breaker import __version__
from dsh_circuit_breaker.cli import main


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dsh_circuit_breaker.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_version() -> None:
    result = cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"dsh-circuit-breaker {__version__}"


def test_demo_shows_five_allowed_five_denied_the_text_and_the_incident() -> None:
    result = cli("demo")
    assert result.returncode == 0, result.stderr
    verdicts = re.findall(
        r"^call +(\d+): .*->  (allowed|DENIED \(duplicate\))$", result.stdout, re.M
    )
    # The original plugin's probe: "the sixth call was denied".
    assert [v for _, v in verdicts] == ["allowed"] * 5 + ["DENIED (duplicate)"] * 5
    assert "NOT run, a repeat (copies: 6, limit: 6)" in result.stdout
    assert "this agent is being stopped" in result.stdout  # the 8th call stops it
    incidents = [json.loads(line) for line in result.stdout.strip().splitlines()[-2:]]
    assert [i["kind"] for i in incidents] == ["duplicate", "stop"]
    assert all(i["agent"] == "demo-agent" for i in incidents)


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    printed = capsys.readouterr()
    help_text = printed.out + printed.err
    assert help_text.startswith("usage: dsh-circuit-breaker")
    for command in ("demo", "hook", "install", "doctor", "replay"):
        assert command in help_text  # the commands are listed


def test_help_lists_the_commands_and_exits_zero() -> None:
    result = cli("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: dsh-circuit-breaker")
    for command in ("demo", "hook", "install", "doctor", "replay"):
        assert command in result.stdout


@pytest.mark.parametrize("calls", [1, 3, 5])
def test_a_demo_without_a_denial_has_an_empty_incident_log(calls: int) -> None:
    result = cli("demo", "--calls", str(calls))  # was FileNotFoundError: incidents.jsonl
    assert result.returncode == 0, result.stderr
    assert "Incident log (0 lines):" in result.stdout and "DENIED" not in result.stdout


def test_an_internal_error_is_one_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_circuit_breaker import demo

    def broken(n: int) -> list[dict[str, str]]:
        raise TypeError("'int' object is not iterable")

    monkeypatch.setattr(demo, "probe_calls", broken)
    monkeypatch.delenv("DSH_CIRCUIT_BREAKER_DEBUG", raising=False)
    assert main(["demo"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "dsh-circuit-breaker: internal error (a bug; DSH_CIRCUIT_BREAKER_DEBUG=1 shows where): "
        "TypeError: 'int' object is not iterable\n"
    )


def test_help_says_what_each_command_and_target_does() -> None:
    top = cli("--help").stdout
    assert "HTTP hooks" in " ".join(top.split())  # serve's summary: both transports
    assert "(a capped subagent)" not in top
    install = cli("install", "claude-code", "--help").stdout
    assert "put the breaker into Claude Code" in install  # the target has a description
    assert "(default: user)" in install  # --scope shows its default
    doctor = " ".join(cli("doctor", "claude-code", "--help").stdout.split())
    assert "written into the hook command" not in doctor  # doctor writes nothing
    assert "checked instead of the one the installed hook command names" in doctor
