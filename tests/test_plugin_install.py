"""install / uninstall for the plugin harnesses with a loader file (pi, OpenCode, Kilo,
Cline), without their CLIs: the loader file, its config, idempotence and backups, files
we must not touch, and the doctor's throwaway model. The CLIs themselves:
tests/test_plugin_harness_e2e.py, tests/test_cline_plugin.py; DSH's patch layer:
tests/test_dsh_install.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.guard.stdio import GuardServer
from dsh_circuit_breaker.harnesses import PLUGIN_HARNESSES
from dsh_circuit_breaker.harnesses._plugin import parse_loader
from dsh_circuit_breaker.harnesses._stub_model import StubModel
from hook_support import hook_env

NAMES = ["pi", "opencode", "kilo", "cline"]
LOADERS = {
    "pi": ".pi/agent/extensions/dsh-circuit-breaker.js",
    "opencode": "config/opencode/plugins/dsh-circuit-breaker.js",
    "kilo": "config/kilo/plugins/dsh-circuit-breaker.js",
    "cline": ".cline/plugins/dsh-circuit-breaker.js",
}


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh_circuit_breaker.cli", *args],
        env=hook_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(params=NAMES)
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_every_plugin_harness_is_registered() -> None:
    assert set(PLUGIN_HARNESSES) == {*NAMES, "dsh", "mcp", "openclaw"}  # their own suites
    for harness in PLUGIN_HARNESSES.values():
        module = harness()
        for member in ("add_arguments", "install", "uninstall", "doctor"):
            assert callable(getattr(module, member)), (harness, member)


def test_install_writes_a_loader_and_is_idempotent(name: str, tmp_path: Path) -> None:
    loader = tmp_path / LOADERS[name]
    done = cli(tmp_path, "install", name, "--python", "/opt/venv/bin/python")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"installed: {loader}",
        f"check it loads: dsh-circuit-breaker doctor {name}",
    ]
    assert parse_loader(loader.read_text()) == {
        "harness": name,
        "python": "/opt/venv/bin/python",
        "configFile": None,
        "state": None,
    }
    # The incident log's directory (the guard appends to the log, it makes no directories).
    assert (tmp_path / "state/dsh-circuit-breaker").stat().st_mode & 0o777 == 0o700
    assert loader.stat().st_mode & 0o777 == 0o600
    before = loader.read_text()
    again = cli(tmp_path, "install", name, "--python", "/opt/venv/bin/python")
    assert again.stdout.splitlines()[0] == f"already installed: {loader}"
    assert loader.read_text() == before
    assert [p.name for p in loader.parent.iterdir()] == [loader.name]


def test_the_guard_loads_the_recorded_config_as_the_harness_hook_would(
    name: str, tmp_path: Path
) -> None:
    config = tmp_path / "breaker.toml"
    config.write_text('duplicateLimit = 4\nstate = "memory://"\n')
    done = cli(tmp_path, "install", name, "--config", str(config))
    assert done.returncode == 0, done.stderr
    options = parse_loader((tmp_path / LOADERS[name]).read_text())
    assert options["configFile"] == str(config)
    hello = {"op": "hello", "id": 0, "config": {}, "state": options["state"]}
    hello.update(harness=options["harness"], configFile=options["configFile"])
    reply = GuardServer().handle_line(json.dumps(hello).encode())
    assert reply is not None and reply["ok"], reply
    effective = reply["config"]
    assert effective["duplicateLimit"] == 4
    assert effective["incidentLog"].endswith("/dsh-circuit-breaker/incidents.jsonl")
    if name == "pi":
        assert effective["exempt"] == ["todo_write", "ask_user_question", "exit_plan_mode"]
    elif name == "cline":
        assert effective["exempt"][-1:] == ["ask_question"]
    else:
        assert effective["exempt"][-3:] == ["todowrite", "todoread", "question"]


def test_other_options_rewrite_the_loader_after_a_backup(name: str, tmp_path: Path) -> None:
    loader = tmp_path / LOADERS[name]
    assert cli(tmp_path, "install", name).returncode == 0
    old = loader.read_text()
    done = cli(tmp_path, "install", name, "--state", "memory://")
    assert done.stdout.startswith(f"installed: {loader} (backup: {loader}.bak-")
    (backup,) = [p for p in loader.parent.iterdir() if p != loader]
    assert backup.name.endswith("Z") and backup.read_text() == old
    assert parse_loader(loader.read_text()) == {**parse_loader(old), "state": "memory://"}


def test_a_bad_config_fails_install_naming_the_key(name: str, tmp_path: Path) -> None:
    config = tmp_path / "breaker.json"
    config.write_text(json.dumps({"duplicateLimt": 3}))
    done = cli(tmp_path, "install", name, "--config", str(config))
    assert done.returncode == 2  # bad usage (README, Development)
    assert f"dsh-circuit-breaker: {config}: unknown config key 'duplicateLimt'" in done.stderr
    assert not (tmp_path / LOADERS[name]).exists()


def test_files_we_did_not_write_are_left_alone(name: str, tmp_path: Path) -> None:
    loader = tmp_path / LOADERS[name]
    loader.parent.mkdir(parents=True)
    target = tmp_path / "elsewhere.js"
    target.write_text("export default {}\n")
    loader.symlink_to(target)
    for action in ("install", "uninstall"):
        done = cli(tmp_path, action, name)
        assert done.returncode == 1
        assert f"{loader} is not a regular file; not touching it" in done.stderr
    loader.unlink()
    loader.write_text("// my own plugin\n")
    done = cli(tmp_path, "install", name)
    assert done.returncode == 1
    assert f"{loader} exists and was not written by us; not touching it" in done.stderr
    assert loader.read_text() == "// my own plugin\n"
    assert target.read_text() == "export default {}\n"


def test_uninstall_removes_only_our_loader_after_a_backup(name: str, tmp_path: Path) -> None:
    loader = tmp_path / LOADERS[name]
    assert cli(tmp_path, "uninstall", name).stdout == f"not installed: no {loader}\n"
    assert cli(tmp_path, "install", name).returncode == 0
    text = loader.read_text()
    (loader.parent / "mine.js").write_text("export default {}\n")
    done = cli(tmp_path, "uninstall", name)
    assert done.stdout.startswith(f"removed {loader} (backup: {loader}.bak-")
    backup, mine = sorted(loader.parent.iterdir())
    assert mine.name == "mine.js" and backup.read_text() == text
    assert cli(tmp_path, "install", name).returncode == 0
    assert cli(tmp_path, "uninstall", name, "--no-backup").stdout == f"removed {loader}\n"
    assert sorted(loader.parent.iterdir()) == [backup, mine]


def test_the_loader_is_a_module_node_can_parse(name: str, tmp_path: Path) -> None:
    node = shutil.which("node")
    require(node is not None, "node")
    assert cli(tmp_path, "install", name, "--python", "/a path/with 'quotes' and ü").returncode == 0
    loader = tmp_path / LOADERS[name]
    module = loader.with_suffix(".mjs")
    shutil.copyfile(loader, module)
    done = subprocess.run(
        [str(node), "--check", str(module)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert parse_loader(loader.read_text())["python"] == "/a path/with 'quotes' and ü"


def test_doctor_says_what_is_missing(name: str, tmp_path: Path) -> None:
    done = cli(tmp_path, "doctor", name)
    assert done.returncode == 1
    assert f"PROBLEM  not installed: no {tmp_path / LOADERS[name]}" in done.stdout
    assert f"fix: dsh-circuit-breaker install {name}" in done.stdout


def ask(model: StubModel, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{model.url}/chat/completions", data=json.dumps(body).encode(), headers=headers
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_doctor_model_answers_only_its_token_and_host() -> None:
    with StubModel() as model:
        good = {"Authorization": f"Bearer {model.token}", "Content-Type": "application/json"}
        status, text = ask(model, good, {"messages": []})
        assert status == 200 and json.loads(text)["choices"][0]["message"]["content"] == "OK"
        status, text = ask(model, good, {"stream": True})
        assert status == 200 and text.endswith("data: [DONE]\n\n") and '"content": "OK"' in text
        assert ask(model, {**good, "Authorization": "Bearer nope"}, {})[0] == 403
        assert ask(model, {**good, "Origin": "https://example.com"}, {})[0] == 403
        assert ask(model, {**good, "Host": "example.com"}, {})[0] == 403
        assert model.requests == 2


def test_install_honours_the_harness_directories(tmp_path: Path) -> None:
    env = {**hook_env(tmp_path), "PI_CODING_AGENT_DIR": str(tmp_path / "pi-agent")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    env["CLINE_DIR"] = str(tmp_path / "cline-dir")
    for name, where in (
        ("pi", "pi-agent/extensions"),
        ("opencode", "xdg/opencode/plugins"),
        ("kilo", "xdg/kilo/plugins"),
        ("cline", "cline-dir/plugins"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "dsh_circuit_breaker.cli", "install", name],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert (tmp_path / where / "dsh-circuit-breaker.js").is_file()
