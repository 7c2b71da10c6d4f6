"""What the SQLite store adds to the shared contract: a file that outlives a process,
owner-only permissions, idle expiry, no argument content on disk, and failing open
(as StoreUnavailable) when the file cannot be used."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dsh_circuit_breaker import CircuitBreaker, Config, ConfigError
from dsh_circuit_breaker.core.files import default_state_url
from dsh_circuit_breaker.core.state import AgentState
from dsh_circuit_breaker.core.stores import StoreUnavailable, store_from_url
from dsh_circuit_breaker.core.stores.sqlite import EXPIRE_BATCH, SQLiteStore, path_from_url
from hook_support import make_read_only

SECRET = "hunter2-secret-argument-value"


def test_url_convention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert path_from_url("sqlite:///relative.db") == "relative.db"
    assert path_from_url("sqlite:////abs/path/state.db") == "/abs/path/state.db"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    expected = str(tmp_path / "xdg" / "dsh-circuit-breaker" / "state.db")
    assert path_from_url("sqlite://") == expected
    assert default_state_url() == "sqlite:///" + expected
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert path_from_url("sqlite://") == str(
        tmp_path / "home" / ".local" / "state" / "dsh-circuit-breaker" / "state.db"
    )
    for bad in ("sqlite://host/x.db", "sqlite:///"):
        with pytest.raises(ConfigError):
            path_from_url(bad)


def test_state_survives_the_process_and_is_shared(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    call = {"command": "echo cbprobe4"}
    first = CircuitBreaker(Config(), state=url)
    assert all(first.check("s1", "Bash", call).allowed for _ in range(4))
    first.close()
    # A second breaker (as a second hook process would) continues the same count.
    second = CircuitBreaker(Config(), state=url)
    assert [second.check("s1", "Bash", call).allowed for _ in range(2)] == [True, False]
    assert second.check("s2", "Bash", call).allowed
    second.close()


def test_files_are_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = tmp_path / "new" / "dir" / "state.db"
        store = SQLiteStore(str(path))
        CircuitBreaker(Config(), state=store).check("a", "Bash", {"command": "ls"})
        store.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for side in path.parent.iterdir():  # -wal and -shm, if still there
        assert stat.S_IMODE(side.stat().st_mode) == 0o600, side


def test_no_argument_content_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    breaker = CircuitBreaker(Config(), state=f"sqlite:///{path}")
    for _ in range(8):
        breaker.check(f"agent-{SECRET}"[:7], "Bash", {"command": f"curl -H 'token: {SECRET}'"})
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    breaker.close()
    assert data  # the store did write
    assert SECRET.encode() not in data
    assert b"curl" not in data


def test_idle_agents_expire_and_are_deleted(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    config = Config(max_calls_per_agent=2, window=6, idle_expiry_seconds=3600)
    store = SQLiteStore(str(path), config)
    breaker = CircuitBreaker(config, state=store)
    for i in range(2):
        assert breaker.check("old", "t", {"i": i}).allowed
    assert not breaker.check("old", "t", {"i": 9}).allowed  # capped...
    assert breaker.check("other", "t", {}).allowed
    with sqlite3.connect(path) as db:  # ...then idle for two hours
        db.execute("UPDATE agents SET updated = ? WHERE agent = 'old'", (time.time() - 7200,))
    assert [a for a, _ in store.agents()] == ["other"]  # expired agents are not listed
    assert breaker.check("new", "t", {}).allowed  # any decision sweeps expired rows
    with sqlite3.connect(path) as db:
        rows = {r[0] for r in db.execute("SELECT agent FROM agents")}
    assert rows == {"other", "new"}
    assert breaker.check("old", "t", {"i": 9}).allowed  # a fresh start after expiry
    breaker.close()


def test_capped_agent_stays_capped_across_processes_until_expiry(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    config = Config(max_calls_per_agent=1, window=6)
    one = CircuitBreaker(config, state=url)
    assert one.check("a", "t", {"i": 1}).allowed
    one.close()
    two = CircuitBreaker(config, state=url)
    decision = two.check("a", "t", {"i": 2})
    assert (decision.allowed, decision.kind) == (False, "cap")
    two.close()


def test_agents_lists_states(tmp_path: Path) -> None:
    store = store_from_url(f"sqlite:///{tmp_path}/s.db", Config())
    breaker = CircuitBreaker(Config(), state=store)
    breaker.check("a", "t", {"x": 1})
    breaker.check("a", "t", {"x": 1})
    breaker.check("b", "t", {"x": 1})
    listed = dict(store.agents())
    assert set(listed) == {"a", "b"}
    assert isinstance(listed["a"], AgentState)
    assert (listed["a"].calls, listed["b"].calls) == (2, 1)
    breaker.close()


def test_read_only_directory_fails_open(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    locked = tmp_path / "ro"
    locked.mkdir()
    undo = make_read_only(locked)
    if undo is None:
        pytest.skip("cannot make a directory read-only for root here (no mount, no chattr)")
    try:
        breaker = CircuitBreaker(Config(), state=f"sqlite:///{locked}/state.db")
        with caplog.at_level(logging.WARNING, "dsh_circuit_breaker"):
            assert all(breaker.check("a", "t", {}).allowed for _ in range(10))
    finally:
        undo()
    assert "unavailable" in caplog.text


def test_unusable_path_raises_store_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = SQLiteStore(str(blocker / "state.db"))  # a path under a regular file
    with pytest.raises(StoreUnavailable):
        store.transact("a", lambda s: s.calls)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreUnavailable):
        SQLiteStore(str(garbage)).transact("a", lambda s: s.calls)


def test_lock_wait_past_budget_fails_open_or_closed(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SQLiteStore(str(path)).transact("a", lambda s: None)  # create the file
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        open_breaker = CircuitBreaker(Config(store_timeout=0.2), state=f"sqlite:///{path}")
        started = time.monotonic()
        assert open_breaker.check("a", "t", {}).allowed
        assert time.monotonic() - started < 2.0  # waited about the budget, not forever
        closed = CircuitBreaker(
            Config(store_timeout=0.2, fail_closed=True), state=f"sqlite:///{path}"
        )
        decision = closed.check("a", "t", {})
        assert (decision.allowed, decision.kind) == (False, "unavailable")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert CircuitBreaker(Config(), state=f"sqlite:///{path}").check("a", "t", {}).allowed


def _expired_rows(path: Path, count: int) -> None:
    """`count` agents idle for two weeks, as a busy machine leaves behind."""
    record = AgentState().dumps()
    long_ago = time.time() - 14 * 24 * 3600
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO agents (agent, updated, state) VALUES (?, ?, ?)",
            ((f"gone-{i}", long_ago, record) for i in range(count)),
        )


def test_expiry_deletes_a_few_rows_per_decision(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(str(path))
    store.transact("first", lambda s: None)
    _expired_rows(path, 1000)
    breaker = CircuitBreaker(Config(), state=store)
    assert breaker.check("a", "t", {}).allowed
    with sqlite3.connect(path) as db:
        left = db.execute("SELECT count(*) FROM agents WHERE agent LIKE 'gone-%'").fetchone()[0]
    assert left == 1000 - EXPIRE_BATCH
    for i in range(1000 // EXPIRE_BATCH):
        breaker.check("a", "t", {"i": i})
    with sqlite3.connect(path) as db:
        assert {r[0] for r in db.execute("SELECT agent FROM agents")} == {"first", "a"}
    breaker.close()


def test_mass_expiry_does_not_lock_out_concurrent_hooks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """16 hooks decide at once on a file holding 300,000 expired agents: none of them may
    wait past its budget for the one that happens to sweep them."""
    path = tmp_path / "state.db"
    SQLiteStore(str(path)).transact("first", lambda s: None)
    _expired_rows(path, 300_000)
    config = Config(store_timeout=0.5)
    breakers = [CircuitBreaker(config, state=f"sqlite:///{path}") for _ in range(16)]
    barrier = threading.Barrier(16)
    allowed: list[bool] = []

    def hook(breaker: CircuitBreaker, n: int) -> None:
        barrier.wait()
        allowed.append(breaker.check("shared", "t", {"n": n}).allowed)

    threads = [threading.Thread(target=hook, args=(b, n)) for n, b in enumerate(breakers)]
    with caplog.at_level(logging.WARNING, "dsh_circuit_breaker"):
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert allowed == [True] * 16
    assert "unavailable" not in caplog.text  # no "database is locked"
    assert dict(breakers[0].store.agents())["shared"].calls == 16  # every one was counted
    for breaker in breakers:
        breaker.close()


def test_processes_that_never_close_keep_the_wal_short(tmp_path: Path) -> None:
    """A command hook ends with os._exit, its connection still open. SQLite restarts
    the WAL only after a checkpoint that the same connection (or a live one) saw, so
    with nothing but such processes it would grow by every decision and each process
    would read all of it: the store empties it once it has passed WAL_LIMIT. Every
    count stays exact."""
    path = tmp_path / "state.db"
    page = 4096 + 24  # a WAL frame: one page and its header
    code = (
        "import os, sys\n"
        "from dsh_circuit_breaker.core.stores import sqlite\n"
        f"sqlite.WAL_LIMIT = {4 * page}  # a few frames, so that a few processes pass it\n"
        "def step(state):\n"
        "    state.calls += 1\n"
        "    return state.calls\n"
        "store = sqlite.SQLiteStore(sys.argv[1])  # held to the end, as the hook holds it\n"
        "print(store.transact('agent', step), flush=True)\n"
        "os._exit(0)  # as the hook ends: no close, no checkpoint at close\n"
    )
    counts, sizes = [], []
    for _ in range(24):
        counts.append(int(_process(code, path)))
        sizes.append(os.path.getsize(f"{path}-wal"))
    assert counts == list(range(1, 25))
    assert 0 in sizes  # emptied at least once
    assert max(sizes) < 10 * page, sizes  # without it: two frames more for every process


def test_emptying_the_wal_waits_for_no_reader(tmp_path: Path) -> None:
    """A reader on an older snapshot keeps the WAL from being emptied: the process that
    would empty it commits its decision and ends at once, not after its store timeout
    (other writers would wait on it all that time)."""
    path = tmp_path / "state.db"
    page = 4096 + 24
    code = (
        "import os, sys, time\n"
        "from dsh_circuit_breaker import Config\n"
        "from dsh_circuit_breaker.core.stores import sqlite\n"
        f"sqlite.WAL_LIMIT = {page}\n"
        "store = sqlite.SQLiteStore(sys.argv[1], Config(store_timeout=20))\n"
        "def step(state):\n"
        "    state.calls += 1\n"
        "    return state.calls\n"
        "started = time.monotonic()\n"
        "calls = store.transact('agent', step)\n"
        "print(calls, time.monotonic() - started, flush=True)\n"
        "os._exit(0)\n"
    )

    def one() -> tuple[int, float]:
        calls, seconds = _process(code, path).split()
        return int(calls), float(seconds)

    while not os.path.exists(f"{path}-wal") or os.path.getsize(f"{path}-wal") <= page:
        one()
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    before = reader.execute("SELECT count(*) FROM agents").fetchone()[0]
    calls, seconds = one()
    assert seconds < 10, seconds  # 20 with a busy timeout
    assert os.path.getsize(f"{path}-wal") > page  # not emptied under the reader
    reader.execute("COMMIT")
    reader.close()
    assert before == 1
    assert one()[0] == calls + 1


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_long_lived_store_follows_its_file_when_it_is_removed(tmp_path: Path, how: str) -> None:
    """The guard keeps one store open; someone deletes (or replaces) state.db: the guard
    and the hooks, which open the path afresh, count in the same file again."""
    path = tmp_path / "state.db"
    config = Config(duplicate_limit=7)
    guard = CircuitBreaker(config, SQLiteStore(str(path), config))
    for _ in range(3):
        assert guard.check("agent", "bash", {"command": "same"}).allowed
    path.unlink()
    for side in ("-wal", "-shm"):
        Path(str(path) + side).unlink(missing_ok=True)
    if how == "replaced":
        path.write_bytes(b"")
        path.chmod(0o600)
    runs = []
    for n in range(10):  # alternately a hook (a new process's store) and the guard
        if n % 2:
            runs.append(guard.check("agent", "bash", {"command": "same"}).allowed)
        else:
            hook = CircuitBreaker(config, SQLiteStore(str(path), config))
            runs.append(hook.check("agent", "bash", {"command": "same"}).allowed)
            hook.close()
    assert runs == [True] * 6 + [False] * 4  # one count of 6, not one per file
    guard.close()


@pytest.mark.timeout(60)
def test_threads_share_commits_and_every_count_is_exact(tmp_path: Path) -> None:
    """Group commit: 8 threads' decisions go in shared transactions, and none is lost or
    doubled (4 agents, 2 threads each)."""
    store = SQLiteStore(str(tmp_path / "state.db"))
    commits: list[int] = []
    original = store._run

    def counted(batch: list[object]) -> None:
        commits.append(len(batch))
        original(batch)  # type: ignore[arg-type]

    store._run = counted  # type: ignore[method-assign]

    def step(state: AgentState) -> int:
        state.calls += 1
        return state.calls

    def worker(agent: str, seen: list[int]) -> None:
        for _ in range(150):
            seen.append(store.transact(agent, step))

    seen: dict[int, list[int]] = {n: [] for n in range(8)}
    threads = [threading.Thread(target=worker, args=(f"a{n % 4}", seen[n])) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(50)
    for agent in range(4):
        values = sorted(seen[agent] + seen[agent + 4])
        assert values == list(range(1, 301)), f"agent a{agent}"
    assert sum(commits) == 8 * 150
    assert len(commits) < 8 * 150, "every decision committed alone: no group commit"


@pytest.mark.timeout(30)
def test_a_failing_step_in_a_batch_writes_nothing_and_spares_the_others(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "state.db"))
    store.transact("a", lambda state: setattr(state, "calls", 5))
    results: dict[str, object] = {}

    def bad(state: AgentState) -> None:
        state.calls = 99
        raise RuntimeError("a bug in a step")

    def good(state: AgentState) -> int:
        state.calls += 1
        return state.calls

    def run(name: str, agent: str, step: object) -> None:
        try:
            results[name] = store.transact(agent, step)  # type: ignore[arg-type]
        except Exception as exc:
            results[name] = exc

    # Holding the store's lock makes all three queue, so one batch takes them together.
    with store._lock:
        threads = [
            threading.Thread(target=run, args=args)
            for args in (("first", "a", good), ("bad", "a", bad), ("last", "a", good))
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while len(store._queue) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(store._queue) == 3
    for thread in threads:
        thread.join(10)
    assert isinstance(results["bad"], RuntimeError)
    assert sorted([results["first"], results["last"]]) == [6, 7]  # type: ignore[type-var]
    assert store.transact("a", lambda state: state.calls) == 7


@pytest.mark.timeout(30)
def test_a_state_kept_in_memory_never_hides_another_writer(tmp_path: Path) -> None:
    """A long-lived store reuses the state it wrote last only while the row is that very
    record: another process's write in between is read, and a corrupt row starts afresh."""
    path = str(tmp_path / "state.db")
    guard, hook = SQLiteStore(path), SQLiteStore(path)

    def count(state: AgentState) -> int:
        state.calls += 1
        return state.calls

    assert [guard.transact("a", count) for _ in range(3)] == [1, 2, 3]
    assert hook.transact("a", count) == 4
    assert guard.transact("a", count) == 5
    with sqlite3.connect(path) as db:
        db.execute("UPDATE agents SET state = ? WHERE agent = 'a'", (b"{not json",))
    assert guard.transact("a", count) == 1  # afresh, and the record replaced
    assert hook.transact("a", count) == 2
    hook.reset("a")
    assert guard.transact("a", count) == 1


def _process(code: str, path: Path) -> str:
    """What `code`, run by a process of its own on the store file `path`, printed."""
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout
