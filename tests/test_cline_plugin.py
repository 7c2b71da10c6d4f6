"""`install cline` / `doctor cline` / `uninstall cline` against the real Cline CLI in a
scratch HOME, and the plugin (js/cline.mjs over the shared guard client) driven directly
by node with Cline's hook contexts and the real guard process.

(The harness contract test covers the command-hook harnesses; Cline is a plugin harness.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.harnesses import cline
from dsh_circuit_breaker.harnesses._plugin import LOADER, parse_loader
from hook_support import hook_env

E2E_BIN = Path(__file__).parent / "e2e" / "node_modules" / ".bin"
CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, cwd=env["HOME"], capture_output=True, text=True, timeout=180
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home with spaces ✓"
    home.mkdir()
    found = {k: v for k, v in hook_env(home).items() if not k.startswith("CLINE_")}
    found["PATH"] = f"{E2E_BIN}{os.pathsep}{os.environ['PATH']}"
    return found


def loader_of(env: dict[str, str]) -> Path:
    return Path(env["HOME"]) / ".cline" / "plugins" / LOADER


@pytest.mark.timeout(300)  # doctor gives Cline a minute to load the plugin
def test_install_doctor_uninstall_with_the_real_cline(env: dict[str, str]) -> None:
    require((E2E_BIN / "cline").exists(), "the Cline CLI (tests/e2e: npm ci)")
    installed = run_cli(env, "install", "cline")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    path = loader_of(env)
    options = parse_loader(path.read_text(encoding="utf-8"))
    assert options == {
        "harness": "cline",
        "python": os.path.abspath(sys.executable),
        "configFile": None,
        "state": None,
    }
    assert cline.HARNESS.adapter.as_uri() in path.read_text(encoding="utf-8")
    assert "already installed" in run_cli(env, "install", "cline").stdout

    doctor = run_cli(env, "doctor", "cline")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert f"ok       plugin file: {path}\n" in doctor.stdout
    assert "ok       plugin loaded in Cline; guard answered" in doctor.stdout
    assert "PROBLEM" not in doctor.stdout
    # Doctor's Cline session, its plugin host and its guard have all ended.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=30)
    assert not [line for line in ps.stdout.splitlines() if "dsh-cb-cline-doctor-" in line]

    removed = run_cli(env, "uninstall", "cline")
    assert removed.returncode == 0 and f"removed {path} (backup: " in removed.stdout
    assert not path.exists()
    after = run_cli(env, "doctor", "cline")
    assert after.returncode == 1 and f"PROBLEM  not installed: no {path}" in after.stdout


@pytest.mark.timeout(300)
def test_doctor_sees_a_guard_that_cannot_start(env: dict[str, str], tmp_path: Path) -> None:
    require((E2E_BIN / "cline").exists(), "the Cline CLI (tests/e2e: npm ci)")
    # An interpreter that runs but is not Python with this package: only Cline's start of
    # the plugin can tell (doctor's checks before it pass).
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'not the guard' >&2\nexit 3\n")
    python.chmod(0o755)
    assert run_cli(env, "install", "cline", "--python", str(python)).returncode == 0
    doctor = run_cli(env, "doctor", "cline")
    assert doctor.returncode == 1
    assert "PROBLEM  the plugin loaded but its guard did not start:" in doctor.stdout
    assert "guard process exited (code 3)" in doctor.stdout


def test_reinstall_backs_up_and_foreign_files_are_never_touched(
    env: dict[str, str], tmp_path: Path
) -> None:
    assert run_cli(env, "install", "cline").returncode == 0
    path = loader_of(env)
    config = tmp_path / "c.toml"
    config.write_text("duplicateLimit = 5\n")
    again = run_cli(env, "install", "cline", "--config", str(config), "--state", "memory://")
    assert "backup:" in again.stdout
    assert parse_loader(path.read_text(encoding="utf-8"))["configFile"] == str(config)
    (backup,) = path.parent.glob(f"{LOADER}.bak-*")
    assert not backup.name.endswith((".js", ".ts"))  # Cline loads only those
    project = tmp_path / "project"
    project.mkdir()  # a project that exists (install refuses a --project that does not)
    both = run_cli(env, "install", "cline", "--scope", "project", "--project", str(project))
    assert "Cline would check every call twice" in both.stdout
    doctor = run_cli(env, "doctor", "cline", "--project", str(project))
    assert "installed in 2 plugins directories" in doctor.stdout and doctor.returncode == 1

    foreign = project / ".cline" / "plugins" / LOADER
    foreign.write_text("export default {name: 'mine', manifest: {capabilities: []}};\n")
    for action in ("install", "uninstall"):
        refused = run_cli(env, action, "cline", "--scope", "project", "--project", str(project))
        assert refused.returncode == 1
        assert (
            refused.stderr
            == f"dsh-circuit-breaker: {foreign} exists and was not written by us; not touching it\n"
        )
    assert foreign.read_text().startswith("export default {name: 'mine'")


# -- the plugin itself, driven by node with Cline's hook contexts ----------------------
DRIVER = """
import { circuitBreaker } from %(adapter)s;
const steps = JSON.parse(process.argv[1]);
// The guard's pipes do not hold the event loop open (in Cline, its IPC channel does).
const alive = setInterval(() => {}, 1000);
const logs = [];
const plugin = circuitBreaker(%(options)s);
const ctx = { logger: { log: (message, meta) => logs.push([meta?.severity, message]) } };
const out = [];
try {
  await plugin.setup({}, ctx);
  out.push({ setup: 'ok' });
} catch (error) {
  out.push({ setup: String(error.message) });
}
for (const [hook, snapshot, input, tool = 'run_commands'] of steps) {
  const toolCall = { toolName: tool, toolCallId: 'c', input };
  out.push(await plugin.hooks[hook]({ snapshot, toolCall, input }) ?? null);
}
console.log(JSON.stringify({ out, logs }));
clearInterval(alive);
process.exit(0);
"""


def drive(tmp_path: Path, steps: list[Any], **options: Any) -> dict[str, Any]:
    node = shutil.which("node")
    require(node is not None, "node")
    assert node is not None
    options.setdefault("python", sys.executable)
    script = DRIVER % {
        "adapter": json.dumps(cline.HARNESS.adapter.as_uri()),
        "options": json.dumps(options),
    }
    done = subprocess.run(
        [node, "--input-type=module", "-e", script, json.dumps(steps)],
        env=hook_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


ROOT = {"agentId": "agent_1", "conversationId": "conv_1"}
CHILD = {"agentId": "agent_2", "parentAgentId": "agent_1", "conversationId": "conv_2"}


def call(snapshot: dict[str, str], command: str = "echo again") -> list[Any]:
    return ["beforeTool", snapshot, {"commands": [command]}]


def skipped(result: Any) -> bool:
    return isinstance(result, dict) and result.get("skip") is True


def test_a_new_run_of_the_main_agent_starts_it_afresh(tmp_path: Path) -> None:
    config = tmp_path / "breaker.json"
    config.write_text('{"duplicateLimit": 3}')
    steps = [
        ["beforeRun", ROOT],
        *[call(ROOT)] * 3,  # two run, the third is skipped
        *[call(CHILD)] * 3,  # the subagent is an agent of its own
        ["beforeRun", CHILD],  # a subagent's run is its parent's doing: no reset
        call(CHILD),
        ["beforeRun", ROOT],  # the person's next prompt
        call(ROOT),
    ]
    out = drive(tmp_path, steps, configFile=str(config))["out"]
    assert out[0] == {"setup": "ok"}
    decisions = [skipped(o) for o in out[1:]]
    assert decisions == [False, False, False, True, False, False, True, False, True, False, False]
    assert out[4]["reason"].startswith("Circuit breaker: NOT run, a repeat (copies: 3, limit: 3)")
    incidents = tmp_path / "state" / "dsh-circuit-breaker" / "incidents.jsonl"
    agents = [json.loads(line)["agent"] for line in incidents.read_text().splitlines()]
    assert agents == ["agent_1", "agent_1/agent_2"]


def test_a_bad_config_fails_the_setup_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "breaker.json"
    config.write_text('{"duplicateLimit": "six"}')
    result = drive(tmp_path, [call(ROOT)], configFile=str(config))
    assert "duplicateLimit" in result["out"][0]["setup"]
    assert result["out"][1:] == [None]  # the call is allowed


def test_a_missing_interpreter_allows_every_call_with_a_warning(tmp_path: Path) -> None:
    result = drive(tmp_path, [call(ROOT)] * 8, python=str(tmp_path / "no-python"))
    assert result["out"] == [{"setup": "ok"}, *[None] * 8]
    assert any(level == "warn" and "no-python" in text for level, text in result["logs"])


def test_the_third_refusal_in_a_row_also_stops_the_run(tmp_path: Path) -> None:
    config = tmp_path / "breaker.json"
    config.write_text('{"duplicateLimit": 2}')
    out = drive(tmp_path, [call(ROOT)] * 5 + [call(ROOT, "echo new")], configFile=str(config))
    out = out["out"][1:]
    assert out[0] is None
    refused = "Circuit breaker: NOT run, a repeat (copies: 2, limit: 2): this run_commands"
    assert [o["reason"].startswith(refused) for o in out[1:3]] == [True, True]
    assert [sorted(o) for o in out[1:3]] == [["reason", "skip"]] * 2
    # From the third refusal in a row on, Cline's `stop` ends the run and its `reason` (the
    # run's error) is the stop text; `skip` still refuses the call.
    for stopped in out[3:5]:
        assert stopped["skip"] is True and stopped["stop"] is True
        assert stopped["reason"].startswith("Circuit breaker: this agent is being stopped")
    assert out[5] is None  # an allowed call ends the streak


def test_stop_after_denials_zero_only_skips(tmp_path: Path) -> None:
    config = tmp_path / "breaker.json"
    config.write_text('{"duplicateLimit": 2, "stopAfterDenials": 0}')
    out = drive(tmp_path, [call(ROOT)] * 5, configFile=str(config))["out"][1:]
    assert [o is None or sorted(o) for o in out] == [True, *[["reason", "skip"]] * 4]
