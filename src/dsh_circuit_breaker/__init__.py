"""dsh-circuit-breaker: a loop guard for LLM agents."""

from ._version import __version__
from .breaker import CircuitBreaker, Decision
from .config import Config, ConfigError

__all__ = ["CircuitBreaker", "Config", "ConfigError", "Decision", "__version__"]
