"""The console script: --version and the demo, run as a user would."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from dsh_circuit_breaker import __version__
from dsh_circuit_breaker.cli import main


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dsh_circuit_breaker.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_version() -> None:
    result = cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"dsh-circuit-breaker {__version__}"


def test_demo_shows_six_allowed_four_denied_the_text_and_the_incident() -> None:
    result = cli("demo")
    assert result.returncode == 0, result.stderr
    verdicts = re.findall(
        r"^call +(\d+): .*->  (allowed|DENIED \(duplicate\))$", result.stdout, re.M
    )
    assert [v for _, v in verdicts] == ["allowed"] * 6 + ["DENIED (duplicate)"] * 4
    assert "already run as often as allowed (runs: 6, limit: 6)" in result.stdout
    assert "this agent is being stopped" in result.stdout  # the 9th call stops it
    incidents = [json.loads(line) for line in result.stdout.strip().splitlines()[-2:]]
    assert [i["kind"] for i in incidents] == ["duplicate", "stop"]
    assert all(i["agent"] == "demo-agent" for i in incidents)


def test_no_command_prints_help_and_fails() -> None:
    assert main([]) == 2
