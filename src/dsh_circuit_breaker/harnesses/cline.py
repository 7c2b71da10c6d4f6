"""Cline CLI (`cline`): a plugin in Cline's plugins directory, `$CLINE_DIR/plugins/`
(default ~/.cline) for the user or `<project>/.cline/plugins/` for a workspace; Cline
loads every `.js`/`.ts` file there. The adapter is `js/cline.mjs`: its `beforeTool` hook
refuses one call with `{skip: true, reason}`. Cline's command hooks (`~/.cline/hooks/`)
cannot: their `cancel` aborts the whole run.

`doctor cline` starts the real `cline` as a user does (`cline --json PROMPT` in the
project) with a scratch data directory whose model URL is a loopback port nobody listens
on: Cline loads its plugins when the session starts, before it asks the model.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
from pathlib import Path

from ._plugin import JS_DIR, Booted, PluginHarness, run_until_ready, which

NAME = "cline"
LABEL = "Cline"
EXEMPT = ("ask_question",)  # Cline's spelling of ask_user_question
ANNOTATION_ARGS: tuple[str, ...] = ()  # run_commands takes only `commands`


def cline_dir() -> Path:
    return Path(os.environ.get("CLINE_DIR", "").strip() or Path.home() / ".cline")


def plugin_dir(scope: str, args: argparse.Namespace) -> Path:
    if scope == "user":
        return cline_dir() / "plugins"
    return Path(args.project or os.getcwd()).absolute() / ".cline" / "plugins"


def boot(
    harness: PluginHarness, args: argparse.Namespace, scratch: Path, env: dict[str, str]
) -> Booted:
    """`cline auth` to a closed port in a scratch data directory (your providers and
    sessions untouched), then a session in the project, on the local session backend (no
    hub daemon left behind)."""
    data = scratch / "data"
    settings = data / "settings"
    settings.mkdir(parents=True)
    (settings / "global-settings.json").write_text(
        json.dumps({"telemetryOptOut": True, "autoUpdateEnabled": False})
    )
    env = {
        **env,
        "CLINE_DATA_DIR": str(data),
        "CLINE_SESSION_BACKEND_MODE": "local",
        "CLINE_NO_AUTO_UPDATE": "1",
    }
    cli = which(harness.executable)
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    auth = [cli, "auth", "-p", "openai", "-k", "doctor", "-m", "doctor", "-b", url]
    done = subprocess.run(
        auth,
        env=env,
        capture_output=True,
        text=True,
        timeout=harness.start_timeout,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        return Booted([], done.stdout + done.stderr)
    session = [cli, "--json", "dsh-circuit-breaker doctor: check the plugin"]
    project = Path(args.project or os.getcwd())
    records, output = run_until_ready(
        session, env, project, scratch, harness.start_timeout, to_exit=False
    )
    return Booted(records, output)


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


HARNESS = PluginHarness(
    name=NAME,
    label=LABEL,
    exempt=EXEMPT,
    annotation_args=ANNOTATION_ARGS,
    adapter=JS_DIR / "cline.mjs",
    executable="cline",
    package="cline",
    plugin_dir=plugin_dir,
    boot=boot,
    scopes=("user", "project"),
    start_timeout=60.0,
)
add_arguments, install, uninstall, doctor = HARNESS.entry_points()
