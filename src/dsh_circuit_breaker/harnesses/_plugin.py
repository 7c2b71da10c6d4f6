"""install / uninstall / doctor for the plugin harnesses (pi, OpenCode, Kilo, Cline, DSH),
written once: a harness module is a `PluginHarness` and the four entry points it lends.

`install` writes one small loader file, `dsh-circuit-breaker.js`, into a directory where
the harness discovers plugins (a harness may have several: its scopes). It imports our
adapter (`js/<harness>.mjs`, shipped in this package) by absolute path and calls its
`circuitBreaker` with what `install` was given: the harness's name, the interpreter that
runs the guard, and the config file and state URL (null: those the command hooks find).
The guard then loads its config at every start as that harness's command hook would
(guard/stdio.py's hello with `harness`), so editing the config file needs no reinstall. A
harness only discovers `.js`/`.ts` files there, so the backups
(`dsh-circuit-breaker.js.bak-<UTC time>`) beside it are never loaded. A harness whose
install lives in a file of its own format (DSH's patch layer) overrides `with_ours`,
`without_ours` and `ours`.

A harness reports a plugin that fails to load in its own way (OpenCode and Kilo only log
it and run without it), so `doctor` trusts nothing it reads: it starts the harness the
way a user does (its `boot` check) and waits for the plugin's ready marker
(`$DSH_CIRCUIT_BREAKER_READY_FILE`), which the guard client writes once the guard has
answered its hello.

Every action reports the same way: a failed install or uninstall says why on stderr
(`dsh-circuit-breaker: ...`) and exits 1; doctor prints `_doctor.Report`'s lines and exits
1 when it found a problem.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.config import Config, ConfigError
from ..core.config_file import hook_config
from ..usage import FAILED, directory, error
from ._doctor import Report, doctor_cli, doctor_config_and_state
from ._settings import remove_file, write_text
from ._stub_model import StubModel

LOADER = "dsh-circuit-breaker.js"
HEADER = "// dsh-circuit-breaker: managed by `dsh-circuit-breaker install {name}`"
JS_DIR = Path(__file__).resolve().parent.parent / "js"
MARKER = "ready.jsonl"  # in doctor's scratch directory: $DSH_CIRCUIT_BREAKER_READY_FILE
GRACE = 3.0  # seconds a booted harness's plugin still gets to start its guard


class InstallError(Exception):
    """A problem the user must fix; the message says what and where."""


@dataclass(frozen=True)
class Booted:
    """What doctor's start of the harness left: the guard clients' ready records, what the
    harness printed, and notes worth a line once the plugin loaded."""

    records: list[dict[str, Any]]
    output: str
    notes: tuple[str, ...] = ()


# doctor's start of a harness: (harness, args, scratch directory, environment with the
# ready marker) -> what it left.
BootCheck = Callable[["PluginHarness", argparse.Namespace, Path, dict[str, str]], Booted]
# How a harness starts headless: (scratch dir, model) -> (argv, extra environment).
Headless = Callable[[Path, StubModel], tuple[list[str], dict[str, str]]]
Action = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Spelled:
    """A plugin harness as the config loader and doctor read a harness module."""

    NAME: str
    LABEL: str
    EXEMPT: tuple[str, ...]
    ANNOTATION_ARGS: tuple[str, ...]


@dataclass(frozen=True)
class PluginHarness:
    name: str  # `install NAME`
    label: str  # the harness's name for people
    adapter: Path  # the plugin file the harness loads (js/<harness>.mjs)
    executable: str  # its CLI
    package: str  # the npm package that installs the CLI
    # (scope, args) -> the directory our file goes in (where it discovers plugins)
    plugin_dir: Callable[[str, argparse.Namespace], Path]
    boot: BootCheck
    scopes: tuple[str, ...] = ("user",)  # the first is install's default
    file_name: str = LOADER
    start_timeout: float = 120.0  # seconds doctor gives the harness to load the plugin
    # Plugin loads a run may make besides the first (Kilo sometimes loads its plugins once
    # more as `run` exits); more than that means the plugin is installed twice.
    extra_loads: int = 0
    # install records --config and --state in the loader (DSH's entry has its own config)
    config_options: bool = True
    exempt: tuple[str, ...] = ()  # its module's EXEMPT and ANNOTATION_ARGS, for the guard
    annotation_args: tuple[str, ...] = ()

    # -- the command line --------------------------------------------------------------

    def add_arguments(self, parser: argparse.ArgumentParser, action: str) -> None:
        parser.set_defaults(scope=self.scopes[0], project=None)
        if len(self.scopes) > 1:
            if action != "doctor":
                parser.add_argument(
                    "--scope", choices=self.scopes, default=self.scopes[0], help="plugin directory"
                )
            parser.add_argument(
                "--project",
                metavar="DIR",
                type=directory,
                default=None,
                help="project directory (default: current)",
            )
        if action == "install":
            parser.add_argument(
                "--python",
                metavar="PYTHON",
                default=sys.executable,
                help="interpreter for the guard process (default: this one)",
            )
        if action == "install" and self.config_options:
            parser.add_argument(
                "--config",
                default=None,
                metavar="FILE",
                help="config file the guard reads (recorded in the plugin; default: "
                "$DSH_CIRCUIT_BREAKER_CONFIG, else the user config file, as for the command "
                "hooks)",
            )
            parser.add_argument(
                "--state",
                default=None,
                metavar="URL",
                help="state store URL (recorded in the plugin; default: the command hooks' store)",
            )
        if action != "doctor":
            parser.add_argument(
                "--no-backup", action="store_true", help="do not back up a file before changing it"
            )

    def spellings(self) -> Spelled:
        """Its names and spellings, which the guard loads its config with."""
        return Spelled(self.name, self.label, self.exempt, self.annotation_args)

    def entry_points(
        self,
    ) -> tuple[Callable[[argparse.ArgumentParser, str], None], Action, Action, Action]:
        """`add_arguments`, `install`, `uninstall`, `doctor` for the harness's module."""
        return self.add_arguments, self.install, self.uninstall, self.doctor

    # -- where, and what --------------------------------------------------------------

    def path(self, args: argparse.Namespace, scope: str) -> Path:
        """The file our install lives in, for one scope."""
        return self.plugin_dir(scope, args) / self.file_name

    def places(self, args: argparse.Namespace) -> list[tuple[str, Path]]:
        """Every scope's file, each once (a project may be the home directory)."""
        found: dict[Path, str] = {}
        for scope in self.scopes:
            found.setdefault(self.path(args, scope), scope)
        return [(scope, path) for path, scope in found.items()]

    def recorded(self, args: argparse.Namespace) -> dict[str, Any]:
        """What install records in the loader."""
        return {
            "harness": self.name,
            "python": str(Path(args.python).absolute()),
            "configFile": os.path.abspath(os.path.expanduser(args.config)) if args.config else None,
            "state": args.state,
        }

    def read(self, path: Path) -> str | None:
        """The file's text (None: there is none). `InstallError` for a file we must not
        touch: one that is not a regular file (we never follow a link we did not make)."""
        if not path.is_symlink() and not path.exists():
            return None
        if path.is_symlink() or not path.is_file():
            raise InstallError(f"{path} is not a regular file; not touching it")
        return path.read_text(encoding="utf-8", errors="replace")

    def ours(self, path: Path, text: str) -> bool:
        """Our install is in `text`; `InstallError` for a file that is not ours to change."""
        if not text.startswith(HEADER.format(name=self.name)):
            raise InstallError(f"{path} exists and was not written by us; not touching it")
        return True

    def with_ours(self, path: Path, text: str | None, args: argparse.Namespace) -> str:
        """The file with our install, as `args` asks for it."""
        if text is not None:
            self.ours(path, text)
        return loader_text(self.name, self.adapter, self.recorded(args))

    def without_ours(self, text: str) -> str | None:
        """The file without our install; None: nothing of it is left (delete it)."""
        return None

    # -- install / uninstall -----------------------------------------------------------

    def install(self, args: argparse.Namespace) -> int:
        return _failing(self._install, args)

    def _install(self, args: argparse.Namespace) -> None:
        path = self.path(args, args.scope)
        old = self.read(path)
        new = self.with_ours(path, old, args)
        self.prepare(args)
        if new == old:
            print(f"already installed: {path}")
        else:
            backup = write_text(path, new, backup=old is not None and not args.no_backup)
            print(f"installed: {path}" + (f" (backup: {backup})" if backup else ""))
        for scope, other in self.places(args):
            if other != path and other.exists():
                print(
                    f"note: it is installed in {other} ({scope}) too; "
                    f"{self.label} would check every call twice"
                )
        print(f"check it loads: {self.doctor_command(args)}")

    def prepare(self, args: argparse.Namespace) -> None:
        """Before the file is written: the recorded config is valid (a bad file fails
        here, not at the harness's start), and its incident log's directory exists."""
        try:
            config, _ = guard_config(self.spellings(), self.recorded(args)["configFile"])
        except ConfigError as exc:
            raise InstallError(str(exc)) from None
        if config.incident_log:
            # The guard appends to the log but makes no directories.
            log = Path(os.path.expanduser(config.incident_log))
            log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)

    def doctor_command(self, args: argparse.Namespace) -> str:
        return f"dsh-circuit-breaker doctor {self.name}"

    def uninstall(self, args: argparse.Namespace) -> int:
        return _failing(self._uninstall, args)

    def _uninstall(self, args: argparse.Namespace) -> None:
        path = self.path(args, args.scope)
        old = self.read(path)
        if old is None or not self.ours(path, old):
            print(f"not installed: {self.nothing_in(path)}")
            return
        rest = self.without_ours(old)
        backup = not args.no_backup
        if rest is None:
            saved = remove_file(path, backup=backup)
            print(f"removed {path}" + (f" (backup: {saved})" if saved else ""))
        else:
            saved = write_text(path, rest, backup=backup)
            print(f"removed from {path}" + (f" (backup: {saved})" if saved else ""))

    def nothing_in(self, path: Path) -> str:
        """Where install would have put it, for `not installed: ...`."""
        return f"no {path}"

    # -- doctor ------------------------------------------------------------------------

    def doctor(self, args: argparse.Namespace) -> int:
        report = Report()
        try:
            if self.doctor_install(report, args):
                self.doctor_boot(report, args)
            elif report.problems:
                report.note(f"{self.label} not started: fix the problems above first")
        except (InstallError, OSError, ValueError, subprocess.SubprocessError) as exc:
            report.problem(str(exc))
        return report.finish()

    def doctor_install(self, report: Report, args: argparse.Namespace) -> bool:
        """What can be checked without starting the harness: the loader is there, once,
        ours, and names files that exist; the config the guard will load is valid and its
        state store takes a write; the harness's CLI runs. True: start it."""
        found = []
        for _, path in self.places(args):
            text = self.read(path)
            if text is not None and self.ours(path, text):
                found.append((path, text))
        if not found:
            where = " and ".join(self.nothing_in(p) for _, p in self.places(args))
            report.problem(f"not installed: {where}", f"dsh-circuit-breaker install {self.name}")
            return False
        if len(found) > 1:
            report.problem(
                f"{self.label}: installed in {len(found)} plugins directories; every call is "
                "checked twice (and counted twice)",
                f"keep one: `dsh-circuit-breaker uninstall {self.name} --scope {self.scopes[-1]}`"
                f" (or {self.scopes[0]})",
            )
        options: dict[str, Any] = {}
        for path, text in found:
            options = parse_loader(text)
            self._doctor_loader(report, path, text, options)
        doctor_config_and_state(
            report, options.get("configFile"), options.get("state"), self.spellings()
        )
        doctor_cli(report, self.label, self.executable, self.package)
        return not report.problems

    def _doctor_loader(
        self, report: Report, path: Path, text: str, options: dict[str, Any]
    ) -> None:
        report.ok(f"plugin file: {path}")
        python = options.get("python")
        usable = isinstance(python, str) and os.path.isfile(python) and os.access(python, os.X_OK)
        report.check(
            usable,
            f"guard interpreter: {python}",
            "reinstall with the interpreter that has this package: "
            f"dsh-circuit-breaker install {self.name} --python PATH",
        )
        report.check(
            text == loader_text(self.name, self.adapter, options) and self.adapter.is_file(),
            f"adapter: {self.adapter}",
            f"{path} imports another copy of the plugin: run `dsh-circuit-breaker install "
            f"{self.name}` with this environment's dsh-circuit-breaker",
        )

    def doctor_boot(self, report: Report, args: argparse.Namespace) -> None:
        with tempfile.TemporaryDirectory(prefix=f"dsh-cb-{self.name}-doctor-") as scratch:
            root = Path(scratch)
            env = {**os.environ, "DSH_CIRCUIT_BREAKER_READY_FILE": str(root / MARKER)}
            booted = self.boot(self, args, root, env)
        self.report_boot(report, booted)

    def report_boot(self, report: Report, booted: Booted) -> None:
        records = booted.records
        ours = [r for r in records if r.get("pluginFile") == str(self.adapter)]
        if not records:
            report.problem(f"the plugin did not load when {self.label} started")
        elif not ours:
            report.problem(f"{self.label} loaded another copy: {records[0].get('pluginFile')}")
        elif not ours[0].get("ok"):
            report.problem(f"the plugin loaded but its guard did not start: {ours[0].get('error')}")
        else:
            record = ours[0]
            report.ok(
                f"plugin loaded in {self.label}; guard answered (pid {record.get('pid')}, "
                f"{record.get('python')})"
            )
            report.note("effective breaker config: " + json.dumps(record.get("config")))
            if len(ours) > 1 + self.extra_loads:
                report.problem(f"the plugin loaded {len(ours)} times (installed twice?)")
            for note in booted.notes:
                report.note(note)
            return
        tail = "\n".join(booted.output.strip().splitlines()[-15:])
        if tail:
            report.note(f"{self.label} said:\n{tail}")


def _failing(action: Callable[[argparse.Namespace], None], args: argparse.Namespace) -> int:
    """Run an install or uninstall: a problem the user must fix ends it on stderr, exit 1."""
    try:
        action(args)
    except (InstallError, OSError) as exc:
        return error(exc, FAILED)
    return 0


# -- the loader ----------------------------------------------------------------------------


def guard_config(module: Spelled, config_file: str | None) -> tuple[Config, str | None]:
    """The config the guard will load (as that harness's command hook would), and the state
    URL its file names. `ConfigError` for a bad file."""
    return hook_config(config_file, module)


def loader_text(name: str, adapter: Path, options: dict[str, Any]) -> str:
    # JSON is a JavaScript expression, so any path survives as written.
    return "\n".join(
        [
            HEADER.format(name=name) + f"; `uninstall {name}` removes it.",
            "// The adapter is part of the Python package; this file names it and what install",
            "// was given: the interpreter that runs the guard, the config file and the state",
            "// store (null: those the command hooks find). Install again to change them.",
            f"import {{ circuitBreaker }} from {json.dumps(adapter.as_uri())};",
            "",
            f"export default circuitBreaker({json.dumps(options, indent=2, ensure_ascii=False)});",
            "",
        ]
    )


def parse_loader(text: str) -> dict[str, Any]:
    """The options a loader passes to the adapter; ValueError for an edited one."""
    start = text.index("circuitBreaker(", text.index("export default")) + len("circuitBreaker(")
    options = json.loads(text[start : text.rindex(");")])
    if not isinstance(options, dict):
        raise ValueError("the loader's options are not an object; install again to repair it")
    return options


def in_user_dir(directory: Callable[[], Path]) -> Callable[[str, argparse.Namespace], Path]:
    """`plugin_dir` for a harness with one plugin directory, the user's."""
    return lambda scope, args: directory()


# -- doctor's start of the harness ---------------------------------------------------------


def headless_run(start: Headless) -> BootCheck:
    """The boot check of a harness that runs headless and ends by itself: pointed at a
    throwaway model on 127.0.0.1 that only says OK, in a scratch working directory."""

    def boot(
        harness: PluginHarness, args: argparse.Namespace, scratch: Path, env: dict[str, str]
    ) -> Booted:
        with StubModel() as model:
            work = scratch / "work"
            work.mkdir()
            argv, extra = start(scratch, model)
            # OpenCode takes its working directory from $PWD when it is set.
            run_env = {**env, **extra, "PWD": str(work)}
            records, output = run_until_ready(
                argv, run_env, work, scratch, harness.start_timeout, to_exit=True
            )
            requests = model.requests
        notes = (
            ()
            if requests
            else (f"{harness.label} never asked the doctor's model: its run did not start",)
        )
        return Booted(records, output, notes)

    return boot


def run_until_ready(
    argv: list[str], env: dict[str, str], cwd: Path, scratch: Path, timeout: float, to_exit: bool
) -> tuple[list[dict[str, Any]], str]:
    """Start `argv` (its output to a file: no pipe to fill), wait for the ready marker
    (`wait_for_marker`), then end it and what it started. Returns (records, its output)."""
    out = scratch / "output.txt"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its plugin host and our guard go with it
        )
        try:
            records = wait_for_marker(proc, scratch, timeout, to_exit=to_exit)
            ended = proc.poll() is not None
        finally:
            stop(proc)
    said = out.read_text(encoding="utf-8", errors="replace")
    return records, said if ended or records else f"(no exit within {timeout:.0f} s) {said}"


def wait_for_marker(
    proc: subprocess.Popen[bytes],
    scratch: Path,
    timeout: float,
    *,
    to_exit: bool = False,
    booted: Callable[[], bool] | None = None,
) -> list[dict[str, Any]]:
    """The guard clients' ready records once the first is written (`to_exit`: once the
    run has ended, for one that ends by itself and may load its plugins more than once),
    or the process ended, or `timeout` passed, or GRACE seconds after `booted()` first
    said the harness has booted (a plugin still starting its guard gets that moment)."""
    deadline = time.monotonic() + timeout
    grace: float | None = None
    while True:
        ended = proc.poll() is not None
        records = read_markers(scratch / MARKER)
        now = time.monotonic()
        if (records and not to_exit) or ended or now > deadline:
            return records
        if booted is not None and booted():
            grace = grace or now + GRACE
            if now > grace:
                return records
        time.sleep(0.05)


def read_markers(path: Path) -> list[dict[str, Any]]:
    """The whole lines of the ready marker (a client may be writing the last one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.split("\n")[:-1]
    return [json.loads(line) for line in lines if line.strip()]


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a process doctor started, and what it started (its process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def which(executable: str) -> str:
    """The CLI doctor starts (doctor_cli has checked that it is on PATH)."""
    return shutil.which(executable) or executable
