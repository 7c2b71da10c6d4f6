"""What the harness registry holds against what the end-to-end suites run: adding a
harness is adding its module, its description in the suite's support module, its pins,
its captured events and its doc, never a test file, and a registered harness the suites
do not run fails here.

- Command-hook harnesses (`harnesses.HARNESSES`): each is described in
  tests/support/command_hook_harnesses.py, pinned in tests/e2e/package.json (an agent from
  PyPI: in tests/e2e/python/NAME.txt, which scripts/setup installs), has its
  captured events (tests/fixtures/harness-events/NAME) and its doc (docs/NAME.md), and
  runs in every scenario of tests/test_command_hook_e2e.py but those its `not_in` names,
  each with a reason.
- Plugin harnesses (`harnesses.PLUGIN_HARNESSES`): each is described in
  tests/support/plugin_harnesses.py and runs in tests/test_plugin_harness_e2e.py, or is
  in PLUGIN_GAPS, the ones not there yet.

The suites' test ids are read from pytest's own collection, so this checks what would
run, not what a list says would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_circuit_breaker.harnesses import HARNESSES, PLUGIN_HARNESSES, load
from support import command_hook_harnesses, plugin_harnesses
from test_command_hook_e2e import SCENARIOS

TESTS = Path(__file__).parent
ROOT = TESTS.parent
# Plugin harnesses with no description in support/plugin_harnesses.py yet (they have e2e
# files of their own, or none). Empty it as they join; a harness that joined must leave.
PLUGIN_GAPS = {"cline", "dsh", "openclaw"}
# Targets of `install` that are neither kind, each with a suite of its own: MCP wraps the
# servers of a client's MCP config in the relay (the relay, and real CLIs as its clients).
OWN_SUITES = {"mcp": ("test_mcp_relay.py", "test_mcp_agents_e2e.py")}

pytestmark = pytest.mark.timeout(120)


def collected(test_file: str) -> list[tuple[str, str]]:
    """(test function, parameter id) of each test pytest collects from `test_file`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", str(TESTS / test_file)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=100,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = re.findall(r"::(\w+)\[([^\]]+)\]$", done.stdout, re.MULTILINE)
    assert found, done.stdout
    return found


def harness_of(param: str, names: set[str]) -> str:
    """The harness a parameter id names (`claude-code`, `claude-code-True`)."""
    (name,) = {n for n in names if param == n or param.startswith(n + "-")}
    return name


def test_every_command_hook_harness_is_described() -> None:
    described = set(command_hook_harnesses.HARNESSES)
    assert set(HARNESSES) - described == set(), "registered, with no e2e description"
    assert described - set(HARNESSES) == set(), "described, but not registered"


def test_every_command_hook_harness_runs_each_scenario_or_says_why_not() -> None:
    ran: dict[str, set[str]] = {name: set() for name in HARNESSES}
    for test, param in collected("test_command_hook_e2e.py"):
        ran[harness_of(param, set(HARNESSES))].add(SCENARIOS[test])
    scenarios = set(SCENARIOS.values())
    for name in HARNESSES:
        described = command_hook_harnesses.HARNESSES.get(name)
        assert described is not None, f"{name}: registered, with no e2e description"
        gaps = described.not_in
        assert set(gaps) <= scenarios, (name, gaps)
        assert all(reason.strip() for reason in gaps.values()), name
        assert ran[name] == scenarios - set(gaps), name
        # The probe and the cap run everywhere: the least a harness must do.
        assert {"probe", "probe_stop_off", "cap"} <= ran[name], name


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_a_command_hook_harness_has_its_pins_events_and_doc(name: str) -> None:
    pinned = json.loads((TESTS / "e2e" / "package.json").read_text())
    packages = {**pinned["dependencies"], **pinned.get("optionalDependencies", {})}
    package = load(name).CLI_PACKAGE
    python_pins = TESTS / "e2e" / "python" / f"{name}.txt"
    if python_pins.is_file():  # from PyPI: the package at one exact version, in its venv
        lines = python_pins.read_text().splitlines()
        assert any(re.fullmatch(rf"{re.escape(package)}==[\w.]+", line) for line in lines)
        assert command_hook_harnesses.HARNESSES[name].cli_dir().parent.name == f"agent-{name}"
    else:  # its npm package, or that package's platform binary (droid's @factory/cli-linux-x64)
        assert any(p == package or p.startswith(package + "-") for p in packages), package
    events = TESTS / "fixtures" / "harness-events" / name
    assert (events / "probe.jsonl").is_file() and (events / "deny.json").is_file()
    assert (ROOT / "docs" / f"{name}.md").is_file()


def test_every_plugin_harness_is_described_or_a_known_gap() -> None:
    described = set(plugin_harnesses.HARNESSES)
    assert set(PLUGIN_HARNESSES) - described - PLUGIN_GAPS - set(OWN_SUITES) == set()
    assert described - set(PLUGIN_HARNESSES) == set(), "described, but not registered"
    assert PLUGIN_GAPS & described == set(), "described now: take it out of PLUGIN_GAPS"
    assert PLUGIN_GAPS - set(PLUGIN_HARNESSES) == set(), "no longer registered: drop it"
    ran = {harness_of(param, described) for _, param in collected("test_plugin_harness_e2e.py")}
    assert ran == described


def test_a_target_with_a_suite_of_its_own_runs_it() -> None:
    for name, suites in OWN_SUITES.items():
        assert name in PLUGIN_HARNESSES, f"{name}: no longer registered: drop it"
        for suite in suites:
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "--collect-only", "-q", str(TESTS / suite)],
                capture_output=True,
                text=True,
                cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                timeout=100,
            )
            assert done.returncode == 0 and f"{suite}::" in done.stdout, done.stdout[-2000:]


def test_a_cli_gets_the_hooks_own_timeout_to_answer_doctor_by_default() -> None:
    from dsh_circuit_breaker.harnesses import _defaults, _settings

    assert _defaults.CLI_TIMEOUT == _settings.HOOK_TIMEOUT
