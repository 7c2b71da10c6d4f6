"""`doctor`: one report printer, and the checks every harness shares: the installed
hook command answers the harness's own probe events, the config it would load is valid,
its state store takes a write."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from typing import TYPE_CHECKING, Any

from ..core.config import ConfigError
from ..core.config_file import find_config, hook_config, state_url
from ..core.invocation import HOOK_TIMEOUT
from ..core.stores import StoreUnavailable, store_from_url

if TYPE_CHECKING:  # `_contract` stands on Protocols the kernel declares for mypy only
    from ._contract import Harness


class Report:
    """Collects doctor's findings: each check says ok or exactly what is wrong."""

    def __init__(self) -> None:
        self.problems = 0

    def ok(self, text: str) -> None:
        print(f"ok       {text}")

    def problem(self, text: str, fix: str | None = None) -> None:
        self.problems += 1
        print(f"PROBLEM  {text}")
        if fix:
            print(f"         fix: {fix}")

    def note(self, text: str) -> None:
        print(f"         {text}")

    def check(self, ok: bool, text: str, fix: str | None = None) -> None:
        if ok:
            self.ok(text)
        else:
            self.problem(text, fix)

    def finish(self) -> int:
        print("all good" if not self.problems else f"{self.problems} problem(s)")
        return 1 if self.problems else 0


def doctor_cli(
    report: Report,
    label: str,
    executable: str,
    package: str,
    install: str | None = None,
    timeout: float = HOOK_TIMEOUT,
) -> None:
    """The harness's own CLI is on PATH and answers `--version` within `timeout` seconds;
    `install`: how to install it, where not `npm install -g PACKAGE`."""
    found = shutil.which(executable)
    if found is None:
        report.problem(
            f"{label}: the `{executable}` command is not on PATH",
            f"install {label} ({install or f'npm install -g {package}'}), "
            "or put its directory on PATH",
        )
        return
    try:
        done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=timeout)
        version = (done.stdout.strip() or done.stderr.strip()).splitlines()[:1]
    except (OSError, subprocess.TimeoutExpired) as exc:
        report.problem(f"{label}: `{found} --version` did not run: {exc}")
        return
    report.ok(f"{label} is installed: {found} ({version[0] if version else 'no version printed'})")


def doctor_command(report: Report, command: str, events: list[dict[str, Any]]) -> None:
    """Run an installed hook command as the harness would (through bash) on probe events
    that a working hook allows silently."""
    shell = shutil.which("bash") or "/bin/sh"
    for event in events:
        name = event.get("hook_event_name") or event.get("hookEventName") or "probe"
        try:
            started = time.monotonic()
            done = subprocess.run(
                [shell, "-c", command],
                input=json.dumps(event),
                capture_output=True,
                text=True,
                timeout=HOOK_TIMEOUT,
            )
            elapsed = (time.monotonic() - started) * 1000
        except (OSError, subprocess.TimeoutExpired) as exc:
            report.problem(f"hook command did not run: {command}: {exc}")
            return
        if done.returncode != 0:
            report.problem(
                f"hook command exited {done.returncode} on {name}: {command}",
                f"stderr: {done.stderr.strip()[:500] or '(empty)'}; reinstall with "
                "this environment's `dsh-circuit-breaker install ...`",
            )
            return
        out = done.stdout.strip()
        if out and out != "{}":
            report.problem(f"hook command denied the doctor's probe: {out[:300]}")
            return
        if done.stderr.strip():
            report.problem(f"hook command warned on {name}: {done.stderr.strip()[:500]}")
            return
        report.ok(f"hook command runs ({name} answered in {elapsed:.0f} ms): {command}")


def doctor_config_and_state(
    report: Report, config_path: str | None, state: str | None, harness: Harness | None = None
) -> None:
    """The config the hook would load is valid, and its state store takes a write."""
    try:
        config, file_state = hook_config(config_path, harness)
    except ConfigError as exc:
        report.problem(f"config: {exc}", _config_fix(str(exc)))
        return
    source = find_config(config_path)
    report.ok(f"config valid ({source or 'defaults: no config file'})")
    url = state_url(state, file_state)
    agent = f"dsh-circuit-breaker-doctor-{uuid.uuid4().hex[:12]}"
    try:
        store = store_from_url(url, config)
        try:
            store.transact(agent, lambda s: s.calls)
            store.reset(agent)
        finally:
            store.close()
    except (ConfigError, StoreUnavailable) as exc:
        report.problem(f"state store {url} is not writable: {exc}")
        return
    report.ok(f"state store writable: {url}")
    if config.incident_log:
        report.note(f"incident log: {config.incident_log}")


def _config_fix(message: str) -> str:
    if "needs PyYAML" in message:
        return (
            "install PyYAML into the environment the hook runs in "
            "(pip install 'dsh-circuit-breaker[yaml]', or from a clone: pip install '.[yaml]')"
        )
    if "needs Python 3.11+ or the tomli package" in message:
        return "install tomli into the environment the hook runs in (pip install tomli)"
    return "fix the key named above"
