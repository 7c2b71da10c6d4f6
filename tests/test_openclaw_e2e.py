"""End to end, OpenClaw: the real `openclaw` (pinned with the Node 24 it needs in
tests/e2e/openclaw), run headless (`openclaw agent --local`) in a scratch HOME with the plugin
that the installed wheel's `install openclaw` wrote, against the scripted Chat Completions
model on 127.0.0.1. A turn of OpenClaw takes 15 s or more, so each run plays several
scenarios, and the state (the command hooks' SQLite store) carries from run to run.

Nothing reaches the network: HTTP(S)_PROXY points at a closed port on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.core.config import Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from support.fake_openai import FakeOpenAI, function_call
from support.installed import Installed
from support.plugin_harnesses import closed_port
from support.polls import poll, runs

pytestmark = pytest.mark.timeout(900)

BIN = Path(__file__).parent / "e2e" / "openclaw" / "node_modules" / ".bin"
LIMIT = Config().duplicate_limit  # the default: its LIMIT-th identical call is refused
DENIED = render(DEFAULT_MESSAGES["duplicate"], "exec", "duplicate", LIMIT, LIMIT)
STOPPED = render(DEFAULT_MESSAGES["stop"], "exec", "duplicate", 3, 3)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    model: FakeOpenAI

    def results(self) -> list[str]:
        """The result of each call, as the model was sent it (the last request's)."""
        return [r.text for r in self.model.tool_results()]


class OpenClaw:
    def __init__(self, product: Installed) -> None:
        from conftest import require

        require((BIN / "openclaw").exists(), "OpenClaw (tests/e2e/openclaw: npm ci)")
        self.product = product
        self.home = product.home
        self.config = self.home / ".openclaw" / "openclaw.json"
        self.incidents = self.home / "state" / "dsh-circuit-breaker" / "incidents.jsonl"
        self.breaker_config = self.home / "config" / "dsh-circuit-breaker" / "config.json"
        dead = f"http://127.0.0.1:{closed_port()}"
        # OpenClaw's own variables would point it (and install) outside the scratch HOME.
        self.env = {k: v for k, v in product.env.items() if not k.startswith("OPENCLAW_")}
        self.env["PATH"] = f"{BIN}:{self.env['PATH']}"
        self.env.update(
            HTTP_PROXY=dead,
            HTTPS_PROXY=dead,
            http_proxy=dead,
            https_proxy=dead,
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
            DSH_CIRCUIT_BREAKER_READY_FILE=str(self.home / "ready.jsonl"),
        )

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.product.run(*args, env=self.env)

    def breaker(self, config: dict[str, Any]) -> None:
        """The config file the guard reads at each start (no reinstall)."""
        self.breaker_config.parent.mkdir(parents=True, exist_ok=True)
        self.breaker_config.write_text(json.dumps(config))

    def point_at(self, model: FakeOpenAI) -> None:
        """OpenClaw's config: the scripted model its one provider and the default, its log
        in the scratch HOME."""
        data = json.loads(self.config.read_text())
        provider = {
            "api": "openai-completions",
            "baseUrl": model.url,
            "apiKey": "sk-fake-key-for-tests",
            "models": [{"id": "fake-model", "name": "Fake"}],
        }
        data["models"] = {"mode": "replace", "providers": {"fake": provider}}
        data["agents"] = {"defaults": {"model": {"primary": "fake/fake-model"}}}
        data["logging"] = {"file": str(self.home / "openclaw.log")}  # not /tmp/openclaw/
        self.config.write_text(json.dumps(data, indent=2))

    def run(self, turns: list[Any], session: str, prompt: str = "Go.") -> Run:
        model = FakeOpenAI(turns)
        with model:
            self.point_at(model)
            argv = [str(BIN / "openclaw"), "agent", "--local", "--session-id", session]
            proc = subprocess.Popen(
                [*argv, "-m", prompt, "--json"],
                cwd=self.home,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            try:
                out, err = proc.communicate(timeout=600)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=30)
                raise AssertionError("openclaw did not finish in 600 s") from None
        return Run(proc.returncode, out, err, model)

    def incident_lines(self) -> list[dict[str, Any]]:
        text = self.incidents.read_text() if self.incidents.exists() else ""
        return [json.loads(line) for line in text.splitlines()]


def exec_call(command: str, title: str = "Run it") -> dict[str, Any]:
    return function_call("exec", {"command": command, "title": title})


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def openclaw(installed: Installed) -> OpenClaw:
    return OpenClaw(installed)


def test_loop_refused_then_aborted_other_session_apart_and_a_new_prompt_afresh(
    openclaw: OpenClaw,
) -> None:
    done = openclaw.cli("install", "openclaw")
    assert done.returncode == 0, done.stderr
    side = openclaw.home / "side.txt"

    # 1. The same call as long as the model is asked (its `title` rewritten on each):
    # LIMIT - 1 run, the next two are refused, the third refusal in a row aborts the run.
    first = str(uuid.uuid4())
    loop = [exec_call(f"echo cbprobe4 >> {side}", f"Probe step {i}") for i in range(30)]
    stopped = openclaw.run(loop, first)
    assert stopped.returncode == 1, stopped.stderr[-3000:]
    assert json.loads(stopped.stdout)["error"]["message"] == "agent run aborted"
    assert lines(side) == ["cbprobe4"] * (LIMIT - 1)
    assert stopped.results() == ["(no output)"] * (LIMIT - 1) + [DENIED] * 2
    assert len(stopped.model.requests) == LIMIT + 2  # none after the stopping refusal
    assert STOPPED in stopped.stderr
    duplicate, stop = openclaw.incident_lines()
    assert (duplicate["kind"], stop["kind"]) == ("duplicate", "stop")
    assert duplicate["agent"] == stop["agent"] == first
    assert "cbprobe4" not in openclaw.incidents.read_text()  # no argument content on disk

    # 2. Another session, stopAfterDenials 0 and a budget: a healthy edit-and-test cycle, a
    # moving poll past the limit (results count), the budget, then the probe again, keyed
    # apart from the first session's (the same store holds both).
    openclaw.breaker({"stopAfterDenials": 0, "toolLimits": {"read": 2}})
    second = str(uuid.uuid4())
    app, moving = openclaw.home / "app.txt", openclaw.home / "moving.count"
    cycle: list[Any] = [function_call("write", {"path": str(app), "content": "version 1\n"})]
    for v in range(1, LIMIT + 2):
        cycle.append(exec_call(f"cat {app}", "Run the tests"))
        edits = [{"oldText": f"version {v}", "newText": f"version {v + 1}"}]
        cycle.append(function_call("edit", {"path": str(app), "edits": edits}))
    polls = [exec_call(poll(moving, True)) for _ in range(LIMIT + 2)]
    reads = [function_call("read", {"path": str(app)}) for _ in range(3)]
    probe = [exec_call(f"echo cbprobe4 >> {side}", f"Step {i}") for i in range(LIMIT + 1)]
    healthy = openclaw.run([*cycle, *polls, *reads, *probe, "Done."], second)
    assert healthy.returncode == 0, healthy.stderr[-3000:]
    results = healthy.results()
    tests = results[1 : len(cycle) : 2]
    assert [t.strip() for t in tests] == [f"version {v}" for v in range(1, LIMIT + 2)]
    assert app.read_text() == f"version {LIMIT + 2}\n"
    assert runs(moving) == LIMIT + 2
    after = results[len(cycle) + len(polls) :]
    budget = render(DEFAULT_MESSAGES["budget"], "read", "budget", 2, 2)
    assert after[2] == budget and budget not in after[:2]
    assert after[3:] == ["(no output)"] * (LIMIT - 1) + [DENIED] * 2
    assert lines(side) == ["cbprobe4"] * (2 * LIMIT - 2)
    kinds = [(i["kind"], i["agent"]) for i in openclaw.incident_lines()[2:]]
    assert kinds == [("budget", second), ("duplicate", second)]  # no stop: it is off

    # 3. A new prompt in that session starts it afresh: the probe runs again.
    again = openclaw.run([*probe[:2], "Two more."], second, "Run it twice more.")
    assert again.returncode == 0, again.stderr[-3000:]
    assert lines(side) == ["cbprobe4"] * (2 * LIMIT)


def test_install_doctor_a_bad_config_fails_the_start_uninstall(openclaw: OpenClaw) -> None:
    assert openclaw.cli("install", "openclaw").returncode == 0
    doctor = openclaw.cli("doctor", "openclaw")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "ok       plugin loaded in OpenClaw; guard answered" in doctor.stdout
    assert doctor.stdout.splitlines()[-1] == "all good"

    # A key the breaker does not know: OpenClaw does not start, and says which.
    openclaw.breaker({"duplicateLimt": 3})
    failed = openclaw.run(["Never asked."], str(uuid.uuid4()))
    assert failed.returncode == 1
    assert failed.model.requests == []
    assert "plugin load failed: dsh-circuit-breaker" in failed.stderr
    assert "unknown config key 'duplicateLimt'" in failed.stderr
    bad = openclaw.cli("doctor", "openclaw")
    assert bad.returncode == 1 and "unknown config key 'duplicateLimt'" in bad.stdout
    openclaw.breaker_config.unlink()

    assert openclaw.cli("uninstall", "openclaw").returncode == 0
    plugins = json.loads(openclaw.config.read_text())["plugins"]
    assert plugins == {"load": {"paths": []}, "entries": {}}
    missing = openclaw.cli("doctor", "openclaw")
    assert missing.returncode == 1 and "not installed" in missing.stdout
