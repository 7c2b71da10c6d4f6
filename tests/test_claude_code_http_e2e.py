"""The real Claude Code CLI (2.1.332) with the installed wheel's `install claude-code
--http` (tests/support/installed.py): its HTTP hooks post to the resident guard (the
wheel's `serve --http`), against the scripted model on 127.0.0.1.

No hook process is started per call, and that is checked, not assumed: every Python
process started under the CLI logs its command line through a `sitecustomize` on its
PYTHONPATH (the CLI passes its environment to hook commands), and the only one is the
SessionStart start command, once per session; the guard's own metrics count every call.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any, ClassVar

import pytest

from conftest import require
from support.command_hook_harnesses import E2E_BIN, ClaudeCode, Outcome, json_objects
from support.fake_anthropic import FakeAnthropic, tool_use
from support.guard_service import Service, metric_samples, state_dir
from support.installed import Installed

DENIAL_START = "Circuit breaker: NOT run, a repeat (copies: 6, limit: 6): this Bash call"
pytestmark = pytest.mark.timeout(300)  # one CLI run per test (240 s at most)
MARKER = """import os, sys
with open(os.environ["PYTHON_START_LOG"], "a") as log:
    log.write(repr(sys.argv) + "\\n")
"""


class Session(ClaudeCode):
    """Claude Code as the suite runs it (support/command_hook_harnesses.py), installed with
    `install claude-code --http` for the guard at `address`; a marker logs every Python
    start under the CLI."""

    def __init__(self, installed: Installed, address: str) -> None:
        self.address = address
        require(E2E_BIN.joinpath(self.executable).exists(), "the Claude Code CLI (tests/e2e)")
        super().__init__(installed, installed.home)

    def setup(self) -> None:
        self.settings = self.home / "claude-settings.json"
        done = self.install("--http", self.address, "--settings", str(self.settings))
        assert "installed in" in done.stdout, done.stdout
        # What Claude Code starts once per session is the installed interpreter.
        (start,) = json.loads(self.settings.read_text())["hooks"]["SessionStart"]
        assert start["hooks"][0]["command"].startswith(str(self.installed.python) + " "), start
        marker = self.home / "marker"
        marker.mkdir()
        (marker / "sitecustomize.py").write_text(MARKER)
        self.starts = self.home / "python-starts.log"

    def run_env(self, model: Any) -> dict[str, str]:
        marked = {"PYTHONPATH": str(self.home / "marker"), "PYTHON_START_LOG": str(self.starts)}
        return dict(super().run_env(model), **marked)

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        # The run's result, whatever it was (a refused prompt is one).
        events = json_objects(done.stdout)
        return Outcome(done.stdout, done.stderr, events[-1], events, events[-1].get("session_id"))

    def python_starts(self) -> list[list[str]]:
        text = self.starts.read_text() if self.starts.exists() else ""
        return [eval(line) for line in text.splitlines()]  # our own repr() lines


def assert_probe(model: FakeAnthropic, side: Path, outcome: Outcome) -> None:
    """Five ran, the 6th and 7th were refused with the text in the very next model request,
    and the 8th (the third refusal in a row) was refused and ended the session: no model
    request after it."""
    assert side.read_text().splitlines() == ["cbprobe4"] * 5  # five really ran
    uses = model.tool_uses()
    assert len(uses) == 8 and len(model.model_requests) == 8
    results = model.tool_results()
    assert [r.is_error for r in results] == [False] * 5 + [True] * 2
    for use in uses[5:7]:
        denied = model.result_in_next_request(use["id"])
        assert denied.is_error and DENIAL_START in denied.text
    result = outcome.result
    assert (result["is_error"], result["terminal_reason"]) == (False, "hook_stopped")
    assert {d["tool_use_id"] for d in result["permission_denials"]} == {u["id"] for u in uses[5:]}


def assert_no_hook_process(session: Session, address: str) -> None:
    """Python started under the CLI only for `serve --http ADDRESS --ensure`, and for the
    guard that command started (if it did): never a hook."""
    starts = session.python_starts()
    assert [a for a in starts if a[-1] == "--ensure"], "the marker must see the start command"
    for argv in starts:
        assert "hook" not in argv, argv
        assert argv[1:4] == ["serve", "--http", address], argv


def decisions(service: Service) -> dict[str, float]:
    return {
        dict(labels)["kind"]: value
        for (name, labels), value in metric_samples(service.metrics()).items()
        if name == "dsh_circuit_breaker_decisions_total"
    }


def test_probe_over_http_with_no_hook_process(installed: Installed) -> None:
    with Service(
        installed.env, token=None, cli=[str(installed.cli)]
    ) as service:  # its token file, as installed
        address = f"127.0.0.1:{service.port}"
        session = Session(installed, address)
        side = session.work / "side.txt"
        with FakeAnthropic([*session.probe(side), "All ten probe steps attempted."]) as model:
            outcome = session.run(model, "Run the cbprobe4 probe ten times.")
        assert_probe(model, side, outcome)
        assert_no_hook_process(session, address)
        assert len(session.python_starts()) == 1  # one per session, none per call
        assert decisions(service) == {"allow": 5, "duplicate": 3}
        samples = metric_samples(service.metrics())
        assert samples[("dsh_circuit_breaker_prompts_total", (("harness", "claude-code"),))] == 1
        # The 8th call only: the session ended with it.
        assert samples[("dsh_circuit_breaker_stops_total", (("harness", "claude-code"),))] == 1
        (agent,) = service.json("/api/agents")["agents"]
        assert agent["agent"] == outcome.session
        assert (agent["harness"], agent["calls"], agent["denials"]) == ("claude-code", 5, 3)


def test_probe_over_http_with_stop_off_refuses_five(installed: Installed) -> None:
    # issue 15's probe with stopping off, at the seed's count: 5 run, 5 refused.
    config = installed.home / "breaker.json"
    config.write_text(json.dumps({"stopAfterDenials": 0}))
    env = dict(installed.env, DSH_CIRCUIT_BREAKER_CONFIG=str(config))
    with Service(env, token=None, cli=[str(installed.cli)]) as service:
        session = Session(installed, f"127.0.0.1:{service.port}")
        side = session.work / "side.txt"
        with FakeAnthropic([*session.probe(side), "All ten probe steps attempted."]) as model:
            outcome = session.run(model, "Run the cbprobe4 probe ten times.")
        assert side.read_text().splitlines() == ["cbprobe4"] * 5
        uses = model.tool_uses()
        assert len(uses) == 10 and len(model.model_requests) == 11
        for use in uses[5:]:
            denied = model.result_in_next_request(use["id"])
            assert denied.is_error and DENIAL_START in denied.text
        assert outcome.result["result"] == "All ten probe steps attempted."
        assert decisions(service) == {"allow": 5, "duplicate": 5}
        # Every command-hook harness's stops start at 0 (a series first seen at 1 would show no
        # increase to Prometheus), and stay there.
        stops = ("dsh_circuit_breaker_stops_total", (("harness", "claude-code"),))
        assert metric_samples(service.metrics())[stops] == 0


def test_session_start_starts_the_guard(installed: Installed) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{free.getsockname()[1]}"
    session = Session(installed, address)
    side = session.work / "side.txt"
    token = (state_dir(installed.home) / "http-token").read_text().strip()  # install created it
    from dsh_circuit_breaker.guard.ensure import health

    assert health(f"http://{address}", token) is None  # nothing answers before the session
    try:
        with FakeAnthropic([*session.probe(side), "Done."]) as model:
            outcome = session.run(model, "Run the cbprobe4 probe ten times.")
        assert_probe(model, side, outcome)
        assert_no_hook_process(session, address)
    finally:
        answer = health(f"http://{address}", token)
        if isinstance(answer, dict):
            os.kill(answer["pid"], 15)
    assert isinstance(answer, dict), "the SessionStart hook started the guard"
    log = (state_dir(installed.home) / "http-guard.log").read_text()
    assert f"guarding on http://{address}" in log


class NotTheGuard(BaseHTTPRequestHandler):
    """Something else holding the guard's port: 404 to everything."""

    def do_GET(self) -> None:
        self.send_error(404)

    do_POST = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_guard_that_cannot_be_asked_refuses_the_prompt(installed: Installed) -> None:
    squatter = ThreadingHTTPServer(("127.0.0.1", 0), NotTheGuard)
    Thread(target=squatter.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{squatter.server_address[1]}"
    try:
        session = Session(installed, address)
        side = session.work / "side.txt"
        with FakeAnthropic([*session.probe(side), "Done."]) as model:
            outcome = session.run(model, "Run the cbprobe4 probe ten times.")
    finally:
        squatter.shutdown()
        squatter.server_close()
    result = outcome.result
    assert model.model_requests == []  # the prompt never reached the model
    assert not side.exists()  # and nothing ran unguarded
    assert "UserPromptSubmit operation blocked by hook" in result["result"]
    assert 'blocking because onFailure is "block"' in result["result"]
    (argv,) = session.python_starts()  # the start command, which found the port taken
    assert argv[1:] == ["serve", "--http", address, "--ensure"]


class AllowingSquatter(BaseHTTPRequestHandler):
    """Another program on the guard's port that answers every hook 200, empty: allow.
    It records what it is sent."""

    heard: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_GET(self) -> None:
        self._answer(b"")

    def do_POST(self) -> None:
        self._answer(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _answer(self, body: bytes) -> None:
        self.heard.append((self.path, self.headers.get("Authorization") or "", body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_squatter_that_allows_gets_what_claude_code_sends(installed: Installed) -> None:
    """What cannot be protected (docs/http-guard.md, "On a shared machine"): our start
    command refuses the squatter and sends it nothing, but Claude Code's HTTP hooks send it
    the token and every call's arguments, and take its 200 for an allow."""
    AllowingSquatter.heard = []
    squatter = ThreadingHTTPServer(("127.0.0.1", 0), AllowingSquatter)
    Thread(target=squatter.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{squatter.server_address[1]}"
    try:
        session = Session(installed, address)
        side = session.work / "side.txt"
        with FakeAnthropic([*session.probe(side), "Done."]) as model:
            session.run(model, "Run the cbprobe4 probe ten times.")
    finally:
        squatter.shutdown()
        squatter.server_close()
    token = json.loads(session.settings.read_text())["env"]["DSH_CIRCUIT_BREAKER_TOKEN"]
    ours = [h for h in AllowingSquatter.heard if h[0].startswith("/proof")]
    hooks = [h for h in AllowingSquatter.heard if h[0] == "/hook/claude-code"]
    assert ours and all(auth == "" for _, auth, _ in ours)  # --ensure: the challenge only
    # The prompt, and each call's PreToolUse and its PostToolUse (results: the default).
    assert len(hooks) == 21 and all(auth == f"Bearer {token}" for _, auth, _ in hooks)
    assert sum(b"echo cbprobe4 >>" in body for _, _, body in hooks) == 20  # every call's
    assert sum(b'"PostToolUse"' in body for _, _, body in hooks) == 10
    assert sum(b"Run the cbprobe4 probe ten times." in body for _, _, body in hooks) == 1
    assert side.read_text().splitlines() == ["cbprobe4"] * 10  # and all ten ran


def test_a_guard_gone_mid_session_refuses_each_call(installed: Installed) -> None:
    service = Service(installed.env, token=None, cli=[str(installed.cli)])
    try:
        session = Session(installed, f"127.0.0.1:{service.port}")
        side = session.work / "side.txt"

        def stop_the_guard_then_call(body: dict[str, Any]) -> dict[str, Any]:
            service.stop()  # it dies after two calls ran; the session goes on
            return tool_use("Bash", {"command": f"echo after >> {side}"})

        two = [tool_use("Bash", {"command": f"echo {i} >> {side}"}) for i in range(2)]
        with FakeAnthropic([*two, stop_the_guard_then_call, "Done."]) as model:
            session.run(model, "Run three commands.")
    finally:
        service.stop()
    assert side.read_text().splitlines() == ["0", "1"]  # the third never ran
    refused = model.result_in_next_request(model.tool_uses()[2]["id"])
    assert refused.is_error
    assert refused.text == (
        f"PreToolUse:Bash hook error: [{service.origin}/hook/claude-code]: failed; "
        f'blocking because onFailure is "block"\nconnect ECONNREFUSED 127.0.0.1:{service.port}'
    )


def test_results_over_http_refuse_an_interleaved_frozen_poller(installed: Installed) -> None:
    # Results (issue 25, on by default since issue 32): `install --http` posts PostToolUse
    # too, and the guard records each result; with sameResultLimit 6 a frozen poll
    # alternated with a new call is refused at its 7th copy (six results alike before it),
    # which only the results can tell (each new call restarts SPEC's count). Still no hook
    # process per call.
    config = Path(installed.env["XDG_CONFIG_HOME"]) / "dsh-circuit-breaker" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"sameResultLimit": 6}))
    with Service(installed.env, token=None, cli=[str(installed.cli)]) as service:
        address = f"127.0.0.1:{service.port}"
        session = Session(installed, address)
        hooks = json.loads(session.settings.read_text())["hooks"]
        assert {"PostToolUse", "PostToolUseFailure"} <= set(hooks)
        (session.work / "frozen.sh").write_text('echo ran >> frozen-runs\necho "job 7: 50%"\n')
        steps = session.work / "steps"
        script = []
        for i in range(1, 9):
            script.append(session.shell("sh frozen.sh", f"Poll the job, check {i}"))
            script.append(session.shell(f"echo step {i} >> {steps}", f"Do step {i}"))
        with FakeAnthropic([*script, "Stuck."]) as model:
            outcome = session.run(model, "Work through the steps, polling between them.")
        assert (session.work / "frozen-runs").read_text().splitlines() == ["ran"] * 6
        assert steps.read_text().splitlines() == [f"step {i}" for i in range(1, 9)]
        results = [model.result_in_next_request(c["id"]) for c in model.tool_uses()]
        assert [r.is_error for r in results] == [False] * 12 + [True, False] * 2
        for refused in results[12::2]:
            assert DENIAL_START in refused.text
        assert outcome.result["result"] == "Stuck."
        assert decisions(service) == {"allow": 14, "duplicate": 2}
        assert_no_hook_process(session, address)
