"""The guard's token: every HTTP request carries it (`Authorization: Bearer TOKEN`, or
`?token=` for the page), since any local process, and any web page a browser shows, can
reach a port on 127.0.0.1.

`--token`, else `$DSH_CIRCUIT_BREAKER_TOKEN`, else the file `http-token` in the user's
state directory, created at the first start with a random token, owner-only.
"""

from __future__ import annotations

import os
import secrets

from .config import ConfigError
from .config_file import ENV_TOKEN
from .files import open_private, private_directory, read_regular
from .paths import default_state_dir

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
    path = token_path()
    if not os.path.lexists(path) and create:
        _create(path)
    try:
        text = read_regular(path, MAX_LENGTH + 1).decode("ascii", "replace").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the token file {path}: {exc}") from None
    return check(text, path)


def _create(path: str) -> None:
    """Write a new token beside `path`, then link it into place: a service starting at
    the same moment finds either no file or a whole one, and the first link wins."""
    directory = os.path.dirname(path)
    private_directory(directory)
    temporary = os.path.join(directory, f".{FILE_NAME}.{secrets.token_hex(8)}")
    try:
        fd = open_private(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            os.write(fd, (secrets.token_urlsafe(32) + "\n").encode())
        finally:
            os.close(fd)
        try:  # noqa: SIM105 - the loser of a race uses the winner's token
            os.link(temporary, path)
        except FileExistsError:
            pass
    except OSError as exc:
        raise ConfigError(f"cannot create the token file {path}: {exc}") from None
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)
