"""The live page in a real headless browser: Debian's Chromium (/usr/bin/chromium, from
scripts/setup) driven by playwright-core (pinned in tests/e2e/package.json), against the
installed wheel's `serve --http` (so the page is the one the wheel ships). The page loads
with the token, shows an agent a hook request just created, shows its denial within a
second, lists it before a quieter, newer agent (and a stopped one before both) with a
preview of the call it repeated, its last call's time as "N s ago", and a banner that counts
them (loud for a stopped agent); an incident links to its agent; the page collapses the
timeline's runs, says the next step, has no overlapping boxes and no wrapped ids at 800 px,
and its reset button (after a confirmation) resets the agent in the store; with the guard
gone it says "guard not reachable" and how to start it; without the token the page is HTML
that says how to get it. Each agent is named by its project and harness, a refused or
stopped one has a what-to-do row (how to interrupt it, its transcript, a reset), a long
repeated call stays on one line, and the page fits 1280 px without a horizontal scrollbar.
Screenshots at 1280 and 800 px wide are kept in the test's temporary directory (pytest's
`--basetemp`, never the repository), and their paths printed.
"""

from __future__ import annotations

import json
import re
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
    screenshot = tmp_path / "live-page-1280.png"
    narrow = tmp_path / "live-page-800.png"
    with Service(installed.env, cli=[str(installed.cli)]) as service:
        done = subprocess.run(
            ["node", str(HERE / "support" / "page_check.mjs"), service.origin, TOKEN,
             str(tmp_path / "chromium-profile"), str(screenshot), str(narrow)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        agents = service.json("/api/agents")["agents"]
    print(f"screenshots of the live page: {screenshot} {narrow}")
    assert seen["status"] == 200 and seen["title"] == "dsh-circuit-breaker: live"
    assert seen["first"] == {"status": 200, "body": ""}
    assert seen["afterFirst"] == "ok"
    denied = "Circuit breaker: NOT run, a repeat (copies: 6, limit: 6): this Bash call"
    assert denied in seen["denied"]["body"]
    assert seen["denialShownMs"] < 1000, seen  # polled every 500 ms
    assert seen["denialCells"] == ["5/300", "5/6", "1"]  # calls, top repeat, denials
    # Listed first though the quiet agent called later; what it repeated, in the guard's
    # memory only (the store has digests), and a banner counting it.
    assert seen["order"] == ["stuck-session-3", "browser-session-1", "quiet-session-2"]
    assert seen["firstRepeat"] == "echo loop x5 ran, x1 refused"
    assert re.fullmatch(r"\d+ s ago", seen["lastCall"]), seen["lastCall"]
    assert seen["bannerShown"] and seen["banner"] == "2 agents need attention"
    assert seen["bannerClass"] == "loud"  # a stopped agent among them
    assert seen["incidentOpens"] == "browser-session-1"
    assert sorted(seen["idLines"]) == [[a, 1] for a in sorted(seen["order"])], seen["idLines"]
    assert seen["timelineCells"] == ["x5", ""]  # five alike in one cell, then the denial
    # Each cell names the call, not only its tool.
    assert seen["timelineTitles"] == [
        "Bash: echo loop (ran) (5 times in a row)",
        "Bash: echo loop (denied: duplicate)",
    ]
    assert seen["next"].startswith("denied: its last call, or its next repeat, is refused")
    # Named by its project and harness; the whole working directory on hover.
    assert seen["who"] == "payments-apiclaude-code"  # two spans, side by side
    assert seen["whoTitle"] == "/home/me/src/payments-api (claude-code)"
    # A refused or stopped agent has its next step in a row of its own: why, how to
    # interrupt it, its transcript, a reset; a healthy one has none.
    stuck = "/home/me/.claude/projects/a-project-with-a-rather-long-name-for-its-column/"
    assert seen["todo"].startswith("What to do: refused stopAfterDenials times in a row")
    assert f"Its transcript: {stuck}stuck-session-3.jsonl." in seen["todo"]
    assert "reset here to let it run again" in seen["todo"] and seen["todoButtons"] == 1
    assert "If it keeps on, press Esc in its Claude Code session." in seen["todoDenied"]
    assert "payments-api/browser-session-1.jsonl" in seen["todoDenied"]
    assert seen["quietTodo"] == 0
    # The long repeated call: one line, cut with an ellipsis, the whole preview on hover.
    long = seen["longCall"]
    assert long["lines"] == 1 and long["cut"], long
    assert long["title"].startswith("echo stuck && ./scripts/poll-the-deployment"), long
    # 1280 px: no horizontal scrollbar, nothing overlapping; 800 px: nothing overlapping.
    assert seen["wide"]["page"] <= 1280, seen["wide"]
    assert seen["wide"]["table"] <= seen["wide"]["room"], seen["wide"]
    assert seen["wideOverlaps"] == [], seen["wideOverlaps"]
    assert seen["narrowOverlaps"] == [] and seen["narrowWidth"] <= 800, seen
    assert seen["confirm"].startswith("Reset browser-session-1? Its state is forgotten")
    assert seen["noToken"]["status"] == 401
    assert seen["noToken"]["type"].startswith("text/html")
    assert seen["noToken"]["heading"] == "The live page needs the guard's token"
    assert "duplicate" in seen["incident"] and "browser-session-1" in seen["incident"]
    # The reset button forgot the agent in the store (its timeline keeps a reset mark):
    # its next call ran again.
    assert seen["timelineAfterReset"].endswith("not in the store now (reset or expired)")
    assert seen["afterReset"] == {"status": 200, "body": ""}
    assert sorted((a["agent"], a["calls"]) for a in agents) == [
        ("browser-session-1", 1),
        ("quiet-session-2", 1),
        ("stuck-session-3", 5),
    ]
    assert seen["error"] == ""
    assert seen["unreachable"].startswith("guard not reachable at http://127.0.0.1:")
    assert "dsh-circuit-breaker serve --http 127.0.0.1:" in seen["unreachable"]
    assert [line for line in seen["console"] if "error" in line.lower()] == []
    assert screenshot.stat().st_size > 10_000 and narrow.stat().st_size > 10_000
    written = b"".join(p.read_bytes() for p in installed.home.rglob("*") if p.is_file())
    assert b"echo loop" not in written  # the preview never reached the store or a log


def test_the_replay_page_in_a_browser(browser: None, installed: Installed, tmp_path: Path) -> None:
    """The replay page of a real session (close first-denial and stop marks), opened in
    Chromium: the marks' labels do not overlap; a screenshot is written beside the output."""
    transcript = HERE / "fixtures" / "transcripts" / "claude-code" / "cbprobe4-hook-denials.jsonl"
    html = tmp_path / "replay.html"
    done = installed.run("replay", str(transcript), "--html", str(html))
    assert done.returncode == 0, done.stderr
    screenshot = tmp_path / "replay-page-1400.png"
    shot = subprocess.run(
        ["node", str(HERE / "support" / "screenshot.mjs"), html.as_uri(),
         str(tmp_path / "chromium-profile"), str(screenshot), "1400"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shot.returncode == 0, shot.stderr[-3000:]
    seen = json.loads(shot.stdout.strip().splitlines()[-1])
    print(f"screenshot of the replay page: {screenshot}")
    labels = seen["labels"]
    assert sorted(text.split(":")[0] for text, *_ in labels) == ["first denial", "stop"]
    for i, (_, *a) in enumerate(labels):
        for _, *b in labels[i + 1 :]:
            apart = a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
            assert apart, labels
    assert screenshot.stat().st_size > 10_000
