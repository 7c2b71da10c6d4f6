"""js/guard.mjs against a slow store (issue 23, row 6): the real guard process on a
SQLite file whose write lock another process holds for 1.5 s, twice, while the client
makes 30 identical calls. The client's budget follows the guard's storeTimeout (2 s)
plus a margin, so both waits are waited out: exactly 6 run, and no guard is killed."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import require

pytestmark = pytest.mark.timeout(120)
GUARD = Path(__file__).parents[1] / "src" / "dsh_circuit_breaker" / "js" / "guard.mjs"
SCRIPT = """
import { startGuard } from %s;
const warnings = [];
const logger = { warn: (format, ...args) => warnings.push([format, ...args].join(' ')) };
const [python, state] = process.argv.slice(1);
const { guard } = await startGuard({ config: { python, state, duplicateLimit: 7 }, logger });
console.log('ready');
let allowed = 0;
for (let i = 0; i < 30; i++) {
  if ((await guard.check({ agent: 'a' }, 'bash', { command: 'same' })) === undefined) allowed++;
  await new Promise((resolve) => setTimeout(resolve, 100));
}
console.log(JSON.stringify({ allowed, starts: guard.starts, warnings }));
guard.stop();
"""


def hold_lock(path: Path, seconds: float) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    time.sleep(seconds)
    db.execute("COMMIT")
    db.close()


def test_lock_waits_under_store_timeout_are_waited_for(tmp_path: Path) -> None:
    node = shutil.which("node")
    require(node is not None, "node")
    assert node is not None
    path = tmp_path / "state.db"
    script = SCRIPT % json.dumps(GUARD.as_uri())
    env = dict(os.environ, HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # this checkout's package
    client = subprocess.Popen(
        [node, "--input-type=module", "-e", script, sys.executable, f"sqlite:///{path}"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert client.stdout is not None
    assert client.stdout.readline() == "ready\n"

    def holder() -> None:
        for _ in range(2):
            time.sleep(0.3)
            hold_lock(path, 1.5)

    thread = threading.Thread(target=holder)
    thread.start()
    out, _ = client.communicate(timeout=100)
    thread.join(10)
    result = json.loads(out)
    assert result["allowed"] == 6, result
    assert result["starts"] == 1, result  # the guard was never taken for dead
