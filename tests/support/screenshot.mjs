// A page in real headless Chromium (Debian's, driven by playwright-core), screenshotted:
//   node screenshot.mjs URL PROFILE_DIR OUT.png WIDTH
// Prints one JSON line: the page's title and the labels of its charts' marks with their
// boxes, so a test can check that none overlap.
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "e2e", "package.json"));
const { chromium } = require("playwright-core");

const [url, profile, out, width] = process.argv.slice(2);
const context = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"],
  viewport: { width: Number(width), height: 900 },
});
try {
  const page = await context.newPage();
  await page.goto(url);
  await page.evaluate(() => document.querySelectorAll("details").forEach((d) => { d.open = true; }));
  const labels = await page.$$eval("svg text.tick", (nodes) => nodes
    .filter((n) => /^(first denial|first budget denial|stop): /.test(n.textContent))
    .map((n) => { const b = n.getBoundingClientRect(); return [n.textContent, b.left, b.top, b.right, b.bottom]; }));
  await page.screenshot({ path: out, fullPage: true });
  console.log(JSON.stringify({ title: await page.title(), labels }));
} finally {
  await context.close();
}
