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

# Shared checks the integration tests call: rewritten so that a failure shows the values.
pytest.register_assert_rewrite("support.agent_scenarios")


def require(available: bool, what: str) -> None:
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required under CI but is missing")
    pytest.skip(f"{what} is not installed here")


# Every store runs the same contract suite (tests/test_store_contract.py). A store
# module registers here how to build one for a test: kind -> factory(tmp_path) -> URL.
# The factory calls `require(...)` for whatever server it needs.
def _memory_url(tmp_path: object) -> str:
    return "memory://"


def _sqlite_url(tmp_path: object) -> str:
    return f"sqlite:///{tmp_path}/state.db"


def _redis_url(tmp_path: object) -> str:
    from support.redis_server import fresh_url, redis_available

    require(redis_available(), "redis-server and the redis extra")
    return fresh_url()  # one server per session; a prefix of its own per test


STORE_URLS = {"memory": _memory_url, "sqlite": _sqlite_url, "redis": _redis_url}


@pytest.fixture(params=sorted(STORE_URLS))
def state_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """A state URL for each store kind in STORE_URLS."""
    return STORE_URLS[request.param](tmp_path)
