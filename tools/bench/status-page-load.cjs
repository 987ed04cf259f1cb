// Opens the status page of a session in headless Chromium (Playwright) and
// reports how long until it shows the session's counts, its graph and the
// first page of its task table; then keeps the page open (live updates
// flowing) for HOLD seconds. Used by tools/bench/status-page.sh.
// usage: node status-page-load.cjs NODE_MODULES URL HOLD_SECONDS
'use strict';
const path = require('node:path');

const [modules, url, hold] = process.argv.slice(2);
const { chromium } = require(path.join(path.resolve(modules), 'playwright-core'));

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.SQUALL_CHROMIUM || '/usr/bin/chromium', headless: true, args: ['--no-sandbox'],
  });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(30000);
  // The first navigation to a site starts Chromium's renderer for it (about
  // 2 s on the test VM): that is measured apart, on the overview, and the
  // session view's loads follow.
  const cold = Date.now();
  await page.goto(new URL('/', url).href);
  await page.locator('[data-testid=governor-row]').first().waitFor();
  console.log(`first_navigation_ms=${Date.now() - cold}`);
  const times = [];
  for (let i = 0; i < 5; i++) {
    const start = Date.now();
    await page.goto(url);
    await page.locator('[data-testid=count-finished]').waitFor();
    await page.locator('[data-testid=dag] g[role=link]').first().waitFor();
    await page.locator('[data-testid=task-row]').first().waitFor();
    times.push(Date.now() - start);
  }
  console.log(`page_load_ms=${times.join(',')}`);
  const before = Number(await page.locator('[data-testid=count-finished]').getAttribute('data-count'));
  await page.waitForTimeout(Number(hold) * 1000);
  const after = Number(await page.locator('[data-testid=count-finished]').getAttribute('data-count'));
  console.log(`live_finished_before=${before} live_finished_after=${after}`);
  await browser.close();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
