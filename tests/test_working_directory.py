"""The user's project is the working directory of every hook and guard a harness starts.

`python -c` and `python -m` put that directory first on sys.path, so a project with its own
`keyword.py` or `operator.py` (modules the standard library imports on our path) would have
them imported in place of the standard ones: the project's code runs on every tool call, and
the hook fails open for good. The installed commands take that entry out before importing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require
from dsh_circuit_breaker.core import invocation
from hook_support import denial, hook_env, pre_tool_use

pytestmark = pytest.mark.timeout(120)
GUARD = Path(__file__).parents[1] / "src" / "dsh_circuit_breaker" / "js" / "guard.mjs"
SHADOWS = ("keyword", "operator", "dsh_circuit_breaker")
# Six calls of one agent through the JS guard client: five allowed, the sixth refused.
SCRIPT = """
import { decide, startGuard } from %s;
const warnings = [];
const logger = { warn: (format, ...args) => warnings.push([format, ...args].join(' ')) };
const { guard } = await startGuard({ config: { python: process.argv[1] }, logger });
let seen = '';
for (let i = 0; i < 6; i++) {
  seen += (await decide(guard, logger, () => [{ agent: 'a' }, 'bash', { command: 'ls' }]))
    === undefined ? 'A' : 'X';
}
guard.stop();
console.log(JSON.stringify({ seen, warnings }));
"""


def project(tmp_path: Path) -> Path:
    """A project whose own modules shadow standard ones and ours, each leaving a mark."""
    root = tmp_path / "project"
    (root / "dsh_circuit_breaker").mkdir(parents=True)
    for name in SHADOWS:
        path = root / name / "__init__.py" if name == "dsh_circuit_breaker" else root / f"{name}.py"
        path.write_text(f"open({str(root / ('ran-' + name))!r}, 'w').close()\n")
    return root


def marks(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("ran-*"))


def test_the_installed_hook_imports_nothing_from_the_project(tmp_path: Path) -> None:
    root = project(tmp_path)
    command = invocation.hook_command(state=f"sqlite:///{tmp_path}/state.db")
    event = json.dumps(pre_tool_use(session="in-a-project"))
    outs = [
        subprocess.run(
            ["bash", "-c", command],
            input=event,
            cwd=root,
            env=hook_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        for _ in range(6)
    ]
    assert marks(root) == []
    assert [o.stderr for o in outs] == [""] * 6
    assert [denial(o.stdout) is None for o in outs] == [True] * 5 + [False]


def test_the_js_guard_starts_its_python_without_the_project(tmp_path: Path) -> None:
    node = shutil.which("node")
    require(node is not None, "node")
    assert node is not None
    root = project(tmp_path)
    script = SCRIPT % json.dumps(GUARD.as_uri())
    env = dict(os.environ, HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # this checkout's package
    done = subprocess.run(
        [node, "--input-type=module", "-e", script, sys.executable],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"seen": "AAAAAX", "warnings": []}
    assert marks(root) == []


def test_the_js_guard_runs_the_hooks_program() -> None:
    found = re.search(r"const PROGRAM = ((?:'[^']*'\s*\+?\s*)+);", GUARD.read_text())
    assert found is not None
    assert "".join(re.findall(r"'([^']*)'", found.group(1))) == invocation.HOOK_PROGRAM


def test_a_command_of_an_older_install_is_still_ours() -> None:
    python = sys.executable
    older = f"{python} -c '{invocation.OLD_HOOK_PROGRAM}' hook --harness codex"
    assert invocation.is_ours(older)
    assert invocation.options_of(f"{older} --state sqlite:///x.db") == (None, "sqlite:///x.db")
