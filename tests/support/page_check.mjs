// The live page in real headless Chromium (Debian's, driven by playwright-core), as a
// person opens it: with the address `serve --http` printed. Usage:
//   node page_check.mjs ORIGIN TOKEN PROFILE_DIR SCREENSHOT
// It loads the page, makes hook requests itself (a new agent, then its denial), waits for
// the page to show each, clicks the agent's reset button, and prints one JSON line of
// what it saw and how long each took. Every wait is bounded.
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "e2e", "package.json"));
const { chromium } = require("playwright-core");

const [origin, token, profile, screenshot] = process.argv.slice(2);
const SESSION = "browser-session-1";
const WAIT = 10000;

async function hook(command) {
  const event = {
    session_id: SESSION, hook_event_name: "PreToolUse", tool_name: "Bash",
    tool_input: { command, description: "page check" }, tool_use_id: "toolu_page",
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
try {
  const page = await context.newPage();
  page.on("console", (message) => seen.console.push(message.type() + ": " + message.text()));
  page.on("pageerror", (error) => seen.console.push("pageerror: " + error.message));
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

  for (let i = 0; i < 5; i++) await hook("echo loop");
  started = Date.now();
  seen.denied = await hook("echo loop");
  await row.locator(".badge.denied").waitFor({ timeout: WAIT });
  seen.denialShownMs = Date.now() - started;
  seen.denialCells = await row.locator("td.num").allTextContents();
  await row.click();
  await page.locator("#timeline .cell.deny").first().waitFor({ timeout: WAIT });
  seen.timelineCells = await page.locator("#timeline .cell").count();
  await page.locator("#incidents .kind").first().waitFor({ timeout: WAIT });
  seen.incident = await page.locator("#incidents li").first().textContent();
  await page.screenshot({ path: screenshot, fullPage: true });

  started = Date.now();
  await row.locator("button.reset").click();
  await row.waitFor({ state: "detached", timeout: WAIT });
  seen.resetShownMs = Date.now() - started;
  await page.locator("#timeline .cell.reset").waitFor({ timeout: WAIT });
  seen.timelineAfterReset = await page.locator("#timeline p").textContent();
  seen.afterReset = await hook("echo loop");
  seen.error = await page.locator("#error").textContent();
} finally {
  await context.close();
}
console.log(JSON.stringify(seen));
