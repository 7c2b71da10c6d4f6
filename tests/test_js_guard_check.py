"""js/guard.mjs's `checkAsHook`: the synchronous config check of a plugin that must register
synchronously (OpenClaw). It asks the real guard once, as the harness's command hook would
load its config: the effective keys for a good config (and a ready record for doctor), a
`ConfigFailure` naming the key for a bad one, and no error, only the keys as given, when
the guard cannot start (the asynchronous start reports that)."""

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

pytestmark = pytest.mark.timeout(120)
GUARD = Path(__file__).parents[1] / "src" / "dsh_circuit_breaker" / "js" / "guard.mjs"
SCRIPT = """
import { checkAsHook, ConfigFailure } from %s;
const options = JSON.parse(process.argv[1]);
try {
  const config = checkAsHook({ options, harness: 'openclaw', pluginFile: '/x/openclaw.mjs' });
  console.log(JSON.stringify({ config }));
} catch (error) {
  console.log(JSON.stringify({ failure: error instanceof ConfigFailure, message: error.message }));
}
"""


def check(tmp_path: Path, options: dict[str, Any]) -> dict[str, Any]:
    node = shutil.which("node")
    require(node is not None, "node")
    assert node is not None
    env = dict(os.environ, HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"))
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), PYTHONPATH=os.pathsep.join(sys.path))
    env["DSH_CIRCUIT_BREAKER_READY_FILE"] = str(tmp_path / "ready.jsonl")
    done = subprocess.run(
        [
            node,
            "--input-type=module",
            "-e",
            SCRIPT % json.dumps(GUARD.as_uri()),
            json.dumps(options),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_a_good_config_gives_the_effective_keys_and_a_ready_record(tmp_path: Path) -> None:
    config = tmp_path / "breaker.json"
    config.write_text(json.dumps({"duplicateLimit": 4}))
    options = {"python": sys.executable, "configFile": str(config), "state": "memory://"}
    found = check(tmp_path, options)["config"]
    assert found["duplicateLimit"] == 4
    assert "ask_user" in found["exempt"] and "title" in found["ignoreArgs"]  # OpenClaw's
    (ready,) = [json.loads(line) for line in (tmp_path / "ready.jsonl").read_text().splitlines()]
    assert (ready["start"], ready["ok"], ready["pluginFile"]) == (0, True, "/x/openclaw.mjs")


def test_a_bad_config_is_a_config_failure_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "breaker.json"
    config.write_text(json.dumps({"duplicateLimt": 4}))
    options = {"python": sys.executable, "configFile": str(config), "state": "memory://"}
    found = check(tmp_path, options)
    assert found["failure"] is True
    assert found["message"].startswith("dsh-circuit-breaker: ")
    assert "unknown config key 'duplicateLimt'" in found["message"]


def test_a_guard_that_cannot_start_is_no_config_failure(tmp_path: Path) -> None:
    found = check(tmp_path, {"python": str(tmp_path / "no-such-python"), "state": "memory://"})
    assert found == {"config": {}}
    assert not (tmp_path / "ready.jsonl").exists()
