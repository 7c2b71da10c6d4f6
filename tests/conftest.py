"""Shared test helpers.

Tests that drive a real external part (redis-server, the Claude Code CLI, the DSH runtime,
a framework) call `require(...)`: on a developer machine without it they skip, but under
CI (CI=true), where .ci/run installed everything, a missing part is a failure, so a
broken install can never turn into a quietly green run.
"""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(available: bool, what: str) -> None:
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required under CI but is missing")
    pytest.skip(f"{what} is not installed here")
