"""A pytest plugin that keeps a test session away from the person's own files.

At configure time, before any test module is imported, HOME and every XDG base directory
point into a fresh temporary tree, so a default path (the incident log, the state
database, a harness's settings file) can only land there. At the end, the real HOME is
walked once: anything in it whose status changed during the session (a file written, an
entry added, removed or renamed, which changes its directory) fails the run, named. The
repository and pytest's temporary directories are left out, since the suite writes there
by design wherever they are. Another program writing into the same HOME during the run
is reported too: the check cannot tell who wrote. On a machine shared with such programs,
IGNORE_VARIABLE names what they write (glob patterns relative to HOME, separated by `:`,
e.g. `.npm/_logs/*`); the paths it leaves out are still counted in the report's last line.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# Base directories a program finds by environment, each redirected under the scratch HOME.
XDG_HOMES = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state",
    "XDG_CACHE_HOME": ".cache",
    "XDG_RUNTIME_DIR": "run",
}
# Tools found through HOME that the suite runs (pyenv's shims locate their Pythons by
# PYENV_ROOT, else ~/.pyenv): kept pointing at the real install, which tests only read.
TOOL_ROOTS = {"PYENV_ROOT": ".pyenv"}
SHOWN = 20  # changed paths named in the failure
IGNORE_VARIABLE = "DSH_CIRCUIT_BREAKER_TEST_HOME_IGNORE"


class HomeGuard:
    def __init__(self, config: pytest.Config) -> None:
        self.real = Path(os.path.expanduser("~")).resolve()
        self.started = time.time()
        self.scratch = Path(tempfile.mkdtemp(prefix="dsh-cb-test-home-")).resolve()
        self.skip = {self.scratch, Path(str(config.rootpath)).resolve()}
        self.saved = {k: os.environ.get(k) for k in ("HOME", *XDG_HOMES, *TOOL_ROOTS)}
        self.redirect()

    def redirect(self) -> None:
        for name, default in TOOL_ROOTS.items():
            if name not in os.environ and (self.real / default).is_dir():
                os.environ[name] = str(self.real / default)
        os.environ["HOME"] = str(self.scratch)
        for name, relative in XDG_HOMES.items():
            path = self.scratch / relative
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o700)  # XDG_RUNTIME_DIR must be owner-only
            os.environ[name] = str(path)

    def restore(self) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(self.scratch, ignore_errors=True)

    def changed(self) -> tuple[list[str], int]:
        """Paths under the real HOME whose status changed since the session started, and
        how many more IGNORE_VARIABLE's patterns left out."""
        patterns = [p for p in os.environ.get(IGNORE_VARIABLE, "").split(":") if p]
        found, ignored = [], 0
        for path in self._walk(self.real):
            relative = str(path.relative_to(self.real))
            if path == self.real:
                continue
            if any(fnmatch.fnmatch(relative, p) or relative == p.rstrip("/*") for p in patterns):
                ignored += 1
            else:
                found.append(str(path))
        return sorted(found), ignored

    def _walk(self, directory: Path) -> Iterator[Path]:
        try:
            if directory.lstat().st_ctime >= self.started:
                yield directory
            entries = list(os.scandir(directory))
        except OSError:  # unreadable, or gone: nothing to compare inside
            return
        for entry in entries:
            path = Path(entry.path)
            if path in self.skip:
                continue
            try:
                status = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(status.st_mode):
                yield from self._walk(path)
            elif status.st_ctime >= self.started:
                yield path


def pytest_configure(config: pytest.Config) -> None:
    config.stash[KEY] = HomeGuard(config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    guard = session.config.stash[KEY]
    # pytest's own temporary directories are left out of the check, wherever they are.
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        guard.skip.add(factory.getbasetemp().parent.resolve())
    changed, ignored = guard.changed()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if not changed:
        if ignored and reporter is not None:
            reporter.write_line(f"HOME: {ignored} changed path(s) left out by {IGNORE_VARIABLE}")
        return
    lines = [f"the test session changed {len(changed)} path(s) under the real HOME {guard.real}:"]
    lines += [f"  {path}" for path in changed[:SHOWN]]
    if ignored:
        lines.append(f"  (and {ignored} left out by {IGNORE_VARIABLE})")
    lines.append(
        f"(another program writing there during the run? {IGNORE_VARIABLE} names what it writes)"
    )
    if reporter is not None:
        reporter.write_sep("=", "HOME changed", red=True)
        for line in lines:
            reporter.write_line(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    guard = config.stash.get(KEY, None)
    if guard is not None:
        guard.restore()


KEY = pytest.StashKey[HomeGuard]()
