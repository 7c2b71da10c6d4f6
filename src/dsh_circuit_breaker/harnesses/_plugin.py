"""install / uninstall / doctor for the JavaScript plugin harnesses (pi, OpenCode, Kilo).

`install` writes one small loader file, `dsh-circuit-breaker.js`, into the directory where
the harness's users put their own plugins (user scope). It imports our adapter
(`js/<harness>.mjs`, shipped in this package) by absolute path and calls it with what
`install` was given: the harness's name, the interpreter that runs the guard, and the
config file and state URL (null: those the command hooks find). The guard then loads its
config at every start as that harness's command hook would (guard/stdio.py's hello with
`harness`), so editing the config file needs no reinstall. A harness only discovers
`.js`/`.ts` files there, so the backups (`dsh-circuit-breaker.js.bak-<UTC time>`) beside
it are never loaded.

A harness reports a plugin that fails to load in its own way (OpenCode and Kilo only log
it and run without it), so `doctor` trusts nothing it reads: it starts the harness
headless the way a user does (their plugin directory, their config), pointed at a
throwaway model on 127.0.0.1 that only says OK, and waits for the plugin's ready marker
(`$DSH_CIRCUIT_BREAKER_READY_FILE`), which the guard client writes once the guard has
answered its hello.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..usage import FAILED, error
from ._doctor import Report, doctor_cli, doctor_config_and_state
from ._settings import write_text
from ._stub_model import StubModel

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..config import Config

LOADER = "dsh-circuit-breaker.js"
HEADER = "// dsh-circuit-breaker: managed by `dsh-circuit-breaker install {name}`"
JS_DIR = Path(__file__).resolve().parent.parent / "js"

# How doctor starts a harness: (scratch dir, model) -> (argv, extra environment).
Headless = Callable[[Path, StubModel], tuple[list[str], dict[str, str]]]
Action = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class PluginHarness:
    name: str  # `install NAME`
    label: str  # the harness's name for people
    adapter: str  # its adapter, a file in js/
    executable: str  # its CLI
    package: str  # the npm package that installs the CLI
    module: str  # its module in harnesses/ (its EXEMPT spellings, for the guard's config)
    plugin_dir: Callable[[], Path]  # where its users put plugins
    headless: Headless
    start_timeout: float = 120.0  # seconds doctor gives the headless run
    # Plugin loads a run may make besides the first (Kilo sometimes loads its plugins once
    # more as `run` exits); more than that means the plugin is installed twice.
    extra_loads: int = 0

    @property
    def loader(self) -> Path:
        return self.plugin_dir() / LOADER

    @property
    def adapter_path(self) -> Path:
        return JS_DIR / self.adapter


def entry_points(
    harness: PluginHarness,
) -> tuple[Callable[[argparse.ArgumentParser, str], None], Action, Action, Action]:
    """`add_arguments`, `install`, `uninstall`, `doctor` for a harness module."""

    def install_(args: argparse.Namespace) -> int:
        return install(harness, args)

    def uninstall_(args: argparse.Namespace) -> int:
        return uninstall(harness, args)

    def doctor_(args: argparse.Namespace) -> int:
        return doctor(harness, args)

    return add_arguments, install_, uninstall_, doctor_


def add_arguments(parser: argparse.ArgumentParser, action: str) -> None:
    if action != "install":
        return
    parser.add_argument(
        "--python",
        metavar="PYTHON",
        default=sys.executable,
        help="interpreter for the guard process (default: this one)",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="config file the guard reads (recorded in the plugin; default: "
        "$DSH_CIRCUIT_BREAKER_CONFIG, else the user config file, as for the command hooks)",
    )
    parser.add_argument(
        "--state",
        default=None,
        metavar="URL",
        help="state store URL (recorded in the plugin; default: the command hooks' store)",
    )


class InstallError(Exception):
    """A problem the user must fix; the message says what and where."""


# -- the loader --------------------------------------------------------------------------


def guard_config(harness: PluginHarness, config_file: str | None) -> tuple[Config, str | None]:
    """The config the guard will load (as that harness's command hook would), and the state
    URL its file names. `ConfigError` for a bad file."""
    import importlib

    from ..config_file import hook_config

    return hook_config(config_file, importlib.import_module(harness.module))


def loader_text(harness: PluginHarness, options: dict[str, Any]) -> str:
    # JSON is a JavaScript expression, so any path survives as written.
    return "\n".join(
        [
            HEADER.format(name=harness.name) + f"; `uninstall {harness.name}` removes it.",
            "// The adapter is part of the Python package; this file names it and what install",
            "// was given: the interpreter that runs the guard, the config file and the state",
            "// store (null: those the command hooks find). Install again to change them.",
            f"import {{ circuitBreaker }} from {json.dumps(harness.adapter_path.as_uri())};",
            "",
            f"export default circuitBreaker({json.dumps(options, indent=2, ensure_ascii=False)});",
            "",
        ]
    )


def read_loader(harness: PluginHarness) -> str | None:
    """The loader's text; None when there is none. `InstallError` for a file we must not
    touch: not ours, or not a regular file (we never follow a link we did not make)."""
    path = harness.loader
    if not path.is_symlink() and not path.exists():
        return None
    if path.is_symlink() or not path.is_file():
        raise InstallError(f"{path} is not a regular file; not touching it")
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.startswith(HEADER.format(name=harness.name)):
        raise InstallError(f"{path} exists and was not written by us; not touching it")
    return text


def parse_loader(text: str) -> dict[str, Any]:
    """The options a loader passes to the adapter; ValueError for an edited one."""
    start = text.index("circuitBreaker(", text.index("export default")) + len("circuitBreaker(")
    options = json.loads(text[start : text.rindex(");")])
    if not isinstance(options, dict):
        raise ValueError("the loader's options are not an object; install again to repair it")
    return options


# -- install / uninstall -------------------------------------------------------------------


def install(harness: PluginHarness, args: argparse.Namespace) -> int:
    from ..config import ConfigError

    config_file = os.path.abspath(os.path.expanduser(args.config)) if args.config else None
    options = {
        "harness": harness.name,
        "python": str(Path(args.python).absolute()),
        "configFile": config_file,
        "state": args.state,
    }
    try:
        config, _ = guard_config(harness, config_file)  # a bad file fails here, not at start
        old = read_loader(harness)
        new = loader_text(harness, options)
        if config.incident_log:
            # The guard appends to the log but makes no directories.
            log = Path(os.path.expanduser(config.incident_log))
            log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if new == old:
            print(f"already installed: {harness.loader}")
        else:
            backup = write_text(harness.loader, new, backup=old is not None)
            print(f"installed: {harness.loader}" + (f" (backup: {backup})" if backup else ""))
    except (ConfigError, InstallError, OSError) as exc:
        return error(f"install {harness.name}: {exc}", FAILED)
    print(f"check it loads: dsh-circuit-breaker doctor {harness.name}")
    return 0


def uninstall(harness: PluginHarness, args: argparse.Namespace) -> int:
    try:
        if read_loader(harness) is None:
            print(f"not installed: no {harness.loader}")
        else:
            harness.loader.unlink()
            print(f"removed {harness.loader}")
    except (InstallError, OSError) as exc:
        return error(f"uninstall {harness.name}: {exc}", FAILED)
    return 0


# -- doctor --------------------------------------------------------------------------------


def doctor(harness: PluginHarness, args: argparse.Namespace) -> int:
    report = Report()
    try:
        if _doctor_loader(harness, report):
            doctor_cli(report, harness.label, harness.executable, harness.package)
            if not report.problems:
                _doctor_start(harness, report)
    except (InstallError, OSError, ValueError, subprocess.SubprocessError) as exc:
        report.problem(str(exc))
    return report.finish()


def _doctor_loader(harness: PluginHarness, report: Report) -> bool:
    """The loader is there, ours, and names files that exist; the config it will load is
    valid and its state store takes a write."""
    import importlib

    text = read_loader(harness)
    if text is None:
        report.problem(
            f"not installed: no {harness.loader}", f"dsh-circuit-breaker install {harness.name}"
        )
        return False
    options = parse_loader(text)
    report.ok(f"plugin file: {harness.loader}")
    python = options.get("python")
    report.check(
        isinstance(python, str) and os.access(python, os.X_OK),
        f"guard interpreter: {python}",
        "reinstall with the interpreter that has this package: "
        f"dsh-circuit-breaker install {harness.name}",
    )
    report.check(harness.adapter_path.is_file(), f"adapter: {harness.adapter_path}")
    module = importlib.import_module(harness.module)
    doctor_config_and_state(report, options.get("configFile"), options.get("state"), module)
    return not report.problems


def _doctor_start(harness: PluginHarness, report: Report) -> None:
    with tempfile.TemporaryDirectory(prefix="dsh-cb-doctor-") as scratch, StubModel() as model:
        root = Path(scratch)
        work = root / "work"
        work.mkdir()
        marker = root / "ready.jsonl"
        argv, extra = harness.headless(root, model)
        # OpenCode takes its working directory from $PWD when it is set.
        env = {
            **os.environ,
            **extra,
            "PWD": str(work),
            "DSH_CIRCUIT_BREAKER_READY_FILE": str(marker),
        }
        try:
            done = subprocess.run(
                argv,
                cwd=work,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=harness.start_timeout,
            )
            output = done.stderr + done.stdout
        except subprocess.TimeoutExpired as exc:
            said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
            output = f"(no exit within {harness.start_timeout:.0f} s) {said}"
        records = _markers(marker)
        _report_start(harness, report, records, model.requests, output)


def _markers(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def _report_start(
    harness: PluginHarness,
    report: Report,
    records: list[dict[str, Any]],
    requests: int,
    output: str,
) -> None:
    ours = [r for r in records if r.get("pluginFile") == str(harness.adapter_path)]
    if not records:
        report.problem(f"the plugin did not load when {harness.label} started headless")
    elif not ours:
        report.problem(f"{harness.label} loaded another copy: {records[0].get('pluginFile')}")
    elif not ours[0].get("ok"):
        report.problem(f"the plugin loaded but its guard did not start: {ours[0].get('error')}")
    else:
        record = ours[0]
        report.ok(
            f"plugin loaded in {harness.label}; guard answered (pid {record.get('pid')}, "
            f"{record.get('python')})"
        )
        report.note("effective breaker config: " + json.dumps(record.get("config")))
        if len(ours) > 1 + harness.extra_loads:
            report.problem(f"the plugin loaded {len(ours)} times (installed twice?)")
        if not requests:
            report.note(f"{harness.label} never asked the doctor's model: its run did not start")
        return
    tail = "\n".join(output.strip().splitlines()[-15:])
    if tail:
        report.note(f"{harness.label} said:\n{tail}")


def which(executable: str) -> str:
    """The CLI doctor starts (doctor_cli has checked that it is on PATH)."""
    return shutil.which(executable) or executable
