// Browser tests of the dashboard: playwright-core driving Debian's chromium
// (/usr/bin/chromium; no browser download). Starts a real sonde (the debug
// build, or $SONDE_BIN) with the sysmetrics and testbed plugins, then:
// opens the dashboard, sees live charts update, changes a config value and
// sees it take effect, sees a refused change's error, uploads a plugin and
// sees it appear, sees a quarantined plugin's reason, sees the timings empty
// state. Screenshots go to target/screenshots/ (or $SCREENSHOTS).
//
// Prints one line per test and a cargo-style summary line
// (`test result: ok. N passed; M failed; ...`) that `just test` adds to its
// total; exits non-zero when any test failed.
//
//   node web/tests/dashboard.mjs            (after `cargo build -p sonde` and the plugins)
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const bin = process.env.SONDE_BIN || join(repo, 'target/debug/sonde');
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
const shots = resolve(process.env.SCREENSHOTS || join(repo, 'target/screenshots'));
const plugin = (rel) => join(repo, 'target/plugins', rel);

for (const [what, p] of [['sonde', bin], ['chromium', chromiumPath], ['sysmetrics plugin', plugin('bundled/sysmetrics.wasm')], ['testbed plugin', plugin('testing/testbed.wasm')]]) {
  if (!existsSync(p)) {
    console.error(`${what} is missing at ${p} (the test recipe builds and installs it: ./dev test)`);
    console.log('test result: FAILED. 0 passed; 1 failed; 0 ignored');
    process.exit(1);
  }
}

const freePort = () => new Promise((ok) => {
  const s = createServer();
  s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => ok(port)); });
});

// The environment minus SONDE_* (sonde reads those as config: SONDE_BIN would be a key `bin`) and OTLP export.
function childEnv() {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SONDE_')));
  delete env.OTEL_EXPORTER_OTLP_ENDPOINT;
  return env;
}

async function startSonde() {
  const dir = mkdtempSync(join(tmpdir(), 'sonde-browser-'));
  for (const d of ['plugins', 'sinks', 'data']) mkdirSync(join(dir, d));
  copyFileSync(plugin('bundled/sysmetrics.wasm'), join(dir, 'plugins/sysmetrics.wasm'));
  copyFileSync(plugin('testing/testbed.wasm'), join(dir, 'plugins/echo.wasm'));
  const cache = join(repo, 'target/test-plugin-cache');
  mkdirSync(cache, { recursive: true });
  symlinkSync(cache, join(dir, 'data/cache'));
  const port = await freePort();
  const out = [];
  const child = spawn(bin, [
    '--data-dir', join(dir, 'data'), '--plugins-dir', join(dir, 'plugins'), '--sinks-dir', join(dir, 'sinks'),
    '--listen', `127.0.0.1:${port}`,
    // a trapping plugin is quarantined after 2 traps, quickly
    '--set', 'plugins.max_traps=2', '--set', 'plugins.backoff_initial_ms=20',
  ], { stdio: ['ignore', 'pipe', 'pipe'], env: childEnv() });
  child.stdout.on('data', (d) => out.push(d));
  child.stderr.on('data', (d) => out.push(d));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    try { if ((await fetch(`${url}/api/ready`)).ok) return { child, url, dir, out }; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill();
  throw new Error(`sonde did not become ready:\n${Buffer.concat(out)}`);
}

const until = async (what, f, ms = 20000) => {
  const t0 = Date.now();
  let last;
  while (Date.now() - t0 < ms) {
    try { last = await f(); if (last) return last; } catch (e) { last = e; }
    await new Promise((r) => setTimeout(r, 150));
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`);
};

const status = async (url) => (await fetch(`${url}/api/status`)).json();

const tests = [];
const test = (name, f) => tests.push([name, f]);

test('the dashboard opens and shows the status', async ({ page, url }) => {
  await page.goto(url);
  if (await page.title() !== 'sonde') throw new Error(`title ${await page.title()}`);
  await until('the summary', async () => /sampling every \d+ ms/.test(await page.textContent('#summary')));
  if ((await page.content()).includes('built without the dashboard')) throw new Error('the fallback page is served: web/dist was not built into sonde');
});

test('live charts update', async ({ page }) => {
  const cpu = page.locator('.chart[data-title="CPU utilization per core"]');
  await until('CPU chart data', async () => +(await cpu.getAttribute('data-points')) > 3);
  const u0 = +(await cpu.getAttribute('data-updates'));
  const img0 = await cpu.locator('canvas').screenshot();
  await until('a chart update', async () => +(await cpu.getAttribute('data-updates')) > u0 + 1);
  await until('the canvas to change', async () => !(await cpu.locator('canvas').screenshot()).equals(img0), 10000);
  for (const t of ['Memory', 'Network', 'Disk']) {
    const c = page.locator(`.chart[data-title="${t}"]`);
    if (await c.count() && !(await c.isHidden())) await until(`${t} data`, async () => +(await c.getAttribute('data-points')) > 0);
  }
  await page.screenshot({ path: join(shots, 'system.png'), fullPage: true });
});

test('a config change in the editor takes effect', async ({ page, url }) => {
  await page.click('#tabs button[data-view=config]');
  await until('the config text', async () => (await page.inputValue('#config-text')).includes('period_ms'));
  await page.fill('#quick-period', '50');
  await page.click('#quick button[type=submit]');
  await until('the applied note', async () => (await page.textContent('#config-result')).includes('Applied'));
  const st = await status(url);
  if (st.sampling_period_ms !== 50) throw new Error(`sampling_period_ms is ${st.sampling_period_ms}`);
  await until('the header to show it', async () => (await page.textContent('#period')).includes('every 50 ms'));
  await page.screenshot({ path: join(shots, 'config-applied.png'), fullPage: true });
});

test('a refused change shows the key and the reason and changes nothing', async ({ page, url }) => {
  await page.click('#config-reload');
  await until('the reloaded config', async () => (await page.inputValue('#config-text')).includes('"period_ms": 50'));
  const text = (await page.inputValue('#config-text')).replace('"period_ms": 50', '"period_ms": 1');
  await page.fill('#config-text', text);
  await page.click('#config-apply');
  const err = page.locator('#config-result .config-error').first();
  await until('the error', async () => (await err.textContent()).includes('sampler.period_ms'));
  if (!(await err.textContent()).includes('out of range')) throw new Error(await err.textContent());
  const st = await status(url);
  if (st.sampling_period_ms !== 50) throw new Error(`the running period changed to ${st.sampling_period_ms}`);
  await page.screenshot({ path: join(shots, 'config-refused.png'), fullPage: true });
});

async function upload(page, dir, name) {
  const file = join(dir, `${name}.wasm`);
  copyFileSync(plugin('testing/testbed.wasm'), file);
  await page.setInputFiles('#upload-file', file);
  await page.fill('#upload-name', '');
  await page.click('#upload button[type=submit]');
}

test('an uploaded plugin appears and runs', async ({ page, dir }) => {
  await page.click('#tabs button[data-view=plugins]');
  await until('the plugins table', async () => (await page.locator('#plugins tr[data-plugin=sysmetrics]').count()) === 1);
  await upload(page, dir, 'uploaded');
  const row = page.locator('#plugins tr[data-plugin=uploaded]');
  await until('the uploaded plugin running', async () => (await row.getAttribute('data-state')) === 'running');
  await until('its panel', async () => (await page.locator('details[data-panel=uploaded]').count()) === 1);
  await page.screenshot({ path: join(shots, 'plugin-uploaded.png'), fullPage: true });
});

test('a quarantined plugin shows why', async ({ page, dir }) => {
  await upload(page, dir, 'trap-web'); // the testbed traps in every hook when named trap*
  const row = page.locator('#plugins tr[data-plugin=trap-web]');
  await until('quarantine', async () => (await row.getAttribute('data-state')) === 'quarantined', 30000);
  const reason = await row.locator('td.reason').textContent();
  if (!reason.includes('quarantined after 2 traps') || !reason.includes('deliberate trap')) throw new Error(reason);
  await page.screenshot({ path: join(shots, 'plugin-quarantined.png'), fullPage: true });
});

test('timings show a clear empty state without the determined plugin', async ({ page }) => {
  await page.click('#tabs button[data-view=timings]');
  await until('the empty state', async () => (await page.textContent('#timings-empty')).includes('determined plugin is not loaded'));
  await page.screenshot({ path: join(shots, 'timings-empty.png'), fullPage: true });
});

test('timings per batch index are drawn from the plugin\'s rows', async ({ page }) => {
  // The determined plugin is a separate issue: stand in for its route with rows of its documented shape.
  const rows = [];
  for (let b = 0; b < 20; b++) {
    for (const [name, d] of [['dataloader_next', 0.02], ['train_batch', 0.1 + b / 200], ['to_device', 0.005]]) {
      rows.push({ job: 'j1', name, batch_idx: b, start_ns: 1e18 + b * 1e8, duration_s: d });
    }
  }
  await page.route('**/api/plugins/determined/timings*', (r) => r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(rows) }));
  await page.click('#tabs button[data-view=system]');
  await page.click('#tabs button[data-view=timings]');
  await until('the timings chart', async () => (await page.locator('#timings-chart canvas').count()) === 1);
  const text = await page.textContent('#timings-chart');
  for (const want of ['train_batch', 'dataloader_next', '60 timings, 20 batches, 3 phases']) {
    if (!text.includes(want)) throw new Error(`${want} not in ${text}`);
  }
  if (!(await page.isHidden('#timings-empty'))) throw new Error('the empty state is still shown');
  await page.screenshot({ path: join(shots, 'timings.png'), fullPage: true });
  await page.unroute('**/api/plugins/determined/timings*');
});

async function main() {
  mkdirSync(shots, { recursive: true });
  const sonde = await startSonde();
  const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  // Nothing may come from anywhere but sonde: the dashboard works offline.
  const foreign = [];
  page.on('request', (r) => { if (!r.url().startsWith(sonde.url)) foreign.push(r.url()); });
  let passed = 0;
  let failed = 0;
  test('no script errors and no requests beyond sonde', async () => {
    if (pageErrors.length) throw new Error(pageErrors.join('\n'));
    if (foreign.length) throw new Error(`requests to ${foreign.join(', ')}`);
  });
  for (const [name, f] of tests) {
    const t0 = Date.now();
    try {
      await f({ page, url: sonde.url, dir: sonde.dir });
      passed++;
      console.log(`test browser::${name} ... ok (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`test browser::${name} ... FAILED\n    ${String(e.stack || e).split('\n').join('\n    ')}`);
      await page.screenshot({ path: join(shots, `failed-${tests.findIndex((t) => t[0] === name)}.png`), fullPage: true }).catch(() => {});
    }
  }
  await browser.close();
  sonde.child.kill('SIGTERM');
  if (failed) console.log(`sonde output:\n${Buffer.concat(sonde.out).toString().slice(-4000)}`);
  rmSync(sonde.dir, { recursive: true, force: true });
  console.log(`screenshots in ${shots}`);
  console.log(`\ntest result: ${failed ? 'FAILED' : 'ok'}. ${passed} passed; ${failed} failed; 0 ignored`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => { console.error(e); console.log('test result: FAILED. 0 passed; 1 failed; 0 ignored'); process.exit(1); });
