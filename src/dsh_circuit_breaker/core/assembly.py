"""The one way a transport builds the breaker it judges a harness's calls with: the
config (SPEC's defaults, the harness's own spellings, the config file), the state URL,
the incident log's directory, and the breaker over that state.

The command hook, the MCP relay, the HTTP guard and the stdio guard of the JavaScript
plugins all build theirs here, so a harness's calls are judged the same whichever way
they arrive. The command hook imports this on every tool call: the breaker's module is
imported only when a breaker is built.
"""

from __future__ import annotations

import os

from ._log import warn
from .config_file import hook_config, state_url

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .breaker import CircuitBreaker
    from .config import Config
    from .config_file import Spellings
    from .stores.base import Store


class Assembly:
    """What a transport needs for one harness: `config`, the state `url` (None: the
    breaker's own in-memory state), and `breaker()` to build the breaker over them."""

    __slots__ = ("config", "name", "url")

    def __init__(self, name: str, config: Config, url: str | None) -> None:
        self.name = name  # what exported telemetry and incident lines call the transport
        self.config = config
        self.url = url

    @classmethod
    def of(
        cls, name: str, harness: Spellings, config_path: str | None, state: str | None
    ) -> Assembly:
        """Harness `name`, module `harness`, as its command hook loads it: `config_path` (None:
        the hook's default file) over the harness's defaults, then `state` (None: the
        environment, the file's `state`, the default SQLite file). A bad file or key is
        a `ConfigError` here."""
        config, file_state = hook_config(config_path, harness)
        return cls(name, config, state_url(state, file_state))

    def breaker(self, store: Store | None = None, *, metrics: bool = True) -> CircuitBreaker:
        """A breaker over `store` (one several breakers share), else over `url`.
        `metrics=False` for a process that judges one call and exits."""
        from .breaker import CircuitBreaker

        if self.config.incident_log:
            ensure_parent(self.config.incident_log)
        state = store if store is not None else self.url
        return CircuitBreaker(self.config, state=state, harness=self.name, metrics=metrics)


def ensure_parent(path: str) -> None:
    """Create the directory `path` sits in (owner-only) if it is missing: the default
    incident log sits in the state directory, which a non-default state URL never
    creates, and a denial must still reach the log. A failure is a warning; the
    decision stands (the append reports it too)."""
    directory = os.path.dirname(os.path.expanduser(path))
    if directory and not os.path.isdir(directory):
        from .files import private_directory

        try:
            private_directory(directory)  # 0700, its missing parents too, whatever the umask
        except OSError as exc:
            warn("cannot create %s: %s", directory, exc)
