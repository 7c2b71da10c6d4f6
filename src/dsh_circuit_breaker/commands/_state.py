"""The state store the installed hook uses, opened the way the hook opens it, for the
commands that read or change it (`status`, `reset`)."""

from __future__ import annotations

from ..core.config import Config
from ..core.config_file import hook_config, state_url
from ..core.stores import store_from_url
from ..core.stores.base import Store


def open_state(config_path: str | None, explicit: str | None) -> tuple[Config, str, Store]:
    """The hook's config, its state URL and the store there (`--config`, `--state`, the
    environment and the config file resolved exactly as the hook resolves them)."""
    config, file_state = hook_config(config_path)
    url = state_url(explicit, file_state)
    return config, url, store_from_url(url, config)
