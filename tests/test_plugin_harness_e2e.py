"""End to end, for every plugin harness (pi, OpenCode, Kilo Code): the real CLI, pinned in
tests/e2e/package.json, run headless in a scratch HOME with the plugin that the installed
wheel's `dsh-circuit-breaker install NAME` wrote, against the scripted model on 127.0.0.1
(tests/support/plugin_harnesses.py). The CLI, its tools, the plugin loader, the adapter,
the shared guard client and the guard process are all real; only the model is scripted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from support.fake_openai import function_call
from support.installed import Installed
from support.plugin_harnesses import HARNESSES, Harness, in_scratch_home, kill_and_wait
from support.polls import CONFIG, COPIES, poll, refused, runs

pytestmark = pytest.mark.timeout(600)

DENIED = render(DEFAULT_MESSAGES["duplicate"], "bash", "duplicate", 6, 6)
STOPPED = render(DEFAULT_MESSAGES["stop"], "bash", "duplicate", 3, 3)


@pytest.fixture(params=sorted(HARNESSES))
def harness(request: pytest.FixtureRequest, installed: Installed) -> Harness:
    return in_scratch_home(request.param, installed)


def bash(command: str, description: str = "Run it") -> dict[str, Any]:
    return function_call("bash", {"command": command, "description": description})


def probe(side: Path) -> list[dict[str, Any]]:
    """The original plugin's probe: the same command ten times, its description rewritten
    on every call (ignoreArgs drops it); each real run leaves a line in `side`."""
    return [bash(f"echo cbprobe4 >> {side}", f"Run probe step {i}") for i in range(1, 11)]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def incidents(harness: Harness) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines(harness.incidents)]


def test_probe_five_run_the_sixth_and_after_refused(harness: Harness) -> None:
    # The original plugin's probe: "the sixth call was denied". stopAfterDenials: 0, the
    # breaker only refuses: the run goes on to the model's end.
    config = harness.home / "breaker.json"
    config.write_text(json.dumps({"stopAfterDenials": 0}))
    harness.install("--config", str(config))
    side = harness.work / "side.txt"
    with harness.model([*probe(side), "All done."]) as model:
        result = harness.run(model, "Run the cbprobe4 probe ten times.")
    assert result.returncode == 0, result.stderr[-3000:]
    assert model.errors == []
    assert lines(side) == ["cbprobe4"] * 5
    calls = model.tool_uses()
    assert [r.text == DENIED for r in model.tool_results()] == [False] * 5 + [True] * 5
    # The refusal is what the model was sent next, as the refused call's result.
    assert model.result_in_next_request(calls[5]["id"]).text == DENIED
    (start,) = harness.starts(result)
    assert start["ok"] and start["python"] == str(harness.product.python)
    assert start["pluginFile"] == str(harness.adapter_file)
    (incident,) = incidents(harness)  # the first duplicate, and no stop
    assert (incident["kind"], incident["tool"], incident["count"]) == ("duplicate", "bash", 6)
    assert incident["agent"] == harness.session_id(result)
    assert "cbprobe4" not in harness.incidents.read_text()  # no argument content on disk
    # The state is the command hooks' store: `status` lists the session.
    status = harness.product.run("status", env=harness.env)
    assert status.returncode == 0 and incident["agent"] in status.stdout, status.stdout


def test_a_looping_agent_is_stopped_at_its_third_refusal_in_a_row(harness: Harness) -> None:
    harness.install()
    side = harness.work / "side.txt"
    loop = bash(f"echo cbprobe4 >> {side}", "Run it")
    with harness.model([loop] * 30) as model:  # the same call, as long as it is asked
        result = harness.run(model, "Run the probe until it says stop.")
    assert result.returncode == harness.stopped_returncode, result.stderr[-3000:]
    assert model.errors == []
    assert lines(side) == ["cbprobe4"] * 5
    # Eight replies, the 8th refused with stop: no model request after it.
    calls = model.tool_uses()
    assert len(model.replies) == len(calls) == 8
    # The model saw the 6th and 7th refused; the 8th's refusal is the harness's record of
    # that call, sent to no model.
    assert [r.text == DENIED for r in model.tool_results()] == [False] * 5 + [True] * 2
    assert harness.recorded_result(result, calls[7]["id"]) == DENIED
    assert STOPPED in harness.stop_shown(result)
    duplicate, stop = incidents(harness)
    assert (duplicate["kind"], stop["kind"], stop["count"]) == ("duplicate", "stop", 3)
    assert duplicate["agent"] == stop["agent"] == harness.session_id(result)


def test_pi_print_mode_exits_1_after_a_stop(installed: Installed) -> None:
    harness = in_scratch_home("pi", installed)
    harness.install()
    side = harness.work / "side.txt"
    with harness.model([bash(f"echo cbprobe4 >> {side}")] * 30) as model:
        result = harness.run(model, "Run the probe.", flags=("--mode", "text"))
    assert result.returncode == 1
    assert len(model.replies) == 8 and lines(side) == ["cbprobe4"] * 5
    assert result.stdout == ""
    assert result.stderr.splitlines() == [STOPPED, "Request was aborted."]


def test_cap_refuses_every_call_past_it_with_the_cap_text(harness: Harness) -> None:
    config = harness.home / "breaker.json"
    config.write_text(json.dumps({"maxCallsPerAgent": 3}))
    harness.install("--config", str(config))
    side = harness.work / "side.txt"
    turns = [bash(f"echo call{i} >> {side}") for i in range(1, 6)]  # five different calls
    with harness.model([*turns, "Stopped."]) as model:
        result = harness.run(model, "Make five calls.")
    assert result.returncode == 0, result.stderr[-3000:]
    assert lines(side) == ["call1", "call2", "call3"]
    capped = render(DEFAULT_MESSAGES["cap"], "bash", "cap", 3, 3)
    assert [r.text for r in model.tool_results()][3:] == [capped, capped]


def test_healthy_edit_and_test_cycle_is_never_refused(harness: Harness) -> None:
    harness.install()
    app = harness.work / "app.txt"
    turns: list[Any] = [harness.write_call(app, "version 1\n")]
    for version in range(1, 10):  # nine identical test runs, more than duplicateLimit (6)
        turns.append(bash(f"cat {app}", "Run the tests"))
        turns.append(harness.edit_call(app, f"version {version}", f"version {version + 1}"))
    with harness.model([*turns, "All green."]) as model:
        result = harness.run(model, "Fix the app, testing after every edit.")
    assert result.returncode == 0, result.stderr[-3000:]
    assert model.errors == []
    results = model.tool_results()
    assert len(results) == len(turns)
    assert not any("Circuit breaker" in r.text for r in results)
    assert [r.text.strip() for r in results[1::2]] == [f"version {v}" for v in range(1, 10)]
    assert app.read_text() == "version 10\n"
    assert incidents(harness) == []


def test_with_result_progress_a_moving_poll_runs_on_and_a_frozen_one_is_refused(
    harness: Harness,
) -> None:
    # The adapter reports each allowed call's result from the harness's after-tool event,
    # by default (CONFIG only turns the stop off).
    config = harness.home / "breaker.json"
    config.write_text(json.dumps(CONFIG))
    harness.install("--config", str(config))
    moving, frozen = harness.work / "moving.count", harness.work / "frozen.count"
    # Each call its own id, as a real model's.
    turns = [bash(poll(c, c is moving)) for c in [moving] * COPIES + [frozen] * COPIES]
    with harness.model([*turns, "Polled."]) as model:
        result = harness.run(model, "Poll the two jobs.")
    assert result.returncode == 0, result.stderr[-3000:]
    assert model.errors == []
    texts = [r.text for r in model.tool_results()]
    assert [t.strip() for t in texts[:COPIES]] == [f"step {n}" for n in range(COPIES)]
    assert runs(moving) == COPIES
    assert [t == DENIED for t in texts[COPIES:]] == refused()
    assert [t.strip() for t in texts[COPIES:]][:5] == ["step"] * 5
    assert runs(frozen) == 5
    (incident,) = incidents(harness)
    assert (incident["kind"], incident["count"]) == ("duplicate", 6)
    assert "step" not in harness.incidents.read_text()  # no result content on disk


class Killer:
    """Before each model reply, SIGKILLs the next guard in line once it has started: the
    plugin learns of a death at its next call, and restarts the guard at the call after
    that one at the latest, so which call meets which guard is left to the harness."""

    def __init__(self, harness: Harness, starts: list[int]) -> None:
        self.harness = harness
        self.pending = starts

    def before(self, call: dict[str, Any]) -> Any:
        def turn(body: dict[str, Any]) -> dict[str, Any]:
            pid = self.harness.guard_pid(self.pending[0]) if self.pending else None
            if pid is not None:
                kill_and_wait(pid)
                self.pending.pop(0)
            return call

        return turn


def test_guard_killed_mid_run_calls_are_allowed_with_a_warning(harness: Harness) -> None:
    harness.install()
    side = harness.work / "side.txt"
    killer = Killer(harness, [1, 2])  # the first guard, then the one restart
    calls = [bash(f"echo step{i} >> {side}") for i in range(1, 9)]
    with harness.model([calls[0], *map(killer.before, calls[1:]), "Finished."]) as model:
        result = harness.run(model, "Run the eight steps.")
    assert result.returncode == 0, result.stderr[-3000:]
    assert killer.pending == []  # both guards were killed mid-run
    assert lines(side) == [f"step{i}" for i in range(1, 9)]  # and every call ran
    assert not any("Circuit breaker" in r.text for r in model.tool_results())
    # Restarted once, not twice.
    assert [(s["start"], s["ok"]) for s in harness.starts(result)] == [(1, True), (2, True)]
    warnings = harness.warnings(result)
    for warning in (
        "guard process exited (SIGKILL); the call is allowed, it will be restarted once",
        "restarting the guard process (the one restart)",
        "guard process exited (SIGKILL); the call is allowed, all further tool calls are "
        "allowed unchecked",
    ):
        assert f"dsh-circuit-breaker: {warning}" in warnings


def test_install_doctor_uninstall(harness: Harness) -> None:
    loader = harness.loader
    done = harness.install()
    assert done.stdout.splitlines()[0] == f"installed: {loader}"
    text = loader.read_text()
    assert text.startswith(
        f"// dsh-circuit-breaker: managed by `dsh-circuit-breaker install {harness.name}`"
    )
    assert json.dumps(harness.adapter_file.as_uri()) in text
    assert f'"python": {json.dumps(str(harness.product.python))}' in text
    assert harness.install().stdout.splitlines()[0] == f"already installed: {loader}"
    assert sorted(p.name for p in loader.parent.iterdir()) == [loader.name]

    doctor = harness.product.run("doctor", harness.name, env=harness.env)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert f"ok       plugin loaded in {harness.label}; guard answered" in doctor.stdout
    assert doctor.stdout.splitlines()[-1] == "all good"

    # The guard reads the config file at every start, as the command hooks do: an edit
    # needs no reinstall.
    config = harness.home / "config" / "dsh-circuit-breaker" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"duplicateLimit": 4}))
    doctor = harness.product.run("doctor", harness.name, env=harness.env)
    assert doctor.returncode == 0, doctor.stdout
    assert f"ok       config valid ({config})" in doctor.stdout
    assert '"duplicateLimit": 4' in doctor.stdout  # the guard's effective config
    # A bad key: doctor names it (and install refuses to record such a file).
    config.write_text(json.dumps({"duplicateLimt": 3}))
    bad = harness.product.run("doctor", harness.name, env=harness.env)
    assert bad.returncode == 1
    assert f"PROBLEM  config: {config}: unknown config key 'duplicateLimt'" in bad.stdout
    assert harness.product.run("install", harness.name, env=harness.env).returncode == 2
    config.unlink()

    # Other options: install records them, after a backup of the old loader.
    again = harness.install("--state", "memory://")
    assert again.stdout.startswith(f"installed: {loader} (backup: {loader}.bak-")
    assert '"state": "memory://"' in loader.read_text()
    (backup,) = [p for p in loader.parent.iterdir() if p != loader]
    assert backup.read_text() == text

    gone = harness.product.run("uninstall", harness.name, env=harness.env)
    assert gone.returncode == 0
    # One backup a day per file (issue 21): the one install made today still holds it.
    assert gone.stdout.startswith(f"removed {loader}")
    assert not loader.exists() and backup.exists()
    missing = harness.product.run("doctor", harness.name, env=harness.env)
    assert missing.returncode == 1
    assert f"PROBLEM  not installed: no {loader}" in missing.stdout


def test_install_leaves_a_plugin_it_did_not_write(harness: Harness) -> None:
    harness.loader.parent.mkdir(parents=True)
    harness.loader.write_text("export default function () {}\n")
    done = harness.product.run("install", harness.name, env=harness.env)
    assert done.returncode == 1
    assert f"{harness.loader} exists and was not written by us; not touching it" in done.stderr
    gone = harness.product.run("uninstall", harness.name, env=harness.env)
    assert gone.returncode == 1
    assert harness.loader.read_text() == "export default function () {}\n"


@pytest.mark.parametrize("reset", [True, False])
def test_a_new_user_prompt_resets_the_session(harness: Harness, reset: bool) -> None:
    # The state outlives each process (SQLite), so what the second prompt finds is what
    # the first one left, unless the prompt reset it.
    config = harness.home / "breaker.json"
    config.write_text(json.dumps({"resetOnUserPrompt": reset}))
    harness.install("--config", str(config), "--state", f"sqlite:///{harness.home / 'cb.db'}")
    side = harness.work / "side.txt"
    with harness.model([*probe(side)[:5], "Five."]) as model:  # as many as may run
        first = harness.run(model, "Run the probe five times.", session="new")
    assert first.returncode == 0, first.stderr[-3000:]
    with harness.model([*probe(side)[:2], "Two more."]) as model:
        second = harness.run(model, "Run it twice more.", session="continue")
    assert second.returncode == 0, second.stderr[-3000:]
    assert harness.session_id(second) == harness.session_id(first)
    # The second run's model requests carry the first run's results too: read this run's.
    results = [model.result_in_next_request(call["id"]).text for call in model.tool_uses()]
    refused = [text == DENIED for text in results]
    assert refused == ([False, False] if reset else [True, True])
    assert len(lines(side)) == (7 if reset else 5)
