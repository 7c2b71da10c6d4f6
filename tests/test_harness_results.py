"""Results from the command-hook harnesses' post-tool events (issue 25), from the events
their real CLIs sent (tests/fixtures/harness-events/NAME/results.jsonl: a poll whose
output moves, run twice, a command that fails, and a subagent's call where the harness
has subagents; recorded with tests/support/capture_hook.py on every tool event):

- each post-tool event parses to an `Outcome` of the very call (agent key, tool,
  arguments) its pre-tool event was judged as, a subagent's too;
- through both transports that share judge.py, the command hook and the HTTP guard's
  hook route, with the default config (`resultProgress` on): the moving poll runs on past
  6 copies, the frozen one is refused at the 6th, and with `sameResultLimit: 6` a frozen
  poll alternated with a new call each time is refused at its 7th;
- `install` adds the post-tool hook while the config observes results (the default),
  `doctor` says whether it is there, `uninstall` removes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker import hook
from dsh_circuit_breaker.core.results import result_digest
from dsh_circuit_breaker.harnesses import HARNESSES, load
from dsh_circuit_breaker.judge import Call, Outcome
from hook_support import hook_env, run_hook
from support.command_hook_harnesses import HARNESSES as DESCRIBED
from support.guard_service import Service

pytestmark = pytest.mark.timeout(300)

FIXTURES = Path(__file__).parent / "fixtures" / "harness-events"
CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]
NAMES = sorted(HARNESSES)
POLL = "sh poll.sh"  # the captured poll's command; it printed `done 0%`, then `done 1%`
# Where each harness's captured results have a subagent's call (its key is its own).
SUBAGENTS = {"claude-code", "copilot", "droid", "qwen-code"}


def captured(name: str) -> list[dict[str, Any]]:
    text = (FIXTURES / name / "results.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_every_command_hook_harness_names_its_post_tool_events() -> None:
    # Each of them has one in its pinned CLI (checked against the captured events below).
    for name in NAMES:
        events = load(name).POST_EVENTS  # type: ignore[attr-defined]
        assert events and all(isinstance(e, str) for e in events), name


@pytest.mark.parametrize("name", NAMES)
def test_a_post_tool_event_is_the_outcome_of_the_call_it_follows(name: str) -> None:
    harness = load(name)
    calls: list[Call] = []
    outcomes: list[Outcome] = []
    for event in captured(name):
        what = harness.parse(event)
        if isinstance(what, Call):
            calls.append(what)
            continue
        assert isinstance(what, Outcome), event
        # The call it reports on was judged under the same key, tool and arguments.
        call = (what.agent, what.tool, what.arguments)
        judged = [c for c in calls if (c.agent, c.tool, c.arguments) == call]
        assert judged, (name, what.agent, what.tool)
        outcomes.append(what)
    polls = [o for o in outcomes if POLL in json.dumps(o.arguments)]
    assert len(polls) == 2
    first, second = (json.dumps(p.result) for p in polls)
    assert "done 0%" in first and "done 1%" in second  # the output is what is digested
    assert result_digest(polls[0].result) != result_digest(polls[1].result)
    if name in SUBAGENTS:
        main = calls[0].agent
        assert {o.agent for o in outcomes} - {main}, "the subagent's results are its own"


def poll_events(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first poll's captured pre-tool and post-tool events."""
    harness = load(name)
    pre = post = None
    for event in captured(name):
        what = harness.parse(event)
        if POLL in json.dumps(getattr(what, "arguments", None)):
            if isinstance(what, Call) and pre is None:
                pre = event
            elif isinstance(what, Outcome) and post is None:
                post = event
    assert pre is not None and post is not None
    return pre, post


def edited(event: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(json.dumps(event).replace(old, new))
    return found


def moving(name: str, copies: int) -> list[dict[str, Any]]:
    pre, post = poll_events(name)
    return [e for i in range(copies) for e in (pre, edited(post, "done 0%", f"done {i}%"))]


def frozen(name: str, copies: int) -> list[dict[str, Any]]:
    pre, post = poll_events(name)
    return [e for _ in range(copies) for e in (pre, post)]


def interleaved(name: str, copies: int) -> list[dict[str, Any]]:
    """The frozen poll, a new call after each copy."""
    pre, post = poll_events(name)
    return [e for i in range(copies) for e in (pre, post, edited(pre, POLL, f"echo step {i}"))]


# Each sequence, its config, and the copies of the poll that must be refused.
CASES: dict[str, tuple[Callable[[str, int], list[dict[str, Any]]], dict[str, Any], list[int]]] = {
    "moving": (moving, {}, []),
    "frozen": (frozen, {}, [6, 7, 8]),  # the seed's count: the 6th copy is refused
    # sameResultLimit counts results that came back the same: the 7th copy follows six.
    "interleaved": (interleaved, {"sameResultLimit": 6}, [7, 8]),
    "interleaved-without-sameResultLimit": (interleaved, {}, []),
    # Results off: the call-only rule refuses the moving poll too.
    "moving-results-off": (moving, {"resultProgress": False}, [6, 7, 8]),
}


def refused_copies(
    name: str, events: list[dict[str, Any]], answer: Callable[[dict[str, Any]], str]
) -> list[int]:
    """Which copies of the poll (1-based) were refused; every other event is answered
    with nothing (a post-tool event always, whatever happened to its call)."""
    harness = load(name)
    refused, copy = [], 0
    for event in events:
        out = answer(event)
        what = harness.parse(event)
        is_poll = isinstance(what, Call) and POLL in json.dumps(what.arguments)
        copy += is_poll
        if out not in ("", "{}"):
            assert is_poll, (event, out)
            assert "Circuit breaker: NOT run, a repeat" in out
            refused.append(copy)
    return refused


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", NAMES)
def test_results_through_the_command_hook(name: str, case: str, tmp_path: Path) -> None:
    sequence, config, expected = CASES[case]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "incidentLog": ""}))
    state = f"sqlite:///{tmp_path}/state.db"
    try:
        answered = refused_copies(
            name, sequence(name, 8), lambda e: hook.handle(e, str(path), state, name) or ""
        )
    finally:
        hook._close_opened()
    assert answered == expected


@pytest.fixture(scope="module")
def guard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    home = tmp_path_factory.mktemp("guard")
    env = hook_env(home)
    config = home / "config" / "dsh-circuit-breaker" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"sameResultLimit": 6}))  # resultProgress: the default
    with Service(env) as running:
        yield running


@pytest.mark.parametrize("case", ["moving", "frozen", "interleaved"])
@pytest.mark.parametrize("name", NAMES)
def test_results_through_the_http_guard(name: str, case: str, guard: Service) -> None:
    sequence, _, expected = CASES[case]
    events = sequence(name, 8)
    own = f"{name}-{case}"  # a session of its own per test, on the one guard
    for key in ("session_id", "sessionId"):
        events = [edited(e, e[key], own) if key in e else e for e in events]
    assert refused_copies(name, events, lambda e: guard.hook(e, name).decode()) == expected


def test_a_post_tool_event_prints_nothing_and_exits_0(tmp_path: Path) -> None:
    # The real process, as a harness runs it: results off or on (the default).
    pre, post = poll_events("claude-code")
    env = hook_env(tmp_path)
    for config in ({"resultProgress": False}, {}):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        for event in (pre, post, post):  # a second result for one call changes nothing
            done = run_hook(event, env, "--config", str(path))
            assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    broken = {k: v for k, v in post.items() if k != "tool_response"}
    done = run_hook(broken, env, "--config", str(path))
    assert done.returncode == 0 and done.stdout == ""
    assert "PostToolUse event has no tool_response" in done.stderr


@pytest.mark.parametrize("name", NAMES)
def test_install_adds_the_post_tool_hook_only_with_results(name: str, tmp_path: Path) -> None:
    harness = load(name)
    env = hook_env(tmp_path, PATH=f"{DESCRIBED[name].cli_dir()}{os.pathsep}{os.environ['PATH']}")
    # A file named as the harness names its own (Kimi CLI reads config.toml as TOML).
    settings = tmp_path / "settings" / harness.settings_path("user").name
    config = tmp_path / "breaker.json"

    def cli(action: str, *args: str) -> subprocess.CompletedProcess[str]:
        where = [harness.FILE_OPTION, str(settings)]
        return subprocess.run(
            [*CLI, action, name, *where, *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def ours() -> set[str]:
        found = harness.our_commands(harness.read_settings(settings, harness.SETTINGS_EVENTS))
        return set(found)

    post = set(harness.POST_EVENTS)  # type: ignore[attr-defined]
    off = json.dumps({"resultProgress": False, "sameResultLimit": 0})  # calls alone
    config.write_text(off)
    done = cli("install", "--config", str(config))
    assert done.returncode == 0 and "results:" not in done.stdout, done.stderr
    assert ours() == set(harness.SETTINGS_EVENTS)
    config.write_text(json.dumps({"sameResultLimit": 12}))
    doctor = cli("doctor")
    assert doctor.returncode == 1, doctor.stdout
    assert "results are on in the config, but the post-tool hook is missing" in doctor.stdout
    done = cli("install", "--config", str(config))
    assert done.returncode == 0 and "results: " + ", ".join(harness.POST_EVENTS) in done.stdout  # type: ignore[attr-defined]
    assert ours() == set(harness.SETTINGS_EVENTS) | post
    doctor = cli("doctor")
    assert doctor.returncode == 0 and "PROBLEM" not in doctor.stdout, doctor.stdout
    assert "results on: the post-tool hook is installed" in doctor.stdout
    config.write_text(off)  # results off again: the hook costs a process for nothing
    doctor = cli("doctor")
    assert doctor.returncode == 0 and "observes no results" in doctor.stdout, doctor.stdout
    assert cli("install", "--config", str(config)).returncode == 0
    assert ours() == set(harness.SETTINGS_EVENTS)
    config.write_text("{}")  # the defaults observe results: the post-tool hook goes in
    done = cli("install", "--config", str(config))
    assert done.returncode == 0 and "results: " in done.stdout, done.stderr
    assert ours() == set(harness.SETTINGS_EVENTS) | post
    removed = cli("uninstall")
    assert removed.returncode == 0 and "removed from" in removed.stdout
    assert not settings.exists() or ours() == set()


def test_http_install_posts_the_results_by_default(tmp_path: Path) -> None:
    env = hook_env(tmp_path, DSH_CIRCUIT_BREAKER_TOKEN="test-token-0123456789abcdef")
    settings = tmp_path / "settings.json"
    config = tmp_path / "breaker.json"
    config.write_text("{}")  # the defaults observe results
    done = subprocess.run(
        [
            *CLI,
            "install",
            "claude-code",
            "--settings",
            str(settings),
            "--config",
            str(config),
            "--http",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    hooks = json.loads(settings.read_text())["hooks"]
    for event in ("PreToolUse", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure"):
        (group,) = hooks[event]
        assert group["hooks"][0]["url"].endswith("/hook/claude-code"), event
