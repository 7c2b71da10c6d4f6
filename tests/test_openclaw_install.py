"""install / uninstall openclaw without OpenClaw: the loader beside openclaw.json, our path
and entry merged into the user's config (every other key kept), idempotence, backups,
configs that would keep the plugin from loading refused before anything is written, and
OpenClaw's own rule for where its config is. OpenClaw itself: tests/test_openclaw_e2e.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_circuit_breaker.harnesses._plugin import parse_loader
from hook_support import hook_env

pytestmark = pytest.mark.timeout(120)
ENTRY = {"enabled": True, "hooks": {"allowConversationAccess": True}}


def cli(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh_circuit_breaker.cli", *args],
        # OpenClaw's own variables, the developer's, would point install outside `home`.
        env={k: v for k, v in hook_env(home, **env).items() if not k.startswith("OPENCLAW_")} | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_install_merges_into_the_users_config_and_uninstall_takes_only_ours(
    tmp_path: Path,
) -> None:
    config = tmp_path / ".openclaw" / "openclaw.json"
    config.parent.mkdir()
    user = {
        "agents": {"defaults": {"model": {"primary": "x/y"}}},
        "plugins": {
            "load": {"paths": ["/opt/theirs.ts"]},
            "entries": {"theirs": {"enabled": True, "config": {"a": 1}}},
            "allow": ["theirs"],
        },
    }
    # JSON with comments and trailing commas, as OpenClaw's JSON5 allows.
    config.write_text("// mine\n" + json.dumps(user, indent=2)[:-2] + ",\n}\n")
    loader = config.parent / "dsh-circuit-breaker.mjs"

    done = cli(tmp_path, "install", "openclaw", "--python", "/opt/venv/bin/python")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(f"enabled in {config} (backup: ")
    assert done.stdout.splitlines()[1] == f"installed: {loader}"
    data = json.loads(config.read_text())
    assert data["agents"] == user["agents"]
    assert data["plugins"] == {
        "load": {"paths": ["/opt/theirs.ts", str(loader)]},
        "entries": {"theirs": {"enabled": True, "config": {"a": 1}}, "dsh-circuit-breaker": ENTRY},
        "allow": ["theirs", "dsh-circuit-breaker"],  # their allowlist would keep ours out
    }
    assert parse_loader(loader.read_text())["python"] == "/opt/venv/bin/python"
    assert loader.stat().st_mode & 0o777 == 0o600  # the config keeps its own mode

    again = cli(tmp_path, "install", "openclaw", "--python", "/opt/venv/bin/python")
    assert again.stdout.splitlines()[:2] == [
        f"already enabled in {config}",
        f"already installed: {loader}",
    ]

    gone = cli(tmp_path, "uninstall", "openclaw")
    assert gone.returncode == 0, gone.stderr
    assert not loader.exists()
    plugins = json.loads(config.read_text())["plugins"]
    assert plugins["load"] == {"paths": ["/opt/theirs.ts"]}
    assert plugins["entries"] == {"theirs": {"enabled": True, "config": {"a": 1}}}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{plugins: {enabled: false}}", "uses JSON5 this installer cannot rewrite"),
        ('{"plugins": {"enabled": false}}', "plugins.enabled is false"),
        ('{"plugins": {"deny": ["dsh-circuit-breaker"]}}', "plugins.deny lists"),
        ('{"plugins": {"load": {"paths": "one"}}}', "plugins.load.paths is not a list"),
        ('{"$include": "./more.json5"}', "uses $include"),
        ("[1]", "does not hold an object"),
    ],
)
def test_a_config_that_would_keep_the_plugin_out_is_refused_untouched(
    tmp_path: Path, text: str, why: str
) -> None:
    config = tmp_path / ".openclaw" / "openclaw.json"
    config.parent.mkdir()
    config.write_text(text)
    done = cli(tmp_path, "install", "openclaw")
    assert done.returncode == 1
    assert done.stderr.startswith("dsh-circuit-breaker: ") and why in done.stderr
    assert config.read_text() == text
    assert sorted(p.name for p in config.parent.iterdir()) == ["openclaw.json"]


def test_openclaws_own_rule_for_its_config_file(tmp_path: Path) -> None:
    state = tmp_path / "state-dir"
    done = cli(tmp_path, "install", "openclaw", OPENCLAW_STATE_DIR=str(state))
    assert done.returncode == 0, done.stderr
    assert (state / "openclaw.json").is_file() and (state / "dsh-circuit-breaker.mjs").is_file()
    explicit = tmp_path / "elsewhere" / "oc.json"
    done = cli(tmp_path, "install", "openclaw", OPENCLAW_CONFIG_PATH=str(explicit))
    assert done.returncode == 0, done.stderr
    assert json.loads(explicit.read_text())["plugins"]["load"]["paths"] == [
        str(explicit.parent / "dsh-circuit-breaker.mjs")
    ]
