// Opens the dashboard in headless Chromium and checks it against a live
// node. Run by tests/dashboard.rs, which talks to it line by line:
//   this script prints  "rows <n>"  once the page shows the view's graph,
//   waits for           "go"        (the test has written more rows),
//   then prints         "ok"        once the page's counters have moved
// and a screenshot is saved. Usage: node check.js URL VIEW SCREENSHOT
"use strict";
const readline = require("node:readline");
const { chromium } = require("playwright-core");

const [url, view, screenshot] = process.argv.slice(2);
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

// The most rows any operator of the drawn graph has taken in.
const rowsIn = page =>
  page.$$eval("#graph-body g.op", ops => Math.max(0, ...ops.map(op => Number(op.dataset.rowsIn))));

async function main() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const errors = [];
    page.on("pageerror", e => errors.push(String(e)));
    await page.goto(url);
    await page.waitForSelector(`#views tr[data-view="${view}"]`, { timeout: 30000 });
    await page.click(`#views tr[data-view="${view}"]`);
    await page.waitForSelector("#graph-body svg g.op", { timeout: 30000 });
    const title = await page.textContent("#graph-title");
    if (!title.includes(view)) throw new Error(`the graph is of ${title}`);
    const sources = await page.$$eval("#graph-body g.src", gs => gs.map(g => g.dataset.relation));
    if (!sources.length) throw new Error("the graph shows no source");
    const before = await rowsIn(page);
    const changesBefore = await page.textContent(`#views tr[data-view="${view}"] td.changes`);
    console.log(`rows ${before}`);
    const next = await lines.next();
    if (next.value !== "go") throw new Error(`expected go, got ${next.value}`);
    await page.waitForFunction(
      ([b, v, c]) => {
        const ops = [...document.querySelectorAll("#graph-body g.op")];
        const rows = Math.max(0, ...ops.map(op => Number(op.dataset.rowsIn)));
        const cell = document.querySelector(`#views tr[data-view="${v}"] td.changes`);
        return rows > b && cell && cell.textContent !== c;
      },
      [before, view, changesBefore],
      { timeout: 30000 },
    );
    await page.screenshot({ path: screenshot, fullPage: true });
    if (errors.length) throw new Error(`the page failed: ${errors.join("; ")}`);
    console.log("ok");
  } finally {
    await browser.close();
  }
}

main().then(
  () => process.exit(0),
  e => {
    console.error(String(e && e.stack || e));
    process.exit(1);
  },
);
