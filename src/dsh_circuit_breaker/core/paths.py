"""Where the breaker keeps its files by default (XDG base directories)."""

from __future__ import annotations

import os

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
