"""Cline CLI: a plugin, `js/cline.mjs` (shipped as package data, built on the shared guard
client `js/guard.mjs`), whose `beforeTool` hook refuses one call with `{skip: true,
reason}`. Cline's command hooks (`~/.cline/hooks/`) cannot: their `cancel` aborts the
whole run.

`install cline` writes a loader of our own into Cline's plugins directory
(`$CLINE_DIR/plugins/dsh-circuit-breaker.js`, default ~/.cline; or
`<project>/.cline/plugins/` for a workspace) that imports the packaged plugin by absolute
path with the interpreter and options recorded at install time. `doctor cline` starts the
real `cline` with that plugins directory, a scratch data directory and a model URL that
answers nothing, and reads the marker the guard client writes once its guard has
answered.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..usage import FAILED, directory, error
from . import _doctor, _settings

NAME = "cline"
LABEL = "Cline"
CLI = "cline"
CLI_PACKAGE = "cline"
EXEMPT = ("ask_question",)  # Cline's spelling of ask_user_question
ANNOTATION_ARGS: tuple[str, ...] = ()  # run_commands takes only `commands`
SCOPES = ("user", "project")
FILE_NAME = "dsh-circuit-breaker.js"  # Cline loads every *.js / *.ts in a plugins directory
MARKER = (
    "// dsh-circuit-breaker: Cline plugin loader, written by `dsh-circuit-breaker install cline`"
)
CALL = "export default clinePlugin("
BOOT_TIMEOUT = 60.0  # seconds for Cline to load its plugins in doctor's check


class PluginError(Exception):
    """A plugin file we must not touch, or cannot read; the message says which."""


def adapter_path() -> Path:
    """The packaged plugin the loader imports."""
    return Path(__file__).resolve().parent.parent / "js" / "cline.mjs"


def cline_dir() -> Path:
    return Path(os.environ.get("CLINE_DIR", "").strip() or Path.home() / ".cline")


def plugin_file(scope: str, project: str | None = None) -> Path:
    if scope == "user":
        return cline_dir() / "plugins" / FILE_NAME
    return Path(project or os.getcwd()).absolute() / ".cline" / "plugins" / FILE_NAME


def loader(options: dict[str, Any]) -> str:
    """The loader's text: JSON literals are JavaScript literals, so paths with any
    characters stay intact."""
    url = json.dumps(adapter_path().as_uri())
    return "\n".join(
        [
            MARKER,
            "// (reinstall to change it; `dsh-circuit-breaker uninstall cline` removes it)",
            f"import {{ clinePlugin }} from {url};",
            "",
            f"{CALL}{json.dumps(options, sort_keys=True)});",
            "",
        ]
    )


def read_loader(path: Path) -> dict[str, Any] | None:
    """The options recorded in our loader at `path` (None: no file); `PluginError` for a
    file that is not ours."""
    if not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PluginError(f"cannot read {path}: {exc}") from None
    if not text.startswith(MARKER):
        raise PluginError(f"{path} was not written by dsh-circuit-breaker; not changing it")
    for line in text.splitlines():
        if line.startswith(CALL) and line.endswith(");"):
            try:
                options = json.loads(line[len(CALL) : -2])
            except ValueError:
                break
            if isinstance(options, dict):
                return options
    raise PluginError(f"{path}: our loader has been edited; reinstall to repair it")


# -- the CLI ---------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser, action: str) -> None:
    if action != "doctor":
        parser.add_argument("--scope", choices=SCOPES, default="user", help="plugins directory")
    parser.add_argument(
        "--project",
        metavar="DIR",
        type=directory,
        default=None,
        help="project directory (default: current)",
    )
    if action == "install":
        parser.add_argument(
            "--config",
            metavar="FILE",
            help="config file the guard reads (recorded in the loader; default: "
            "$DSH_CIRCUIT_BREAKER_CONFIG, else the user config file)",
        )
        parser.add_argument(
            "--state",
            metavar="URL",
            help="state URL the guard uses (default: $DSH_CIRCUIT_BREAKER_STATE, else sqlite:// "
            "in the user's state directory)",
        )
        parser.add_argument(
            "--python",
            metavar="PYTHON",
            default=sys.executable,
            help="interpreter for the guard process (default: this one)",
        )
    if action != "doctor":
        parser.add_argument(
            "--no-backup", action="store_true", help="do not back up our loader before changing it"
        )


def _reported(action: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A `PluginError` ends the action with one line (`usage.error`) and exit status 1."""

    @functools.wraps(action)
    def run(args: argparse.Namespace) -> int:
        try:
            return action(args)
        except PluginError as exc:
            return error(exc, FAILED)

    return run


@_reported
def install(args: argparse.Namespace) -> int:
    path = plugin_file(args.scope, args.project)
    old = read_loader(path)
    config = os.path.abspath(os.path.expanduser(args.config)) if args.config else None
    options = {
        "configFile": config,
        "pluginFile": str(path),
        "python": os.path.abspath(args.python),
        "state": args.state,
    }
    if old == options and path.read_text(encoding="utf-8") == loader(options):
        print(f"{LABEL}: already installed in {path}")
        return 0
    saved = _settings.write_text(path, loader(options), backup=not args.no_backup)
    note = f" (backup: {saved})" if saved else ""
    print(f"{LABEL}: installed in {path}{note}\n  plugin: {adapter_path()}\n  guard: {args.python}")
    other = plugin_file("project" if args.scope == "user" else "user", args.project)
    if other != path and other.exists():
        print(f"note: it is installed in {other} too; Cline would check every call twice")
    return 0


@_reported
def uninstall(args: argparse.Namespace) -> int:
    path = plugin_file(args.scope, args.project)
    if read_loader(path) is None:
        print(f"{LABEL}: not installed in {path}; nothing changed")
        return 0
    saved = _settings.remove_file(path, backup=not args.no_backup)
    note = f" (backup: {saved})" if saved else ""
    print(f"{LABEL}: removed from {path}{note}")
    return 0


def doctor(args: argparse.Namespace) -> int:
    """Our loader is there and sound, Cline is on PATH, and Cline really loads the plugin:
    its guard answers when Cline starts a session."""
    report = _doctor.Report()
    _doctor.doctor_cli(report, LABEL, CLI, CLI_PACKAGE)
    found: list[tuple[Path, dict[str, Any]]] = []
    for scope in SCOPES:
        path = plugin_file(scope, args.project)
        if any(path == seen for seen, _ in found):  # the project is the home directory
            continue
        try:
            options = read_loader(path)
        except PluginError as exc:
            report.problem(str(exc), f"remove it, then run `dsh-circuit-breaker install {NAME}`")
            continue
        if options is not None:
            found.append((path, options))
            _check_loader(report, scope, path, options)
    if not found:
        where = ", ".join(str(plugin_file(s, args.project)) for s in SCOPES)
        report.problem(f"{LABEL}: the plugin is not installed (looked in {where})", _hint())
    elif len(found) > 1:
        report.problem(
            f"{LABEL}: installed in {len(found)} plugins directories; every call is checked "
            "twice (and counted twice)",
            f"keep one: `dsh-circuit-breaker uninstall {NAME} --scope project` (or user)",
        )
    cli = shutil.which(CLI)
    if found and cli and not report.problems:
        _doctor_boot(report, cli, args.project, [p for p, _ in found])
    options = found[0][1] if found else {}
    _doctor.doctor_config_and_state(
        report, options.get("configFile"), options.get("state"), sys.modules[__name__]
    )
    return report.finish()


def _hint() -> str:
    return f"dsh-circuit-breaker install {NAME}"


def _check_loader(report: _doctor.Report, scope: str, path: Path, options: dict[str, Any]) -> None:
    report.ok(f"{LABEL} ({scope}): plugin loader {path}")
    wanted = loader(options)
    if path.read_text(encoding="utf-8") != wanted:
        report.problem(
            f"{path} imports another copy of the plugin than {adapter_path()}",
            f"run `{_hint()}` with this environment's dsh-circuit-breaker",
        )
    python = options.get("python")
    usable = isinstance(python, str) and os.path.isfile(python) and os.access(python, os.X_OK)
    report.check(usable, f"guard interpreter: {python}", f"reinstall: `{_hint()} --python PATH`")


def _doctor_boot(report: _doctor.Report, cli: str, project: str | None, files: list[Path]) -> None:
    record, output = boot_check(cli, project)
    if record is None:
        report.problem(
            "Cline started a session but the plugin did not start its guard",
            "see Cline's output below; check `cline --version` and the loader above",
        )
        if output.strip():
            print(output.strip()[-2000:])
        return
    if not record.get("ok"):
        report.problem(f"the plugin loaded but its guard did not start: {record.get('error')}")
        return
    loaded = record.get("pluginFile")
    report.check(
        loaded in {str(f) for f in files},
        f"Cline loaded the plugin ({loaded}); guard pid {record.get('pid')} answered "
        f"({record.get('python')})",
    )


def boot_check(cli: str, project: str | None, timeout: float = BOOT_TIMEOUT) -> tuple[Any, str]:
    """Start a Cline session as a user does (`cline --json PROMPT` in the project), with a
    scratch data directory (its provider: a loopback port nobody listens on) and the
    plugins where they are, and wait for the guard client's ready marker. Returns (the
    marker record or None, Cline's output)."""
    with tempfile.TemporaryDirectory(prefix="dsh-cb-cline-doctor-") as scratch:
        data = Path(scratch) / "data"
        settings = data / "settings"
        settings.mkdir(parents=True)
        (settings / "global-settings.json").write_text(
            json.dumps({"telemetryOptOut": True, "autoUpdateEnabled": False})
        )
        marker = Path(scratch) / "ready.jsonl"
        env = dict(
            os.environ,
            CLINE_DATA_DIR=str(data),
            CLINE_SESSION_BACKEND_MODE="local",  # no hub daemon left behind
            CLINE_NO_AUTO_UPDATE="1",
            DSH_CIRCUIT_BREAKER_READY_FILE=str(marker),
        )
        url = f"http://127.0.0.1:{_closed_port()}/v1"
        auth = [cli, "auth", "-p", "openai", "-k", "doctor", "-m", "doctor", "-b", url]
        done = subprocess.run(
            auth, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            return None, done.stdout + done.stderr
        out = Path(scratch) / "cline.out"
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                [cli, "--json", "dsh-circuit-breaker doctor: check the plugin"],
                cwd=project or os.getcwd(),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its plugin host and our guard go with it
            )
            try:
                record = _wait_for_marker(marker, proc, timeout)
            finally:
                _stop(proc)
        return record, out.read_text(encoding="utf-8", errors="replace")


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _wait_for_marker(marker: Path, proc: subprocess.Popen[bytes], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ended = proc.poll() is not None
        if marker.exists():
            line = marker.read_text(encoding="utf-8").partition("\n")
            if line[1]:  # a whole line
                return json.loads(line[0])
        if ended:
            return None
        time.sleep(0.1)
    return None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the session we started, and the processes it started (its process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue
