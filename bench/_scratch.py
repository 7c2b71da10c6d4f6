"""The environment a bench runs our processes in: a scratch HOME and XDG tree, none of the
person's own DSH_CIRCUIT_BREAKER_* or XDG_* settings, so nothing is read from or written
to their state and every run starts from the same defaults."""

from __future__ import annotations

import os


def scratch_env(home: str, **extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DSH_CIRCUIT_BREAKER_", "XDG_"))
    }
    env.update(HOME=home, XDG_STATE_HOME=f"{home}/state", XDG_CONFIG_HOME=f"{home}/config")
    env.update(extra)
    return env
