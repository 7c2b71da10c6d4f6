"""The guard's token: every HTTP request carries it (`Authorization: Bearer TOKEN`, or
`?token=` for the page), since any local process, and any web page a browser shows, can
reach a port on 127.0.0.1.

`--token`, else `$DSH_CIRCUIT_BREAKER_TOKEN`, else the file `http-token` in the user's
state directory, created at the first start with a random token, owner-only; an
existing one must be this user's regular file (never followed through a symlink, or
used with a second hard link) and is tightened to 0600 if others could read it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time

from .core.config import ConfigError
from .core.config_file import ENV_TOKEN
from .core.files import default_state_dir, open_private, private_directory

FILE_NAME = "http-token"
MIN_LENGTH = 16
MAX_LENGTH = 512


def token_path() -> str:
    return os.path.join(default_state_dir(), FILE_NAME)


def check(token: str, source: str) -> str:
    """`token` if it can go into a header and is long enough to guess; else ConfigError."""
    if not MIN_LENGTH <= len(token) <= MAX_LENGTH:
        raise ConfigError(
            f"{source}: a token must have {MIN_LENGTH} to {MAX_LENGTH} characters, got {len(token)}"
        )
    if not all("!" <= c <= "~" for c in token):
        raise ConfigError(f"{source}: a token may hold only visible ASCII characters")
    return token


def resolve(explicit: str | None = None, *, create: bool = True) -> str:
    """The token the service uses (see the module docstring); with `create`, a missing
    token file is created with a new random token."""
    if explicit:
        return check(explicit, "--token")
    from_env = os.environ.get(ENV_TOKEN)
    if from_env:
        return check(from_env, f"${ENV_TOKEN}")
    return from_file(create=create)


def from_file(*, create: bool = True) -> str:
    """The token file's token: our own regular file, never through a symlink, tightened
    to 0600 if others could read it; with `create`, a missing one is made first."""
    path = token_path()
    if not os.path.lexists(path) and create:
        _create(path)
    for _ in range(100):  # a service creating it this moment writes it within a few ms
        try:
            fd = open_private(path, os.O_RDONLY)
            try:
                text = os.read(fd, MAX_LENGTH + 2).decode("ascii", "replace").strip()
            finally:
                os.close(fd)
        except OSError as exc:
            raise ConfigError(f"token file {path} not used: {exc}") from None
        if text:
            return check(text, path)
        time.sleep(0.01)
    return check(text, path)


def _create(path: str) -> None:
    """Create the file owner-only, exclusively, and write a new token into it: of two
    services starting at once the first one's token stands (the other reads it)."""
    private_directory(os.path.dirname(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise ConfigError(f"cannot create the token file {path}: {exc}") from None
    try:
        os.write(fd, (secrets.token_urlsafe(32) + "\n").encode())
    finally:
        os.close(fd)


def proof(token: str, port: int, nonce: str) -> str:
    """What the guard on `port` answers to `nonce`: proof it holds `token`, bound to its
    port (a squatter relaying the challenge to a guard on another port gets the wrong one)."""
    message = f"dsh-circuit-breaker proof {port} {nonce}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()
