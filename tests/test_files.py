"""Our files on a machine shared with other users: the state file and the incident log are
never followed through a symlink, never a FIFO, never another user's, never in a directory
others can write; a config file is read only if it is a regular file of a config's size.
Each refusal allows the call with one line, and never hangs."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config, ConfigError
from dsh_circuit_breaker.core.config_file import ENV_CONFIG, MAX_CONFIG_BYTES, load
from dsh_circuit_breaker.core.state import AgentState
from hook_support import denial, hook_env, pre_tool_use, run_hook

NOBODY = 65534  # another user, for the tests that need one (as root, via chown)


def _need_root() -> None:
    require(os.geteuid() == 0, "root (to give files to another user with chown)")


@pytest.fixture
def quiet(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level("WARNING", logger="dsh_circuit_breaker"):
        yield caplog


def _trip(log: Path) -> list[bool]:
    """Six identical calls: the sixth is denied (duplicateLimit 6 counts it), and its
    denial is logged."""
    breaker = CircuitBreaker(Config(incident_log=str(log)))
    return [breaker.check("a", "t", {}).allowed for _ in range(6)]


def _in_time(target: Any, limit: float) -> Any:
    """`target()` in a thread; fails (instead of hanging the test) if it blocks."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append((target(), None))
        except Exception as exc:
            out.append((None, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=limit)
    assert out, f"still blocked after {limit}s"
    value, error = out[0]
    if error is not None:
        raise error
    return value


# -- the incident log ------------------------------------------------------------------


def test_symlinked_incident_log_is_not_followed(tmp_path: Path, quiet: Any) -> None:
    bashrc = tmp_path / "bashrc"
    bashrc.write_text("export PATH=/usr/bin\n")
    log = tmp_path / "state" / "incidents.jsonl"
    log.parent.mkdir(mode=0o700)
    log.symlink_to(bashrc)
    assert _trip(log) == [True] * 5 + [False]  # the decision itself is unaffected
    assert bashrc.read_text() == "export PATH=/usr/bin\n"
    assert "is a symbolic link; it is not followed" in quiet.text


def test_hard_link_as_incident_log_is_refused(tmp_path: Path, quiet: Any) -> None:
    other = tmp_path / "bashrc"
    other.write_text("keep\n")
    log = tmp_path / "incidents.jsonl"
    os.link(other, log)
    assert _trip(log)[-1] is False
    assert other.read_text() == "keep\n" and "hard links" in quiet.text


@pytest.mark.parametrize("reader", [False, True], ids=["no-reader", "with-reader"])
def test_fifo_as_incident_log_never_holds_the_denial(
    tmp_path: Path, quiet: Any, reader: bool
) -> None:
    log = tmp_path / "incidents.jsonl"
    os.mkfifo(log)
    # With a reader attached, a blocking open would succeed and write into the pipe.
    held = os.open(log, os.O_RDONLY | os.O_NONBLOCK) if reader else None
    try:
        assert _in_time(lambda: _trip(log), 10) == [True] * 5 + [False]
        if held is not None:
            assert os.read(held, 1) == b""  # nothing was written into the pipe
    finally:
        unblock = held if held is not None else os.open(log, os.O_RDONLY | os.O_NONBLOCK)
        os.close(unblock)  # (for an old version stuck in open(): it gets its reader)
    assert "cannot write incident log" in quiet.text


def test_loose_incident_log_of_ours_is_tightened(tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    log.touch()
    log.chmod(0o666)
    assert _trip(log)[-1] is False
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert json.loads(log.read_text())["kind"] == "duplicate"


def test_incident_log_of_another_user_or_in_a_shared_directory_is_refused(
    tmp_path: Path, quiet: Any
) -> None:
    _need_root()
    theirs = tmp_path / "theirs.jsonl"
    theirs.touch()
    os.chown(theirs, NOBODY, NOBODY)
    theirs.chmod(0o666)  # pre-created by the other user, to receive our incidents
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    for log in (theirs, shared / "incidents.jsonl"):
        assert _trip(log)[-1] is False
    assert theirs.read_text() == "" and not (shared / "incidents.jsonl").exists()
    assert "belongs to uid 65534" in quiet.text and "writable by other users" in quiet.text


# -- the state file and its directory ----------------------------------------------------


def _state_dir(home: Path) -> Path:
    return home / "state" / "dsh-circuit-breaker"


def _capped_record() -> bytes:
    state = AgentState()
    state.calls = 10_000
    state.updated = time.time()
    return state.dumps()


def test_symlinked_state_file_is_not_followed(tmp_path: Path, quiet: Any) -> None:
    target = tmp_path / "elsewhere.db"
    target.write_bytes(b"")
    link = tmp_path / "state.db"
    link.symlink_to(target)
    breaker = CircuitBreaker(Config(), state=f"sqlite:///{link}")
    assert breaker.check("a", "t", {}).allowed
    assert target.read_bytes() == b""
    assert "state file not used" in quiet.text and "symbolic link" in quiet.text


@pytest.mark.parametrize("side", ["-wal", "-shm"])
def test_symlinked_wal_or_shm_is_not_followed(tmp_path: Path, quiet: Any, side: str) -> None:
    target = tmp_path / "bashrc"
    target.write_text("keep\n")
    (tmp_path / f"state.db{side}").symlink_to(target)
    breaker = CircuitBreaker(Config(), state=f"sqlite:///{tmp_path}/state.db")
    assert breaker.check("a", "t", {}).allowed
    assert target.read_text() == "keep\n" and "symbolic link" in quiet.text


def test_fifo_as_state_file_does_not_hang(tmp_path: Path, quiet: Any) -> None:
    fifo = tmp_path / "state.db"
    os.mkfifo(fifo)
    breaker = CircuitBreaker(Config(), state=f"sqlite:///{fifo}")
    assert _in_time(lambda: breaker.check("a", "t", {}).allowed, 10)
    assert "not a regular file" in quiet.text


def test_state_directory_writable_by_others_is_refused(tmp_path: Path, quiet: Any) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    breaker = CircuitBreaker(Config(), state=f"sqlite:///{shared}/state.db")
    assert all(breaker.check("a", "t", {}).allowed for _ in range(8))  # fails open
    assert not (shared / "state.db").exists()
    assert "writable by other users (mode 777)" in quiet.text


def test_state_directory_of_another_user_is_refused(tmp_path: Path, quiet: Any) -> None:
    _need_root()
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    breaker = CircuitBreaker(Config(), state=f"sqlite:///{theirs}/state.db")
    assert breaker.check("a", "t", {}).allowed
    assert "belongs to uid 65534" in quiet.text


def test_state_file_of_another_user_is_refused(tmp_path: Path, quiet: Any) -> None:
    _need_root()
    db = tmp_path / "state.db"
    db.touch()
    os.chown(db, NOBODY, NOBODY)
    assert CircuitBreaker(Config(), state=f"sqlite:///{db}").check("a", "t", {}).allowed
    assert "belongs to uid 65534" in quiet.text


def test_what_is_ours_is_made_owner_only(tmp_path: Path) -> None:
    """An existing 0755 state directory and 0644 state.db, -wal and -shm (left by an old
    version or a loose umask) are tightened to 0700 and 0600."""
    home = tmp_path / "home"
    directory = _state_dir(home)
    directory.mkdir(parents=True, mode=0o755)
    directory.chmod(0o755)
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (directory / name).touch()
        (directory / name).chmod(0o644)
    result = run_hook(pre_tool_use(), hook_env(home))
    assert result.returncode == 0 and result.stderr == ""
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for path in directory.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_umask_000_still_creates_owner_only_directories(tmp_path: Path) -> None:
    home = tmp_path / "home"
    old = os.umask(0)
    try:
        assert run_hook(pre_tool_use(), hook_env(home)).stderr == ""
        _trip(home / "elsewhere" / "logs" / "incidents.jsonl")
    finally:
        os.umask(old)
    for directory in (home / "state", _state_dir(home)):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    for path in _state_dir(home).iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_other_users_shared_state_home_cannot_forge_or_redirect(tmp_path: Path) -> None:
    """The attack of issue 11: XDG_STATE_HOME is a 0777 directory another user made. That
    user pre-creates our state directory with a forged state.db (our session capped) and
    an incident log pointing at our ~/.bashrc. Our hook must not be denied by the forgery
    nor write to the link: it allows, with one line, and touches nothing."""
    _need_root()
    home = tmp_path / "home"
    bashrc = home / ".bashrc"
    bashrc.parent.mkdir()
    bashrc.write_text("export PATH=/usr/bin\n")
    shared = home / "state"
    theirs = _state_dir(home)
    theirs.mkdir(parents=True)
    forged = sqlite3.connect(theirs / "state.db")
    forged.executescript(
        "CREATE TABLE agents (agent TEXT PRIMARY KEY, updated REAL NOT NULL, state BLOB NOT NULL);"
        "CREATE INDEX agents_updated ON agents (updated); PRAGMA user_version=1;"
    )
    forged.execute("INSERT INTO agents VALUES ('sess-1', ?, ?)", (time.time(), _capped_record()))
    forged.commit()
    forged.close()
    (theirs / "incidents.jsonl").symlink_to(bashrc)
    for path in (shared, theirs, theirs / "state.db"):
        os.chown(path, NOBODY, NOBODY)
        path.chmod(0o777)
    os.lchown(theirs / "incidents.jsonl", NOBODY, NOBODY)
    env = hook_env(home)
    results = [run_hook(pre_tool_use(), env) for _ in range(8)]
    assert all(denial(r.stdout) is None for r in results)  # not "capped" by the forgery
    assert all(r.returncode == 0 and len(r.stderr.splitlines()) == 1 for r in results)
    assert "belongs to uid 65534" in results[0].stderr
    assert bashrc.read_text() == "export PATH=/usr/bin\n"
    # Our own directory, once it is ours again, works as usual.
    for path in (theirs / "incidents.jsonl", theirs / "state.db"):
        path.unlink()
    theirs.rmdir()
    results = [run_hook(pre_tool_use(), env) for _ in range(6)]
    assert [denial(r.stdout) is None for r in results] == [True] * 5 + [False]
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o700
    assert bashrc.read_text() == "export PATH=/usr/bin\n"


# -- the config file ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "directory", "too large"])
def test_config_that_is_not_a_small_regular_file_fails_at_once(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "config.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "too large":
        path.write_text('{"window": 200' + " " * MAX_CONFIG_BYTES + "}")
    name = "/dev/zero" if kind == "/dev/zero" else str(path)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="config file"):
        _in_time(lambda: load(name), 10)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("how", ["--config", ENV_CONFIG])
def test_hook_with_a_fifo_or_dev_zero_config_allows_with_one_line(tmp_path: Path, how: str) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    home = tmp_path / "home"
    for config in (str(fifo), "/dev/zero"):
        if how == "--config":
            result = run_hook(pre_tool_use(), hook_env(home), "--config", config)
        else:
            result = run_hook(pre_tool_use(), hook_env(home, **{ENV_CONFIG: config}))
        assert result.returncode == 0 and result.stdout == ""
        assert len(result.stderr.splitlines()) == 1 and config in result.stderr


def test_yaml_alias_bomb_is_refused_quickly_with_a_short_message(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for n, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[n]
        levels.append(f"{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    path = tmp_path / "config.yaml"
    path.write_text("\n".join(levels) + "\nexempt: *i\n")
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load(str(path))
    assert time.monotonic() - started < 2
    assert len(str(caught.value)) < 500
