"""The guard's core: a harness's name -> its module, the config its command hook would
load, and a breaker. Every transport looks a harness up here (stdio for the JavaScript
plugins, HTTP for HTTP hooks, the MCP relay), so each judges a harness's calls with
exactly the config and spellings its command hook has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.assembly import Assembly
from ..core.config import Config, ConfigError
from ..core.config_file import hook_defaults, load_over, state_url
from ..core.stores import store_from_url
from ..core.stores.base import Store
from ..harnesses import HARNESSES, load, target_module, targets
from ..judge import Malformed

if TYPE_CHECKING:  # `_contract` stands on Protocols the kernel declares for mypy only
    from ..harnesses._contract import SomeCommandHook


def harness_assembly(name: object, config_file: str | None, state: str | None) -> Assembly:
    """Harness `name` (any registered harness) as its command hook loads it, from
    `config_file` (None: the hook's default file) and `state`; `ConfigError` for an
    unknown name or a bad file."""
    if not isinstance(name, str) or name not in targets():
        raise ConfigError(f"unknown harness {name!r}; known: {', '.join(targets())}")
    return Assembly.of(name, target_module(name), config_file, state)


class Harness:
    """A command-hook harness as the guard judges it: its module, its config, its breaker."""

    __slots__ = ("breaker", "config", "module", "name")

    def __init__(self, name: str, module: SomeCommandHook, config: Config, store: Store) -> None:
        self.name = name
        self.module = module
        self.config = config
        self.breaker = Assembly(name, config, None).breaker(store)


class Harnesses:
    """Every command-hook harness over one store: the config of each loaded once, at
    start, from one read of the file (a bad file fails the start, naming the key), so a
    file edited, half-written or removed later changes nothing until the guard restarts.

    `config` (no harness's spellings) and `url` are what the page and `status` use;
    `wrap` may wrap the store every breaker shares (the guard counts its failures)."""

    def __init__(
        self,
        config_path: str | None,
        state: str | None,
        wrap: Callable[[Store], Store] = lambda store: store,
    ) -> None:
        modules = {name: load(name) for name in HARNESSES}
        bases: list[Config | None] = [hook_defaults(), *map(hook_defaults, modules.values())]
        plain, *loaded = load_over(config_path, bases)
        self.config = plain.config
        self.url = state_url(state, plain.state)
        self.store = wrap(store_from_url(self.url, self.config))
        self._by_name = {
            name: Harness(name, module, found.config, self.store)
            for (name, module), found in zip(modules.items(), loaded, strict=True)
        }

    def get(self, name: str) -> Harness:
        """`Malformed` for a name that is not a command-hook harness."""
        found = self._by_name.get(name)
        if found is None:
            raise Malformed(f"unknown harness {name!r}; known: {', '.join(HARNESSES)}")
        return found
