"""install / uninstall / doctor for the JavaScript plugin harnesses (pi, OpenCode, Kilo).

`install` writes one small loader file, `dsh-circuit-breaker.js`, into the directory where
the harness's users put their own plugins (user scope). It imports our adapter
(`js/<harness>.mjs`, shipped in this package) by absolute path and calls it with the
interpreter that runs the guard and the breaker's config as it was at install: the
config file (`--config FILE`, else the user config file, as the command hooks find it)
over the harness's defaults. A harness only discovers `.js`/`.ts` files there, so the
backups (`dsh-circuit-breaker.js.bak-<UTC time>`) beside it are never loaded.

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

from ._doctor import Report, doctor_cli
from ._settings import write_text
from ._stub_model import StubModel

LOADER = "dsh-circuit-breaker.js"
HEADER = "// dsh-circuit-breaker: managed by `dsh-circuit-breaker install {name}`"
SOURCE = "// config: "
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
    exempt: tuple[str, ...]  # its spellings of the tools SPEC exempts
    plugin_dir: Callable[[], Path]  # where its users put plugins
    headless: Headless
    start_timeout: float = 120.0  # seconds doctor gives the headless run

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
        default=sys.executable,
        help="interpreter for the guard process (default: this one)",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="breaker config to write into the plugin (default: $DSH_CIRCUIT_BREAKER_CONFIG, "
        "else the user config file, else the defaults)",
    )
    parser.add_argument(
        "--state",
        default=None,
        metavar="URL",
        help="state store URL (default: memory, one state per harness process)",
    )


class InstallError(Exception):
    """A problem the user must fix; the message says what and where."""


# -- the loader --------------------------------------------------------------------------


def baked_config(
    harness: PluginHarness, config_path: str | None, state: str | None, python: str
) -> tuple[dict[str, Any], str | None]:
    """The plugin's config: the guard client's `python` and `state`, and the breaker's keys
    that differ from SPEC's defaults (the harness's exempt spellings and the incident log
    included); and the config file it came from. `ConfigError` for a bad file."""
    from ..config import DEFAULT_EXEMPT, Config
    from ..config_file import find_config, load
    from ..paths import default_incident_log

    base = Config(exempt=DEFAULT_EXEMPT + harness.exempt, incident_log=default_incident_log())
    source = find_config(config_path)
    loaded = load(source, base=base)
    defaults = Config().to_mapping()
    config: dict[str, Any] = {"python": python}
    if state or loaded.state:
        config["state"] = state or loaded.state
    config.update((k, v) for k, v in loaded.config.to_mapping().items() if v != defaults[k])
    return config, (os.path.abspath(source) if source else None)


def loader_text(harness: PluginHarness, config: dict[str, Any], source: str | None) -> str:
    # JSON is a JavaScript expression, so any path or message survives as written.
    return "\n".join(
        [
            HEADER.format(name=harness.name) + f"; `uninstall {harness.name}` removes it.",
            "// The adapter is part of the Python package; this file names it, the interpreter",
            "// that runs the guard, and the breaker's config as it was at install (install",
            "// again after changing the config).",
            SOURCE + (source or "defaults"),
            f"import {{ circuitBreaker }} from {json.dumps(harness.adapter_path.as_uri())};",
            "",
            f"export default circuitBreaker({json.dumps(config, indent=2, ensure_ascii=False)});",
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


def parse_loader(text: str) -> tuple[dict[str, Any], str | None]:
    """The config a loader passes, and the config file it names (None: the defaults)."""
    start = text.index("circuitBreaker(", text.index("export default")) + len("circuitBreaker(")
    config: dict[str, Any] = json.loads(text[start : text.rindex(");")])
    source = next(
        (line[len(SOURCE) :] for line in text.splitlines() if line.startswith(SOURCE)), ""
    )
    return config, (None if source == "defaults" else source)


# -- install / uninstall -------------------------------------------------------------------


def install(harness: PluginHarness, args: argparse.Namespace) -> int:
    from ..config import ConfigError

    try:
        python = str(Path(args.python).absolute())
        config, source = baked_config(harness, args.config, args.state, python)
        old = read_loader(harness)
        new = loader_text(harness, config, source)
        if config.get("incidentLog"):
            # The guard appends to the log but makes no directories.
            log = Path(os.path.expanduser(config["incidentLog"]))
            log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if new == old:
            print(f"already installed: {harness.loader}")
        else:
            backup = write_text(harness.loader, new, backup=old is not None)
            print(f"installed: {harness.loader}" + (f" (backup: {backup})" if backup else ""))
    except (ConfigError, InstallError, OSError) as exc:
        print(f"dsh-circuit-breaker install {harness.name}: {exc}", file=sys.stderr)
        return 1
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
        print(f"dsh-circuit-breaker uninstall {harness.name}: {exc}", file=sys.stderr)
        return 1
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
    """The loader is there, ours, and names files that exist; its config is current."""
    from ..config import ConfigError

    text = read_loader(harness)
    if text is None:
        report.problem(
            f"not installed: no {harness.loader}", f"dsh-circuit-breaker install {harness.name}"
        )
        return False
    config, source = parse_loader(text)
    report.ok(f"plugin file: {harness.loader}")
    python = config.get("python")
    report.check(
        isinstance(python, str) and os.access(python, os.X_OK),
        f"guard interpreter: {python}",
        "reinstall with the interpreter that has this package: "
        f"dsh-circuit-breaker install {harness.name}",
    )
    report.check(harness.adapter_path.is_file(), f"adapter: {harness.adapter_path}")
    try:
        current, _ = baked_config(harness, source, config.get("state"), str(python))
    except ConfigError as exc:
        report.problem(f"config: {exc}", "fix the key named above, then install again")
        return False
    report.check(
        current == config,
        f"plugin config matches {source or 'the defaults'}",
        f"the config changed since install: dsh-circuit-breaker install {harness.name}"
        + (f" --config {source}" if source else ""),
    )
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
        if len(ours) > 1:
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
