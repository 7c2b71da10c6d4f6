"""State stores, chosen by URL: `memory://`, `sqlite:///path`, `redis://host:6379/0`."""

from __future__ import annotations

from ..config import Config, ConfigError, shown
from .unavailable import StoreUnavailable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .base import Store
    from .memory import MemoryStore

# scheme -> "module:factory"; imported only when chosen, so the hook path stays light.
# A factory takes (url, config) and returns a Store.
_SCHEMES = {
    "sqlite": "dsh_circuit_breaker.core.stores.sqlite:from_url",
    "redis": "dsh_circuit_breaker.core.stores.redis:from_url",
    "rediss": "dsh_circuit_breaker.core.stores.redis:from_url",
    "redis+cluster": "dsh_circuit_breaker.core.stores.redis:from_url",
    "rediss+cluster": "dsh_circuit_breaker.core.stores.redis:from_url",
    "redis+sentinel": "dsh_circuit_breaker.core.stores.redis:from_url",
    "rediss+sentinel": "dsh_circuit_breaker.core.stores.redis:from_url",
}


def store_from_url(url: str, config: Config | None = None) -> Store:
    """The store a state URL names; an unknown scheme is a ConfigError naming it."""
    config = config or Config()
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ConfigError(
            f"state URL {shown(url)} has no scheme (use memory://, sqlite:///path, ...)"
        )
    if scheme == "memory":
        if url != "memory://":
            raise ConfigError(f"state URL {shown(url)}: memory:// takes no path or parameters")
        from .memory import MemoryStore  # not at the top: a hook process never uses it

        return MemoryStore()
    target = _SCHEMES.get(scheme)
    if target is None:
        known = ", ".join(["memory", *_SCHEMES])
        raise ConfigError(
            f"state URL {shown(url)}: unknown scheme {shown(scheme)} (known: {known})"
        )
    module_name, _, attr = target.partition(":")
    # __import__ rather than importlib: one import fewer for every hook process.
    factory: Any = getattr(__import__(module_name, fromlist=[attr]), attr)
    store: Store = factory(url, config)
    return store


def __getattr__(name: str) -> object:
    """`MemoryStore`, imported on first use (PEP 562)."""
    if name != "MemoryStore":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .memory import MemoryStore

    return MemoryStore


__all__ = ["MemoryStore", "StoreUnavailable", "store_from_url"]
