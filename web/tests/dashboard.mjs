// Browser tests of the dashboard itself (see harness.mjs for how they run):
// opens the dashboard, sees live charts update, changes a config value and
// sees it take effect, sees a refused change's error, uploads a plugin and
// sees it appear, sees a quarantined plugin's reason, sees the timings empty
// state. Plugin panels have their own suites (panel-<plugin>.mjs).
//
//   node web/tests/dashboard.mjs            (after `cargo build -p sonde` and the plugins)
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { suite, until, status, plugin, shots } from './harness.mjs';

const tests = [];
const test = (name, f) => tests.push([name, f]);

test('the dashboard opens and shows the status', async ({ page, url }) => {
  await page.goto(url);
  // The title names the view too ("sonde · system"), so a tab or bookmark says which.
  if (!/^sonde( · |$)/.test(await page.title())) throw new Error(`title ${await page.title()}`);
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

test('the CPU chart draws the busy share of each CPU, 1 − idle − iowait of its modes', async ({ page }) => {
  const cpu = page.locator('.chart[data-title="CPU utilization per core"]');
  await until('CPU chart data', async () => +(await cpu.getAttribute('data-points')) > 3);
  // What the feed holds: the host's mode series and the busy shares derived from them.
  const got = await page.evaluate(() => {
    const feed = window.sondeFeed;
    const modes = feed.series((m) => m.name === 'system.cpu.utilization' && m.attributes['cpu.mode'] !== undefined);
    const busy = feed.series((m) => m.derived === 'busy');
    const key = (m) => String(m.attributes['cpu.logical_number'] ?? 'all');
    const checks = busy.map((b) => {
      const of = (mode) => modes.find((m) => key(m) === key(b) && m.attributes['cpu.mode'] === mode);
      const [d, idle, iowait] = [feed.data.get(b.id), feed.data.get(of('idle').id), feed.data.get(of('iowait').id)];
      let worst = 0;
      d.t.forEach((t, i) => {
        const k = idle.t.indexOf(t);
        const w = iowait.t.indexOf(t);
        worst = Math.max(worst, Math.abs(d.mean[i] - Math.min(1, Math.max(0, 1 - idle.mean[k] - (w < 0 ? 0 : iowait.mean[w])))));
      });
      return { cpu: key(b), points: d.t.length, worst, inRange: d.mean.every((v) => v >= 0 && v <= 1) };
    });
    const cpus = new Set(modes.map(key));
    return { modes: modes.length, cpus: [...cpus].sort(), checks };
  });
  if (got.modes !== 7 * got.cpus.length) throw new Error(`${got.modes} mode series for ${got.cpus.length} CPUs: ${JSON.stringify(got)}`);
  if (got.checks.map((c) => c.cpu).sort().join() !== got.cpus.join()) throw new Error(`busy series ${JSON.stringify(got.checks)} for CPUs ${got.cpus}`);
  for (const c of got.checks) {
    if (!c.points || !c.inRange || c.worst > 1e-6) throw new Error(`CPU ${c.cpu}: ${JSON.stringify(c)}`);
  }
  // The chart draws those, one line per CPU, and none of the mode series.
  const labels = await cpu.locator('.u-legend .u-series th').allTextContents();
  const want = got.cpus.map((c) => (c === 'all' ? 'all' : `cpu ${c}`)).sort();
  if (JSON.stringify(labels.slice(1).map((l) => l.trim()).sort()) !== JSON.stringify(want)) throw new Error(`legend ${JSON.stringify(labels)}, want ${want}`);
});

test('an hour\'s window draws each bucket\'s min-max band: a spike shorter than a bucket stays on the axis', async ({ page, url }) => {
  // A stream served in place of sonde's: an hour of 3.6 s buckets of memory
  // use, 1 GiB on average; one bucket's max is 4 GiB (a spike its mean hides).
  const GiB = 2 ** 30;
  const now = Date.now();
  const t = [...Array(200).keys()].map((i) => now - (200 - i) * 3600);
  const mean = t.map((_, i) => (i === 150 ? 1.2 * GiB : GiB));
  const max = t.map((_, i) => (i === 150 ? 4 * GiB : GiB));
  const snapshot = {
    now_ms: now, window_ms: 3600e3, decisions: [],
    series: [{ id: 1, name: 'system.memory.usage', unit: 'By', plugin: 'sampler', attributes: { 'system.memory.state': 'used' } }],
    data: [{ id: 1, t, mean, min: mean.map(() => GiB), max }],
  };
  await page.route('**/api/stream?*', (r) => r.fulfill({ contentType: 'text/event-stream', body: `event: snapshot\ndata: ${JSON.stringify(snapshot)}\n\n` }));
  await page.goto(`${url}/#/system?window=3600`);
  await page.reload();
  const mem = page.locator('.chart[data-title="Memory"]');
  await until('the memory chart with its bands', async () => (await mem.getAttribute('data-bands')) === 'true');
  const top = +(await mem.getAttribute('data-y-max'));
  if (!(top >= 4 * GiB)) throw new Error(`the axis ends at ${(top / GiB).toFixed(2)} GiB, under the 4 GiB spike`);
  // Drawn: above the 1 GiB line, the column of the spike has band ink; the same height elsewhere has none.
  const ink = await mem.locator('canvas').first().evaluate((c) => {
    const g = c.getContext('2d');
    const d = g.getImageData(0, 0, c.width, c.height).data;
    const tinted = (i) => d[i + 3] > 0 && d[i + 2] > d[i] + 10 && d[i] < 240; // a light blue, not white or grey
    const rows = Math.floor(c.height * 0.45); // the upper part of the plot: 2 GiB and more
    const counts = new Array(c.width).fill(0);
    for (let y = 0; y < rows; y++) for (let x = 0; x < c.width; x++) if (tinted((y * c.width + x) * 4)) counts[x]++;
    return counts.filter((n) => n > 3).length;
  });
  if (ink < 1) throw new Error('no band drawn above the mean line where the spike was');
  await mem.screenshot({ path: join(shots, 'memory-band.png') });
  await page.unroute('**/api/stream?*');
  await page.goto(`${url}/#/system?window=300`);
  await page.reload();
});

test('a config change in the editor takes effect', async ({ page, url }) => {
  await page.click('#tabs a[data-view=config]');
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
  await page.click('#tabs a[data-view=plugins]');
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

test('timings show a clear empty state before any job reported timings', async ({ page }) => {
  await page.click('#tabs a[data-view=timings]');
  await until('the empty state', async () => (await page.textContent('#timings-empty')).includes('No job has reported timings yet'));
  await page.screenshot({ path: join(shots, 'timings-empty.png'), fullPage: true });
});

test('timings per batch index are drawn from the host\'s job view, whatever plugins run', async ({ page, url }) => {
  // Two ranks of a training job post their steps; no plugin takes timings here.
  for (const rank of [0, 1]) {
    const timings = [];
    for (let b = 0; b < 20; b++) {
      const t0 = Date.now() * 1e6 - (20 - b) * 1e8;
      for (const [name, s] of [['dataloader_next', 0.02], ['train_batch', 0.1 + b / 200 + rank / 100]]) {
        timings.push({ name, start_ns: t0, end_ns: t0 + Math.round(s * 1e9), batch_idx: b });
      }
    }
    const r = await fetch(`${url}/api/ingest`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ origin: { job: 'j1', rank, local_rank: rank }, timings }),
    });
    if (r.status !== 202) throw new Error(`ingest: ${r.status} ${await r.text()}`);
  }
  await page.click('#tabs a[data-view=system]');
  await page.click('#tabs a[data-view=timings]');
  await until('the timings chart', async () => (await page.locator('#timings-chart canvas').count()) === 1);
  await until('every step', async () => (await page.textContent('#timings-chart')).includes('80 timings, 20 batches, 2 phases, 2 ranks'));
  const text = await page.textContent('#timings-chart');
  for (const want of ['train_batch', 'dataloader_next', 'j1: duration by batch index']) {
    if (!text.includes(want)) throw new Error(`${want} not in ${text}`);
  }
  if ((await page.inputValue('#timings-job')) !== 'j1') throw new Error('the job is not picked');
  if (!(await page.isHidden('#timings-empty'))) throw new Error('the empty state is still shown');
  await page.screenshot({ path: join(shots, 'timings.png'), fullPage: true });
});

await suite({
  name: 'browser',
  plugins: [['bundled/sysmetrics.wasm', 'sysmetrics'], ['testing/testbed.wasm', 'echo']],
  // a trapping plugin is quarantined after 2 traps, quickly
  args: ['--set', 'plugins.max_traps=2', '--set', 'plugins.backoff_initial_ms=20'],
}, tests);
