// The status page in a real browser: Playwright (npm playwright-core)
// drives Debian's Chromium headless against a real squall-server with two
// governors while `squall run` runs a pipeline with a failing task. Checks
// what a user sees: the governors, the session appearing and its counts
// changing without a reload, the failed task's stderr. Run by ctest
// (tests/CMakeLists.txt), which passes the programs' paths in the
// environment. Optionally writes a screenshot of the session view
// (SQUALL_SCREENSHOT=path.png), as in docs/status-page.md.
'use strict';
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');

const env = (name, fallback) => {
  const value = process.env[name] || fallback;
  if (!value) throw new Error(`${name} is not set (ctest sets it; see tests/CMakeLists.txt)`);
  return value;
};
const CHROMIUM = env('SQUALL_CHROMIUM', '/usr/bin/chromium');
const SERVER = env('SQUALL_SERVER_BIN');
const GOVERNOR = env('SQUALL_GOVERNOR_BIN');
const SQUALL = env('SQUALL_CLI_BIN');
const EXECUTOR = env('SQUALL_TEST_EXECUTOR');
const NESTED = env('SQUALL_NESTED_EXECUTOR');
const MODULES = env('SQUALL_WEB_MODULES');
const TIMEOUT = 15000; // every wait for the page, ms

if (!fs.existsSync(CHROMIUM)) {
  console.error(`FAIL: no Chromium at ${CHROMIUM}; install Debian's (apt-get install chromium; tools/setup.sh does) or set SQUALL_CHROMIUM`);
  process.exit(1);
}
const { chromium } = require(path.join(MODULES, 'playwright-core'));

const children = [];
let work;

// Starts a program and resolves with the first stdout line starting with
// `prefix` (the rest of its output goes to ours).
function start(program, args, prefixes) {
  const child = spawn(program, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  const found = {};
  return new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stdout });
    const timer = setTimeout(() => reject(new Error(`${path.basename(program)} did not start in 30 s`)), 30000);
    lines.on('line', (line) => {
      for (const prefix of prefixes) {
        if (line.startsWith(prefix)) found[prefix] = line.slice(prefix.length);
      }
      if (prefixes.every((p) => p in found)) {
        clearTimeout(timer);
        resolve({ child, found });
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${path.basename(program)} exited (${code}) before starting`));
    });
  });
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

async function main() {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'squall-web-'));
  const server = await start(SERVER, ['--listen', '127.0.0.1:0', '--http', '127.0.0.1:0', '--log-level', 'warn',
    '--log', path.join(work, 'server.sqlite')],
    ['listening address=', 'http address=']);
  const rpc = server.found['listening address='];
  const http = `http://${server.found['http address=']}`;
  for (const i of [0, 1]) {
    // governor-1 keeps the tests' executor warm: its functions are listed.
    // governor-0 offers two GPUs: its resources column shows them.
    const executor = i === 1 ? ['--executor', `testfn=${EXECUTOR}`] : ['--resource', 'gpus=[0,1]'];
    await start(GOVERNOR, ['--server', rpc, '--work-dir', path.join(work, `governor-${i}`), '--name', `governor-${i}`,
      '--cpus', '2', '--log-level', 'warn', ...executor], ['registered governor=']);
  }

  // Twelve tasks held at a gate (so the test decides when counts move), one
  // that fails at once, and a last step held at a second gate so the
  // session stays open until the end.
  const gate = path.join(work, 'gate');
  const gate2 = path.join(work, 'gate2');
  const pipeline = path.join(work, 'browser-test.toml');
  // The failing step is said to be long, so the scheduler starts it first
  // (critical path first): the held ones would otherwise fill the cpus.
  fs.writeFileSync(pipeline, `name = "browser-test"
[step.broken]
shell = "echo 'broken: cannot open input.csv' >&2; exit 3"
expected = "1h"

[step.work]
range = "1-12"
shell = "while [ ! -e ${gate} ]; do sleep 0.05; done; echo part {item}"
stdout = true

[step.collect]
shell = "while [ ! -e ${gate2} ]; do sleep 0.05; done; cat \\"$@\\""
inputs = { "parts/{index}" = { from = "@work", arg = true } }
stdout = true
`);

  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.setDefaultTimeout(TIMEOUT);
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    let loads = 0;
    page.on('load', () => { loads++; });

    // Overview: the governors, then the session appears by itself.
    await page.goto(`${http}/`);
    await page.locator('[data-testid=governor-row]').nth(1).waitFor();
    const names = await page.locator('[data-testid=governor-row]').evaluateAll((rows) => rows.map((r) => r.dataset.name));
    check(names.join(',') === 'governor-0,governor-1', `governors listed: ${names}`);
    const functions = await page.locator('[data-testid=governor-functions]').allTextContents();
    check(functions[0] === '—' && /^testfn \(\d+\)$/.test(functions[1]), `functions listed: ${functions}`);
    const offered = await page.locator('[data-testid=governor-functions]').nth(1).getAttribute('title');
    check(offered.split('\n').includes('testfn/upper'), `functions in the title: ${offered}`);
    await page.locator('#live[data-state=live]').waitFor();
    const pools = await page.locator('[data-testid=governor-resources]').allTextContents();
    check(/(^|, )gpus 0\/2(,|$)/.test(pools[0]) && !/gpus/.test(pools[1]), `resources listed: ${pools}`);
    console.log('ok: overview lists governor-0 and governor-1 (its functions and resources too), live');

    const run = spawn(SQUALL, ['run', '--keep-going', pipeline], {
      stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, SQUALL_SERVER: rpc },
    });
    children.push(run);
    const runExit = new Promise((resolve) => run.on('exit', (code) => resolve(code)));
    const row = page.locator('[data-testid=session-row]', { hasText: 'browser-test' });
    await row.waitFor();
    check(loads === 1, 'the overview reloaded');
    console.log('ok: the session appeared on the overview without a reload');

    await row.getByRole('link', { name: 'browser-test' }).click();
    await page.waitForURL(/\/sessions\/\d+$/);
    const sessionUrl = page.url();
    const badges = () => page.locator('[data-testid=session-state] .badge')
      .evaluateAll((found) => found.map((b) => b.dataset.state).join(','));
    const count = (state) => page.locator(`[data-testid=count-${state}]`);
    await page.locator('[data-testid=count-running]:not([data-count="0"])').waitFor();
    await page.locator('[data-testid=count-failed][data-count="1"]').waitFor();
    const before = Number(await count('finished').getAttribute('data-count'));
    check(before === 0, `finished before the gate opened: ${before}`);
    await page.locator('[data-testid=dag] g[data-task]').first().waitFor();
    check(await badges() === 'open', `badges of the open session: ${await badges()}`);
    console.log('ok: session view shows running tasks, one failure, the graph');

    fs.writeFileSync(gate, '');
    await page.locator('[data-testid=count-finished][data-count="12"]').waitFor();
    await page.locator('[data-testid=timeline] rect.bar').first().waitFor();
    check(loads === 1, 'the page reloaded to show new counts');
    console.log('ok: finished went 0 -> 12 live, timeline drawn');

    // Failures first: in the failures panel and at the top of the table.
    const firstRow = page.locator('[data-testid=task-row]').first();
    await page.locator('[data-testid=task-row][data-state=failed]').first().waitFor();
    check(await firstRow.getAttribute('data-state') === 'failed', 'the table does not start with the failure');
    if (process.env.SQUALL_SCREENSHOT) {
      await page.waitForTimeout(300); // let the last repaint settle for the picture
      await page.screenshot({ path: process.env.SQUALL_SCREENSHOT, fullPage: true });
      console.log(`screenshot: ${process.env.SQUALL_SCREENSHOT}`);
    }
    await page.locator('[data-testid=failures] a', { hasText: 'broken' }).click();
    await page.waitForURL(/\/tasks\/\d+$/);
    const stderr = await page.locator('[data-testid=task-stderr]').textContent();
    check(stderr.includes('broken: cannot open input.csv'), `stderr shown: ${JSON.stringify(stderr)}`);
    await page.getByText('exit 3', { exact: false }).first().waitFor();
    console.log('ok: the failed task shows its stderr');

    // Bad links get a clear page, not a blank one.
    const missing = await page.goto(`${http}/sessions/999999`);
    check(missing.status() === 200, 'app page for an unknown session');
    await page.locator('[data-testid=error]').waitFor();
    const bad = await page.goto(`${http}/sessions/abc`);
    check(bad.status() === 400, `bad id answered ${bad.status()}`);
    check(errors.length === 0, `page errors: ${errors.join('; ')}`);
    console.log('ok: unknown session and bad id handled');

    fs.writeFileSync(gate2, '');
    const code = await Promise.race([runExit, new Promise((r) => setTimeout(() => r('timeout'), 30000))]);
    check(code === 1, `squall run exit status ${code} (1: a task failed)`);

    // `squall run` has exited and closed its session: the page still draws
    // all of it, with one state (--keep-going: the failure was allowed).
    await page.goto(sessionUrl);
    await page.locator('[data-testid=closed-note]').waitFor();
    check(await badges() === 'closed', `badges of the closed session: ${await badges()}`);
    await page.locator('[data-testid=dag] g[data-task]').nth(13).waitFor();
    const nodes = await page.locator('[data-testid=dag] g[data-task]').count();
    check(nodes === 14, `graph nodes of the closed session: ${nodes}`);
    const finishedNodes = await page.locator('[data-testid=dag] g[data-task][data-state=finished]').count();
    check(finishedNodes === 13, `finished nodes of the closed session: ${finishedNodes}`);
    await page.locator('[data-testid=timeline] rect.bar').nth(13).waitFor();
    await page.locator('[data-testid=count-finished][data-count="13"]').waitFor();
    await page.locator('[data-testid=task-row]').nth(13).waitFor();
    check(await page.getByText('no longer held').count() === 0, 'the page says the session is no longer held');
    await page.locator('[data-testid=failures] a', { hasText: 'broken' }).click();
    await page.waitForURL(/\/tasks\/\d+$/);
    const closedStderr = await page.locator('[data-testid=task-stderr]').textContent();
    check(closedStderr.includes('broken: cannot open input.csv'), `stderr of the closed session's task: ${JSON.stringify(closedStderr)}`);
    await page.goto(`${http}/`);
    const closedRow = page.locator('[data-testid=session-row]', { hasText: 'browser-test' });
    await closedRow.waitFor();
    const rowBadges = await closedRow.locator('.badge').evaluateAll((found) => found.map((b) => b.dataset.state).join(','));
    check(rowBadges === 'closed', `badges of the closed session on the overview: ${rowBadges}`);
    check(errors.length === 0, `page errors: ${errors.join('; ')}`);
    console.log('ok: the closed session shows one state, its graph, timeline, table and failure');

    // A task that submits tasks (docs/nested.md): its page lists them, and
    // theirs name it. A third governor offers the nested tests' executor;
    // the three leaves wait for a file, so the session stays open.
    await start(GOVERNOR, ['--server', rpc, '--work-dir', path.join(work, 'governor-2'), '--name', 'governor-2',
      '--cpus', '4', '--log-level', 'warn', '--executor', `tree=${NESTED}`], ['registered governor=']);
    const tree = path.join(work, 'tree');
    fs.mkdirSync(tree);
    const treePipeline = path.join(work, 'browser-tree.toml');
    fs.writeFileSync(treePipeline, `name = "browser-tree"
[step.root]
call = "tree/node"
config = "1 3 ${tree} root 0 block"
`);
    const treeRun = spawn(SQUALL, ['run', treePipeline], {
      stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, SQUALL_SERVER: rpc },
    });
    children.push(treeRun);
    const treeExit = new Promise((resolve) => treeRun.on('exit', (code) => resolve(code)));
    const treeRow = page.locator('[data-testid=session-row]', { hasText: 'browser-tree' });
    await treeRow.getByRole('link', { name: 'browser-tree' }).click();
    await page.waitForURL(/\/sessions\/\d+$/);
    await page.locator('[data-testid=task-row]').nth(3).waitFor();
    await page.locator('[data-testid=task-row]').getByRole('link', { name: 'root', exact: true }).click();
    await page.waitForURL(/\/tasks\/\d+$/);
    await page.locator('[data-testid=task-children] li').nth(2).waitFor();
    const listed = await page.locator('[data-testid=task-children] li').allTextContents();
    check(listed.length === 3 && listed.every((text, i) => text.includes(`node root.${i}`)), `children listed: ${listed}`);
    await page.locator('[data-testid=task-children] a', { hasText: 'node root.1' }).click();
    await page.waitForURL(/\/tasks\/\d+$/);
    const parent = await page.locator('[data-testid=task-parent]').textContent();
    check(parent.includes('root'), `parent shown: ${JSON.stringify(parent)}`);
    fs.writeFileSync(path.join(tree, 'release'), '');
    const treeCode = await Promise.race([treeExit, new Promise((r) => setTimeout(() => r('timeout'), 30000))]);
    check(treeCode === 0, `squall run of the tree exit status ${treeCode}`);
    check(errors.length === 0, `page errors: ${errors.join('; ')}`);
    console.log('ok: a task that submitted tasks lists them; a child links to its parent');
  } finally {
    await browser.close();
  }
}

function cleanup() {
  for (const child of children.reverse()) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  }
  if (work) fs.rmSync(work, { recursive: true, force: true });
}

const guard = setTimeout(() => {
  console.error('FAIL: the browser test took more than 150 s');
  cleanup();
  process.exit(1);
}, 150000);

main().then(() => {
  clearTimeout(guard);
  cleanup();
  console.log('1 passed, 0 failed');
}, (e) => {
  clearTimeout(guard);
  console.error(`FAIL: ${e.stack || e.message}`);
  cleanup();
  process.exitCode = 1;
});
