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
from ..files import Unsafe, check_private, open_private, private_directory
from ..paths import default_state_dir, default_state_path
from ..state import AgentState
from .unavailable import StoreUnavailable

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs a hook process more than its whole decision
    from collections.abc import Callable, Iterator
    from typing import TypeVar

    T = TypeVar("T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS agents ("
    " agent TEXT PRIMARY KEY, updated REAL NOT NULL, state BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS agents_updated ON agents (updated)",
)
EXPIRE_BATCH = 64
_EXPIRE = (
    "DELETE FROM agents WHERE rowid IN"
    f" (SELECT rowid FROM agents WHERE updated < ? LIMIT {EXPIRE_BATCH})"
)


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
        # One connection per store; threads of one process take turns on it (SQLite's
        # file lock orders processes, this lock orders threads within one).
        self._lock = _thread.allocate_lock()  # `threading` costs a hook process an import

    # -- the Store protocol ------------------------------------------------------------
    def transact(self, agent: str, step: Callable[[AgentState], T]) -> T:
        with self._lock:
            return self._transact(agent, step)

    def _transact(self, agent: str, step: Callable[[AgentState], T]) -> T:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                now = time.time()
                row = db.execute(
                    "SELECT updated, state FROM agents WHERE agent = ?", (agent,)
                ).fetchone()
                if row is None or row[0] < now - self.expiry:
                    state = AgentState()
                else:
                    state = AgentState.loads(row[1])
                result = step(state)
                state.updated = now
                db.execute(
                    "INSERT OR REPLACE INTO agents (agent, updated, state) VALUES (?, ?, ?)",
                    (agent, now, state.dumps()),
                )
                # Expired rows go in the same transaction, a few at a time: the index
                # makes this a short range probe, so no decision holds the write lock for
                # long however many agents expired at once (a million rows in one DELETE
                # take seconds, and every other hook would give up waiting). The file
                # still never grows with agents long gone: a decision adds one row at most.
                db.execute(_EXPIRE, (now - self.expiry,))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"sqlite {self.path}: {exc}") from exc
        return result

    def open(self) -> None:
        with self._lock:
            self._connect()

    def reset(self, agent: str) -> None:
        try:
            with self._lock:
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
            _open_private(self.path)
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
        self._db = db
        return db


def _open_private(path: str) -> None:
    """Check (and create) the file and its directory before SQLite opens them: the
    directory ours and writable by no one else (created 0700, whatever the umask), the
    file ours, regular, not a symlink (created 0600); the -wal and -shm files SQLite
    makes beside it, when they exist, likewise. Looser modes of ours are tightened."""
    directory = os.path.dirname(os.path.abspath(path))
    private_directory(directory, tighten=directory == default_state_dir())
    os.close(open_private(path, os.O_RDWR | os.O_CREAT))
    for side in ("-wal", "-shm"):
        check_private(path + side)
