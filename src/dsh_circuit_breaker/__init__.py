"""dsh-circuit-breaker: a loop guard for LLM agents.

The public names load on first use (PEP 562), so that a command hook importing one
submodule does not pay for the rest.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._version import __version__
    from .core.breaker import CircuitBreaker, Decision
    from .core.config import Config, ConfigError
    from .core.stop import AgentStopped

_WHERE = {
    "AgentStopped": "core.stop",
    "CircuitBreaker": "core.breaker",
    "Decision": "core.breaker",
    "Config": "core.config",
    "ConfigError": "core.config",
    "__version__": "_version",
}

__all__ = ["AgentStopped", "CircuitBreaker", "Config", "ConfigError", "Decision", "__version__"]


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
