"""The environment for running what a user would run (a doc's block, an example program)
in a scratch HOME: none of the developer's homes, configs, keys or model endpoints leak
in, and any HTTP request that is not for 127.0.0.1 goes to a closed port there."""

from __future__ import annotations

import os
from pathlib import Path

# Variables that would point a child at the developer's own homes, configs or models.
FOREIGN = (
    "DSH_",
    "XDG_",
    "CLAUDE_",
    "CODEX_",
    "ANTHROPIC_",
    "OPENAI_",
    "GOOGLE_",
    "GEMINI_",
    "QWEN_",
    "FACTORY_",
)
DEAD = "http://127.0.0.1:9"


def scratch_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN)}
    env.update(
        HOME=str(home),
        HTTP_PROXY=DEAD,
        HTTPS_PROXY=DEAD,
        ALL_PROXY=DEAD,
        NO_PROXY="127.0.0.1,localhost",
    )
    env.update(extra)
    return env
