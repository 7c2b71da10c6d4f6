"""The live page in a real headless browser: Debian's Chromium (/usr/bin/chromium, from
scripts/setup) driven by playwright-core (pinned in tests/e2e/package.json), against the
installed wheel's `serve --http` (so the page is the one the wheel ships). The page loads
with the token, shows an agent a hook request just created, shows its denial within a
second, and its reset button resets it in the store. A screenshot of the page, as the
user sees it, is written next to the test's output.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import require
from support.guard_service import TOKEN, Service
from support.installed import Installed

HERE = Path(__file__).parent
CHROMIUM = Path("/usr/bin/chromium")
PLAYWRIGHT = HERE / "e2e" / "node_modules" / "playwright-core"
pytestmark = pytest.mark.timeout(180)  # Chromium starting under load; 10 s per wait


@pytest.fixture
def browser() -> None:
    require(CHROMIUM.exists(), "Debian's chromium (scripts/setup)")
    require(PLAYWRIGHT.exists(), "playwright-core (tests/e2e: npm ci)")
    require(shutil.which("node") is not None, "node")


def test_the_page_shows_an_agent_its_denial_and_resets_it(
    browser: None, installed: Installed, tmp_path: Path
) -> None:
    screenshot = tmp_path / "live-page.png"
    with Service(installed.env, cli=[str(installed.cli)]) as service:
        done = subprocess.run(
            ["node", str(HERE / "support" / "page_check.mjs"), service.origin, TOKEN,
             str(tmp_path / "chromium-profile"), str(screenshot)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        agents = service.json("/api/agents")["agents"]
    print(f"screenshot of the live page: {screenshot}")
    assert seen["status"] == 200 and seen["title"] == "dsh-circuit-breaker: live"
    assert seen["first"] == {"status": 200, "body": ""}
    assert seen["afterFirst"] == "ok"
    assert "Circuit breaker: this Bash call was NOT run." in seen["denied"]["body"]
    assert seen["denialShownMs"] < 1000, seen  # polled every 500 ms
    assert seen["denialCells"] == ["6/300", "6/6", "1"]  # calls, top repeat, denials
    assert seen["timelineCells"] == 7
    assert "duplicate" in seen["incident"] and "browser-session-1" in seen["incident"]
    # The reset button forgot the agent in the store (its timeline keeps a reset mark):
    # its next call ran again.
    assert seen["timelineAfterReset"].endswith("not in the store now (reset or expired)")
    assert seen["afterReset"] == {"status": 200, "body": ""}
    assert [(a["agent"], a["calls"]) for a in agents] == [("browser-session-1", 1)]
    assert seen["error"] == ""
    assert [line for line in seen["console"] if "error" in line.lower()] == []
    assert screenshot.stat().st_size > 10_000
