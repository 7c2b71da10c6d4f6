"""The breaker's own files: where they live by default (XDG base directories), and
opening them safely on a machine shared with other users.

The state file and the incident log are ours: they are opened without following a
symlink or blocking on a FIFO, only as regular files that we own and that are linked
once, in a directory that belongs to us and that nobody else may write. Another user who
can write that directory could swap in a forged state or point the log at `~/.bashrc`,
so such a directory is refused, not used. A config file is only read: any regular file
will do (a symlink too, as dotfile managers make), but never a FIFO or a device, and
never more than a config file's size.
"""

from __future__ import annotations

import os
import stat

APP = "dsh-circuit-breaker"


def user_config_dir() -> str:
    """`$XDG_CONFIG_HOME/dsh-circuit-breaker`, else `~/.config/dsh-circuit-breaker`."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, APP)


def default_state_dir() -> str:
    """`$XDG_STATE_HOME/dsh-circuit-breaker`, else `~/.local/state/dsh-circuit-breaker`."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, APP)


def default_state_path() -> str:
    return os.path.join(default_state_dir(), "state.db")


def default_state_url() -> str:
    return "sqlite:///" + default_state_path()


def default_incident_log() -> str:
    return os.path.join(default_state_dir(), "incidents.jsonl")


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class Unsafe(OSError):
    """A path the breaker will not use; the message says which and why."""


def open_regular(path: str) -> int:
    """A read-only descriptor for the regular file `path` (a symlink to one will do);
    a directory, FIFO or device is `Unsafe`, refused before anything is read from it."""
    # Non-blocking: opening a FIFO for reading would otherwise wait for a writer.
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unsafe(f"{path} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, limit: int) -> bytes:
    """The contents of the regular file `path`, at most `limit` bytes long."""
    fd = open_regular(path)
    try:
        info = os.fstat(fd)
        if info.st_size > limit:
            raise Unsafe(f"{path} is larger than {limit} bytes")
        chunks, size = [], 0
        while size <= limit:  # the file may grow after fstat; /proc files report size 0
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise Unsafe(f"{path} is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def private_directory(directory: str, *, tighten: bool = False) -> None:
    """Create `directory` and any missing parent 0700 (whatever the umask), then check
    it (see `check_directory`). With `tighten`, a directory that is ours but readable by
    others is made 0700."""
    missing = []
    current = os.path.abspath(directory)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for path in reversed(missing):
        try:  # noqa: SIM105 - contextlib would be one more import per tool call
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    check_directory(directory, tighten=tighten)


def check_directory(directory: str, *, tighten: bool = False) -> None:
    """Refuse a directory that another user owns or that group or others may write."""
    info = os.stat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise Unsafe(f"{directory} is not a directory")
    if info.st_uid != os.geteuid():
        raise Unsafe(f"directory {directory} belongs to uid {info.st_uid}, not to this user")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        raise Unsafe(
            f"directory {directory} is writable by other users (mode {mode:o}); "
            f"not used until it is not (chmod 700 {directory})"
        )
    if tighten and mode & 0o077:
        os.chmod(directory, 0o700)


def open_private(path: str, flags: int) -> int:
    """A descriptor for our own regular file `path`, created 0600 if `flags` hold
    O_CREAT; an existing one that others may read is tightened to 0600."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC, 0o600)
    except OSError as exc:
        if os.path.islink(path):
            raise Unsafe(f"{path} is a symbolic link; it is not followed") from None
        raise Unsafe(f"cannot open {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        _check_own(info, path)
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_private(path: str) -> int:
    """If `path` exists, it must be a regular file of ours (tightened to 0600), not a
    symlink: for the files SQLite opens by itself beside the database (-wal, -shm).
    Returns its size (0 if it does not exist)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return 0
    if stat.S_ISLNK(info.st_mode):
        raise Unsafe(f"{path} is a symbolic link; it is not followed")
    _check_own(info, path)
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o600)
    return info.st_size


def _check_own(info: os.stat_result, path: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise Unsafe(f"{path} is not a regular file")
    if info.st_uid != os.geteuid():
        raise Unsafe(f"{path} belongs to uid {info.st_uid}, not to this user")
    if info.st_nlink != 1:  # a hard link to a file elsewhere (~/.bashrc) is not ours
        raise Unsafe(f"{path} has {info.st_nlink} hard links; it is not used")
