"""js/guard.mjs reports results (issue 25): `decide` with the harness's call id keeps an
allowed call, `Guard.resultOf` sends its result to the real guard process, which observes it
as the `check` judged it. Nothing is kept or sent when the guard's config turns results
off, and nothing a result does reaches the host as an exception."""

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
# Polls: `stuck` answers `same` every time, each `new` call a new line; `A` a stuck call
# allowed, `X` refused, `.` a new call. Then what went wrong on purpose: a result maker that
# throws, a result JSON cannot carry, a result for no call, calls whose result never comes.
SCRIPT = """
import { decide, startGuard } from %s;
const warnings = [];
const logger = { warn: (format, ...args) => warnings.push([format, ...args].join(' ')) };
const [python, config] = process.argv.slice(1);
const { guard } = await startGuard({ config: { python, ...JSON.parse(config) }, logger });
const sent = [];
const write = guard.child.stdin.write.bind(guard.child.stdin);
guard.child.stdin.write = (line) => {
  if (line.includes('"op":"result"')) sent.push(JSON.parse(line));
  return write(line);
};
let id = 0;
async function call(command, result) {
  const callId = `call-${++id}`;
  const read = () => [{ agent: 'a' }, 'bash', { command }];
  const refusal = await decide(guard, logger, read, callId);
  if (refusal === undefined) guard.resultOf(callId, result);
  return refusal === undefined;
}
let moving = '', interleaved = '';
for (let i = 0; i < 10; i++) moving += (await call('poll', () => `step ${i}`)) ? 'A' : 'X';
for (let i = 0; i < 6; i++) {
  interleaved += (await call('stuck', () => 'same')) ? 'A' : 'X';
  interleaved += (await call(`new ${i}`, () => `out ${i}`)) ? '.' : 'x';
}
guard.resultOf('no-such-call', () => 'late');
await call('bad maker', () => { throw new Error('boom'); });
await call('bad json', () => 10n);
for (let i = 0; i < 300; i++) {
  await decide(guard, logger, () => [{ agent: 'b' }, 'ls', { i }], `lost-${i}`);
}
const kept = guard.running.size;
await guard.request({ op: 'ping' }, 5000);  // every line before it has been read
guard.stop();
const count = sent.length;
console.log(JSON.stringify({ moving, interleaved, sent: sent.slice(0, 2), count, kept, warnings }));
"""


def client(tmp_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    node = shutil.which("node")
    require(node is not None, "node")
    assert node is not None
    env = dict(os.environ, HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # this checkout's package
    script = SCRIPT % json.dumps(GUARD.as_uri())
    done = subprocess.run(
        [node, "--input-type=module", "-e", script, sys.executable, json.dumps(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_results_reach_the_guard_as_the_check_sent_the_call(tmp_path: Path) -> None:
    found = client(tmp_path, {"resultProgress": True, "sameResultLimit": 3})
    assert found["moving"] == "A" * 10  # past duplicateLimit (6): its output moves
    assert found["interleaved"] == "A.A.A.X.X.X."  # the stuck call, refused at sameResultLimit
    first = {"op": "result", "agent": "a", "tool": "bash", "arguments": {"command": "poll"}}
    assert found["sent"] == [{**first, "result": "step 0"}, {**first, "result": "step 1"}]
    assert found["count"] == 10 + 6 + 3  # the moving, the 3 stuck allowed, the new calls
    assert found["kept"] == 256  # results that never came: the oldest forgotten
    assert found["warnings"] == [
        "dsh-circuit-breaker: internal error, result not recorded: %s Error: boom"
    ]


def test_with_results_off_nothing_is_kept_or_sent(tmp_path: Path) -> None:
    found = client(tmp_path, {"resultProgress": False, "sameResultLimit": 0})
    assert found["moving"] == "A" * 5 + "X" * 5  # the 6th copy is refused
    assert found["interleaved"] == "A.A.A.A.A.A."
    assert (found["count"], found["kept"], found["warnings"]) == (0, 0, [])
