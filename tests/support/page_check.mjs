// The live page in real headless Chromium (Debian's, driven by playwright-core), as a
// person opens it: with the address `serve --http` printed. Usage:
//   node page_check.mjs ORIGIN TOKEN PROFILE_DIR SCREENSHOT_WIDE SCREENSHOT_NARROW
// It loads the page, makes hook requests itself (a new agent, then its denial, then a
// quiet agent after it, then one that loops until it is stopped), waits for the page to
// show each, follows an incident's link to its agent, takes screenshots at 1280 and 800 px
// wide (and measures the narrow one for boxes that overlap and ids that wrap), clicks the
// looping agent's reset button (accepting its confirmation), shows the page with the guard
// unreachable, opens it without the token, and prints one JSON line of what it saw and how
// long each took. Every wait is bounded.
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "e2e", "package.json"));
const { chromium } = require("playwright-core");

const [origin, token, profile, screenshot, narrow] = process.argv.slice(2);
const SESSION = "browser-session-1";
const QUIET = "quiet-session-2";
const STUCK = "stuck-session-3";  // refused 3 times in a row: stopped
const WAIT = 10000;
// Where each session works, as Claude Code's events say: the page names it by project.
const CWD = {
  [SESSION]: "/home/me/src/payments-api",
  [QUIET]: "/home/me/src/docs-site",
  [STUCK]: "/home/me/src/a-project-with-a-rather-long-name-for-its-column",
};
const STUCK_CALL = "echo stuck && ./scripts/poll-the-deployment --until-ready " +
  "--region eu-west-1 --verbose";

async function hook(command, session = SESSION) {
  const event = {
    session_id: session, hook_event_name: "PreToolUse", tool_name: "Bash",
    tool_input: { command, description: "page check" }, tool_use_id: "toolu_page",
    cwd: CWD[session],
    transcript_path: "/home/me/.claude/projects/" + CWD[session].split("/").pop() + "/" +
      session + ".jsonl",
  };
  const response = await fetch(origin + "/hook/claude-code", {
    method: "POST", body: JSON.stringify(event),
    headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
  });
  return { status: response.status, body: await response.text() };
}

const context = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
  ],
  viewport: { width: 1400, height: 800 },
});
const seen = { console: [] };

// Pairs of elements among `selector`'s whose boxes intersect (by more than a pixel).
async function overlaps(page, selector) {
  return page.$$eval(selector, (nodes) => {
    const boxes = nodes.map((n) => [n, n.getBoundingClientRect()])
      .filter(([, b]) => b.width > 0 && b.height > 0);
    const found = [];
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const [a, b] = [boxes[i][1], boxes[j][1]];
        const x = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const y = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (x > 1 && y > 1) found.push(boxes[i][0].tagName + "/" + boxes[j][0].tagName);
      }
    }
    return found;
  });
}
try {
  const page = await context.newPage();
  page.on("console", (message) => seen.console.push(message.type() + ": " + message.text()));
  page.on("pageerror", (error) => seen.console.push("pageerror: " + error.message));
  page.on("dialog", async (dialog) => { seen.confirm = dialog.message(); await dialog.accept(); });
  const loaded = await page.goto(origin + "/?token=" + encodeURIComponent(token));
  seen.status = loaded.status();
  seen.title = await page.title();
  await page.waitForSelector("#updated:not(:text('never'))", { timeout: WAIT });

  const row = page.locator(`tr.agent[data-agent="${SESSION}"]`);
  let started = Date.now();
  seen.first = await hook("echo loop");
  await row.waitFor({ timeout: WAIT });
  seen.agentShownMs = Date.now() - started;
  seen.afterFirst = await row.locator(".badge").textContent();

  for (let i = 0; i < 4; i++) await hook("echo loop");  // five in all: the 6th is refused
  started = Date.now();
  seen.denied = await hook("echo loop");
  await row.locator(".badge.denied").waitFor({ timeout: WAIT });
  seen.denialShownMs = Date.now() - started;
  // The store holds the denial a moment before the guard's memory counts it: a poll in
  // between shows the badge with 0 denials, until the next poll.
  await page.waitForFunction((agent) => {
    const cells = document.querySelectorAll(`tr.agent[data-agent="${agent}"] td.num`);
    return cells.length === 3 && cells[2].textContent === "1";
  }, SESSION, { timeout: WAIT });
  seen.denialCells = await row.locator("td.num").allTextContents();
  seen.quiet = await hook("ls", QUIET);  // more recent, but fine: listed after the loop
  await page.locator(`tr.agent[data-agent="${QUIET}"]`).waitFor({ timeout: WAIT });
  for (let i = 0; i < 9; i++) await hook(STUCK_CALL, STUCK);
  await page.locator(`tr.agent[data-agent="${STUCK}"] .badge.stopped`).waitFor({ timeout: WAIT });
  seen.order = await page.locator("tr.agent").evaluateAll((rows) => rows.map((r) => r.dataset.agent));
  seen.firstRepeat = await row.locator("td.repeat").textContent();
  seen.lastCall = await row.locator("td.last").textContent();
  // Named by project and harness, the full path on hover; the what-to-do line in its
  // own row, with the transcript's path and a reset.
  seen.who = await row.locator("td").nth(1).locator("div").first().textContent();
  seen.whoTitle = await row.locator("td").nth(1).locator("div").first().getAttribute("title");
  const todo = page.locator(`tr.todo[data-agent="${STUCK}"]`);
  seen.todo = await todo.textContent();
  seen.todoDenied = await page.locator(`tr.todo[data-agent="${SESSION}"]`).textContent();
  seen.todoButtons = await todo.locator("button.reset").count();
  seen.quietTodo = await page.locator(`tr.todo[data-agent="${QUIET}"]`).count();
  // The stuck agent's long call: one line, cut, in full on hover.
  seen.longCall = await page.locator(`tr.agent[data-agent="${STUCK}"] td.repeat .cut`)
    .evaluate((n) => ({ text: n.textContent, title: n.title, lines: n.getClientRects().length,
                        cut: n.scrollWidth > n.clientWidth }));
  seen.banner = await page.locator("#attention").textContent();
  seen.bannerShown = await page.locator("#attention").isVisible();
  seen.bannerClass = await page.locator("#attention").getAttribute("class");
  // An incident names its agent as a link: following it opens that agent's timeline.
  await page.locator("#incidents a", { hasText: SESSION }).first().click();
  await page.locator("#timeline-agent", { hasText: SESSION }).waitFor({ timeout: WAIT });
  seen.incidentOpens = await page.locator("#timeline-agent").textContent();
  await row.click();
  await page.locator("#timeline .cell.deny").first().waitFor({ timeout: WAIT });
  seen.timelineCells = await page.locator("#timeline .cell").allTextContents();
  seen.timelineTitles = await page.locator("#timeline .cell").evaluateAll(
    (cells) => cells.map((c) => c.title.replace(/^\S+ /, "")));
  seen.next = await page.locator("#next").textContent();
  await page.locator("#incidents .kind").first().waitFor({ timeout: WAIT });
  seen.incident = await page.locator("#incidents li", { hasText: SESSION }).first().textContent();
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.waitForTimeout(700);  // a poll or two at the new width
  // No horizontal scrollbar at 1280 px: neither the page's nor the agents table's.
  seen.wide = await page.evaluate(() => {
    const box = document.querySelector("#agent-table").parentElement;
    return { page: document.documentElement.scrollWidth, table: box.scrollWidth,
             room: box.clientWidth };
  });
  seen.wideOverlaps = [
    ...(await overlaps(page, "main > section")),
    ...(await overlaps(page, "tr.agent:first-child > td")),
  ];
  await page.screenshot({ path: screenshot, fullPage: true });
  await page.setViewportSize({ width: 800, height: 900 });
  await page.waitForTimeout(700);  // a poll or two at the new width
  seen.narrowOverlaps = [
    ...(await overlaps(page, "header > *")),
    ...(await overlaps(page, "main > section")),
    ...(await overlaps(page, "tr.agent:first-child > td")),
  ];
  seen.narrowWidth = await page.evaluate(() => document.documentElement.scrollWidth);
  // An id is one line however narrow the page: it never wraps mid-word.
  seen.idLines = await page.$$eval("tr.agent td .id > span:first-child",
    (spans) => spans.map((s) => [s.textContent, s.getClientRects().length]));
  await page.screenshot({ path: narrow, fullPage: true });
  await page.setViewportSize({ width: 1400, height: 800 });

  started = Date.now();
  await row.locator("button.reset").click();
  await row.waitFor({ state: "detached", timeout: WAIT });
  seen.resetShownMs = Date.now() - started;
  await page.locator("#timeline .cell.reset").waitFor({ timeout: WAIT });
  seen.timelineAfterReset = await page.locator("#timeline p").textContent();
  seen.afterReset = await hook("echo loop");
  seen.error = await page.locator("#error").textContent();
  page.removeAllListeners("console");  // the browser logs the failures it is meant to get
  await page.route("**/api/**", (route) => route.abort());  // as if the guard had gone
  await page.locator("#error", { hasText: "guard not reachable" }).waitFor({ timeout: WAIT });
  seen.unreachable = await page.locator("#error").textContent();
  await page.unroute("**/api/**");
  const bare = await page.goto(origin + "/");
  seen.noToken = {
    status: bare.status(),
    type: bare.headers()["content-type"],
    heading: await page.locator("h1").textContent(),
  };
} finally {
  await context.close();
}
console.log(JSON.stringify(seen));
