"""`sqlite://`: agent state in one SQLite file that many processes share.

A command hook is a new process for every tool call, and several may run at once
(parallel subagents; Codex starts matching hooks concurrently). So each decision is one
`BEGIN IMMEDIATE` transaction: the first writer takes the file's write lock before it
reads, the others wait for it (busy timeout), so no count is ever lost or doubled. WAL
keeps readers (`status`) off the writers' backs, and a process killed halfway leaves an
uncommitted WAL tail that SQLite discards: the store stays at the last committed state.

URLs follow SQLAlchemy's convention: `sqlite:///relative.db`, `sqlite:////abs/state.db`;
`sqlite://` alone is the default file in the user's state directory.
"""

from __future__ import annotations

import _thread
import os
import time

try:
    # The C module alone: `sqlite3` re-exports it, plus datetime adapters this store
    # never uses; importing them costs a hook process ~1.5 ms on every tool call.
    import _sqlite3 as sqlite3
except ImportError:  # pragma: no cover - an interpreter without the split module
    import sqlite3  # type: ignore[no-redef,unused-ignore]

from ..config import Config, ConfigError, shown
from ..files import (
    Unsafe,
    check_private,
    default_state_dir,
    default_state_path,
    open_private,
    private_directory,
)
from ..state import AgentState
from .unavailable import StoreUnavailable

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs a hook process more than its whole decision
    from collections.abc import Callable, Iterator
    from typing import Any, TypeVar

    T = TypeVar("T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS agents ("
    " agent TEXT PRIMARY KEY, updated REAL NOT NULL, state BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS agents_updated ON agents (updated)",
)
EXPIRE_BATCH = 64
SEEN_AGENTS = 1024  # agents whose last written state a long-lived process keeps
# Whether any row expired: an index probe, a quarter of what the DELETE costs to run.
_EXPIRED = "SELECT 1 FROM agents WHERE updated < ? LIMIT 1"
_EXPIRE = (
    "DELETE FROM agents WHERE rowid IN"
    f" (SELECT rowid FROM agents WHERE updated < ? LIMIT {EXPIRE_BATCH})"
)
# A WAL larger than this (about 128 pages) when a process opens the file is emptied by
# that process once its decision is committed (see `_empty_wal`).
WAL_LIMIT = 512 * 1024


def path_from_url(url: str) -> str:
    """The file a `sqlite://` URL names (SQLAlchemy's convention: three slashes, then
    the path, so an absolute path makes four)."""
    scheme, sep, rest = url.partition("://")
    if scheme != "sqlite" or not sep:
        raise ConfigError(f"not a sqlite URL: {shown(url)}")
    rest, mark, _ = rest.partition("?")
    if mark:
        raise ConfigError(f"state URL {shown(url)}: a sqlite URL takes no parameters")
    if rest == "":
        return default_state_path()
    if not rest.startswith("/"):
        raise ConfigError(
            f"state URL {shown(url)}: use sqlite:///relative.db or sqlite:////absolute/path.db"
        )
    path = rest[1:]
    if not path:
        raise ConfigError(f"state URL {shown(url)} names no file")
    return os.path.expanduser(path)


def from_url(url: str, config: Config) -> SQLiteStore:
    return SQLiteStore(path_from_url(url), config)


class SQLiteStore:
    """One row per agent: its `AgentState.dumps()` record (digests and counters only).

    The file is opened lazily, on the first call that needs it, so that an unusable
    path (a read-only directory, a full disk) surfaces as `StoreUnavailable` from a
    decision, where the breaker fails open, rather than as a crash while starting up.
    """

    def __init__(self, path: str, config: Config | None = None) -> None:
        config = config or Config()
        self.path = path
        self.timeout = config.store_timeout
        self.expiry = config.idle_expiry_seconds
        self._db: sqlite3.Connection | None = None
        self._file = (0, 0)  # (st_dev, st_ino) of the file `_db` has open
        self._wal_full = False  # the WAL was past WAL_LIMIT when `_db` was opened
        # One connection per store; threads of one process take turns on it (SQLite's
        # file lock orders processes, this lock orders threads within one).
        self._lock = _thread.allocate_lock()  # `threading` costs a hook process an import
        self._queued = _thread.allocate_lock()  # guards `_queue` alone, held for an append
        self._queue: list[_Pending] = []
        # agent -> (its state as this process last wrote it, that record): a decision
        # that reads back the very record reuses the state rather than parsing it. The
        # row is still read in the transaction, so another writer's record is never
        # missed; only an identical one is skipped.
        self._seen: dict[str, tuple[AgentState, bytes]] = {}

    # -- the Store protocol ------------------------------------------------------------
    def transact(self, agent: str, step: Callable[[AgentState], T]) -> T:
        """Group commit: the thread that takes the lock runs every decision queued by then
        in one transaction, and each thread has its answer only once that commits. So
        threads of one process (the guard's workers) share one commit and one wait for the
        file lock; a process with one thread (a command hook) commits alone, as before."""
        mine = _Pending(agent, step)
        with self._queued:
            self._queue.append(mine)
        with self._lock:
            if not mine.done:
                with self._queued:
                    batch, self._queue = self._queue, []
                self._run(batch)
        if mine.error is not None:
            raise mine.error
        return mine.value  # type: ignore[no-any-return]

    def _run(self, batch: list[_Pending]) -> None:
        failure = "interrupted"  # what every caller is told unless the batch commits
        try:
            db = self._connect()
            db.execute("BEGIN IMMEDIATE")
            try:
                now = time.time()
                for pending in batch:
                    self._decide(db, pending, now)
                # Expired rows go in the same transaction, a few at a time: the index
                # makes this a short range probe, so no decision holds the write lock for
                # long however many agents expired at once (a million rows in one DELETE
                # take seconds, and every other hook would give up waiting). The file
                # still never grows with agents long gone: a decision adds one row at most.
                cutoff = now - self.expiry
                if db.execute(_EXPIRED, (cutoff,)).fetchone() is not None:
                    db.execute(_EXPIRE, (cutoff,))
                db.execute("COMMIT")
                failure = ""
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            failure = str(exc)
        finally:
            for pending in batch:
                if failure and pending.error is None:  # nothing of the batch was kept
                    pending.error = StoreUnavailable(f"sqlite {self.path}: {failure}")
                pending.done = True
        if not failure and self._wal_full:
            self._empty_wal(db)

    def _empty_wal(self, db: sqlite3.Connection) -> None:
        """Checkpoint the WAL into the file and truncate it, once this process's decisions
        are committed.

        SQLite empties the WAL when the last connection closes, and a command hook never
        closes its own (`hook.main` ends with `os._exit`). A WAL that no connection holds
        open is recovered by the next process to open the file: it reads every frame, and
        forgets what a checkpoint had already copied, so the WAL would never restart and
        grow by every decision, each process reading all of it (about a millisecond per
        thousand frames) and, past SQLite's autocheckpoint, checkpointing it all again.
        So the frames are first copied by a PASSIVE checkpoint, which blocks no one
        (writers go on appending meanwhile); only once every frame is in the file does a
        TRUNCATE checkpoint reset the WAL, which then has little or nothing left to copy:
        it holds up new writers only that long, never for a copy of a WAL of megabytes (as
        an older version, or a mass write, leaves behind). Each checkpoint costs fsyncs
        (NORMAL syncs at checkpoints only), once every WAL_LIMIT bytes of decisions. Both
        wait for nobody (no busy timeout while they run): a TRUNCATE that waited on a
        reader would hold up every other hook too. If another process is reading or
        writing, the decision stands as committed and a later process empties the WAL.
        One that finds the WAL emptied by another since it opened the file does nothing."""
        self._wal_full = False
        try:  # another process may have emptied it since: then each truncation would
            # hold up the writers again, for nothing (many hooks open a full WAL at once)
            if os.lstat(self.path + "-wal").st_size <= WAL_LIMIT:
                return
        except OSError:
            return
        try:
            db.execute("PRAGMA busy_timeout = 0")
            try:
                busy, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if not busy and copied == frames:
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                db.execute(f"PRAGMA busy_timeout = {round(self.timeout * 1000)}")
        except sqlite3.Error:
            pass

    def _decide(self, db: sqlite3.Connection, pending: _Pending, now: float) -> None:
        """One decision of a batch. A step that raises writes nothing (its agent's row
        stays as it was, for the rest of the batch too) and its caller has the error;
        SQLite's own errors end the whole batch."""
        agent = pending.agent
        row = db.execute("SELECT updated, state FROM agents WHERE agent = ?", (agent,)).fetchone()
        # Taken, not copied: a step that raises leaves nothing behind to be reused.
        seen = self._seen.pop(agent, None)
        try:
            if row is None or row[0] < now - self.expiry:
                state = AgentState()
            elif seen is not None and seen[1] == row[1]:
                state = seen[0]  # the row is what this process wrote: no need to parse it
            else:
                state = AgentState.readable(row[1]) or self._unreadable(agent)
            value = pending.step(state)
            state.updated = now
            record = state.dumps()
        except Exception as exc:
            pending.error = exc
            return
        if row is None:
            db.execute(
                "INSERT INTO agents (agent, updated, state) VALUES (?, ?, ?)",
                (pending.agent, now, record),
            )
        else:
            # In place: a replaced row would get a new rowid, and its index entries and
            # freed pages would double what each commit writes (each page a syscall).
            db.execute(
                "UPDATE agents SET updated = ?, state = ? WHERE agent = ?",
                (now, record, pending.agent),
            )
        pending.value = value
        self._seen[agent] = (state, record)
        if len(self._seen) > SEEN_AGENTS:
            del self._seen[next(iter(self._seen))]  # the least recently decided

    def _unreadable(self, agent: str) -> AgentState:
        from .records import unreadable  # a corrupt row is rare: hooks do not import it

        unreadable(agent, f"sqlite {self.path}", "not a record this version can read")
        return AgentState()

    def open(self) -> None:
        with self._lock:
            self._connect()

    def reset(self, agent: str) -> None:
        try:
            with self._lock:
                self._seen.pop(agent, None)
                self._connect().execute("DELETE FROM agents WHERE agent = ?", (agent,))
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"sqlite {self.path}: {exc}") from exc

    def agents(self) -> Iterator[tuple[str, AgentState | None]]:
        """Live (not expired) agents, most recently active first; None for a corrupt row."""
        query = "SELECT agent, state FROM agents WHERE updated >= ? ORDER BY updated DESC"
        try:
            with self._lock:
                rows = self._connect().execute(query, (time.time() - self.expiry,)).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"sqlite {self.path}: {exc}") from exc
        for agent, data in rows:
            yield agent, AgentState.readable(data)

    def close(self) -> None:
        with self._lock:
            self._seen.clear()
            if self._db is not None:
                self._db.close()
                self._db = None

    # -- opening -----------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            # A long-lived process (the guard) must notice a file removed or replaced
            # under it: hooks would count in the new file while it kept the old one.
            try:
                info = os.stat(self.path)
                same = (info.st_dev, info.st_ino) == self._file
            except OSError:
                same = False
            if same:
                return self._db
            self._db.close()
            self._db = None
        try:
            wal_size = _open_private(self.path)
        except Unsafe as exc:
            raise StoreUnavailable(f"state file not used: {exc}") from None
        except OSError as exc:
            raise StoreUnavailable(f"cannot create state file {self.path}: {exc}") from exc
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, so the write lock
            # is taken before the read (BEGIN IMMEDIATE), not lazily at the first write.
            db = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            try:
                # WAL persists in the file; asking again is cheap once it is set. It is
                # an optimization, not what makes a decision atomic (BEGIN IMMEDIATE
                # is), so a file that cannot switch right now (another process is
                # switching it, or the filesystem has no shared memory) still works.
                try:
                    row = db.execute("PRAGMA journal_mode=WAL").fetchone()
                    wal = row is not None and str(row[0]).lower() == "wal"
                except sqlite3.OperationalError:
                    wal = False
                if wal:
                    # NORMAL in WAL mode: a killed process loses nothing committed; only
                    # a power cut may drop the last few decisions. No fsync per call.
                    db.execute("PRAGMA synchronous=NORMAL")
                if db.execute("PRAGMA user_version").fetchone()[0] != 1:
                    db.execute("BEGIN IMMEDIATE")
                    for statement in _SCHEMA:
                        db.execute(statement)
                    db.execute("PRAGMA user_version=1")
                    db.execute("COMMIT")
            except BaseException:
                db.close()
                raise
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"sqlite {self.path}: {exc}") from exc
        info = os.stat(self.path)
        self._file = (info.st_dev, info.st_ino)
        self._wal_full = wal_size > WAL_LIMIT
        self._db = db
        return db


def _open_private(path: str) -> int:
    """Check (and create) the file and its directory before SQLite opens them: the
    directory ours and writable by no one else (created 0700, whatever the umask), the
    file ours, regular, not a symlink (created 0600); the -wal and -shm files SQLite
    makes beside it, when they exist, likewise. Looser modes of ours are tightened.
    Returns the size of the WAL (0 if there is none)."""
    directory = os.path.dirname(os.path.abspath(path))
    private_directory(directory, tighten=directory == default_state_dir())
    os.close(open_private(path, os.O_RDWR | os.O_CREAT))
    wal_size = check_private(path + "-wal")
    check_private(path + "-shm")
    return wal_size


class _Pending:
    """One decision waiting for a batch: the agent, its step, and, once `done`, the
    step's value or the error its caller raises."""

    __slots__ = ("agent", "done", "error", "step", "value")

    def __init__(self, agent: str, step: Callable[[AgentState], Any]) -> None:
        self.agent, self.step = agent, step
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
