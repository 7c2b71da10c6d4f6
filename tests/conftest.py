"""Shared test helpers.

Tests that drive a real external part (redis-server, the Claude Code CLI, the DSH runtime,
a framework) call `require(...)`: on a developer machine without it they skip, but under
CI (CI=true), where .ci/run installed everything, a missing part is a failure, so a
broken install can never turn into a quietly green run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from support.installed import Installed
from support.installed import venv as installed_venv

# HOME and the XDG directories point into a scratch tree for the whole session, and the
# session fails if anything under the real HOME changed (tests/support/home_guard.py).
pytest_plugins = ["support.home_guard"]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Shared checks the integration tests call: rewritten so that a failure shows the values.
pytest.register_assert_rewrite("support.agent_scenarios")


def require(available: bool, what: str) -> None:
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required under CI but is missing")
    pytest.skip(f"{what} is not installed here")


# Side venvs (pyproject.toml's side-NAME extras): a framework that cannot install beside the
# test extra has its tests marked `side("NAME")`. The main run deselects them (pytest says how
# many); scripts/test runs them with .installed/side-NAME's Python and `--side NAME`, which
# keeps only those. There `require` still fails under CI, and a run that keeps none exits 5,
# so they cannot pass by not running.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--side", metavar="NAME", help="run only the tests marked side(NAME) (scripts/test)"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "side(name): runs in the side venv NAME only")
    # pytest-xdist's, named here too for the venvs without it (the side and core runs).
    config.addinivalue_line("markers", "xdist_group(name): these tests share one xdist worker")
    if config.getoption("--side"):
        import dsh_circuit_breaker

        if not dsh_circuit_breaker.__file__.startswith(sys.prefix):  # the wheel, not src/
            raise pytest.UsageError(f"--side: {dsh_circuit_breaker.__file__} is not installed")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    side = config.getoption("--side")
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        mark = item.get_closest_marker("side")
        (keep if (mark.args[0] if mark else None) == side else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# The calibration corpus beside the repository (../shared/corpus): real transcripts.
CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def corpus() -> Path:
    """../shared/corpus; tests that read it say so with usefixtures("corpus")."""
    require(CORPUS.is_dir(), f"the calibration corpus ({CORPUS})")
    return CORPUS


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


@pytest.fixture(scope="session")
def harness_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory the end-to-end runs of a session share (a harness CLI's unpacked
    binaries, e.g. Copilot's 240 MB): once, rather than in every test's HOME."""
    return tmp_path_factory.mktemp("harness-cache")


@pytest.fixture
def installed(tmp_path: Path) -> Installed:
    """The wheel as a user installs it (tests/support/installed.py), with a scratch HOME."""
    found = installed_venv()
    require(found is not None, "the installed wheel (.installed/, made by scripts/setup)")
    assert found is not None
    home = tmp_path / "home"
    home.mkdir()
    return Installed(found, home)
