// Browser tests of the mpi plugin's panel (see harness.mjs for how they run).
// The profile is fed through the JSON ingest (`mpi_samples`, what the probe in
// probes/mpi/ sends), so no MPI job runs here; tests/tests/mpi.rs runs real ones.
//
//   node web/tests/panel-mpi.mjs     (after `cargo build -p sonde` and the plugins)
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { suite, until, shots } from './harness.mjs';

// One origin's report: rank r computed (r+1) x 100 ticks, then stalled in
// MPI_Allreduce until rank 3 arrived; 1 ms per tick.
function report(job, rank, ranks = 4) {
  const compute = 100 * (rank + 1);
  const stall = 100 * ranks - compute;
  const row = (state, count, fn = '', site = '') => ({ thread: 0, state, count, period_ns: 1000000, function: fn, callsite: site });
  const rows = [row('not_in_mpi', compute), row('work', 20, 'MPI_Allreduce', 'main+0x3a (imbalance)')];
  if (stall > 0) rows.push(row('stall', stall, 'MPI_Allreduce', 'main+0x3a (imbalance)'));
  return { origin: { job, rank, node: 'n1', role: 'rank', attributes: { 'mpi.world_size': String(ranks) } }, mpi_samples: rows };
}

async function feed(url, job, ranks) {
  for (let r = 0; r < ranks; r++) {
    const res = await fetch(`${url}/api/ingest`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(report(job, r, ranks)) });
    if (res.status !== 202) throw new Error(`ingest answered ${res.status}: ${await res.text()}`);
  }
}

const panel = (page) => page.locator('[data-custom-panel=mpi]');

await suite({ name: 'panel-mpi', plugins: [['bundled/mpi.wasm', 'mpi']], args: ['--set', 'plugin.mpi.settings={emit_every_ms=200, write_every_ms=200}'] }, [
  ['the panel says how to get data before any job reported', async ({ page, url }) => {
    await page.goto(url);
    await page.click('#tabs a[data-view=plugins]');
    await until('the empty note', async () => (await panel(page).locator('.mpi-empty').isVisible()));
    if (!(await panel(page).locator('.mpi-empty').textContent()).includes('probes/mpi/README.md')) throw new Error('no pointer to the probe');
  }],
  ['ranks are drawn with their state bars and stall shares in order', async ({ page, url }) => {
    await feed(url, 'imb', 4);
    const rows = panel(page).locator('.mpi-ranks tr[data-rank]');
    await until('four ranks', async () => (await rows.count()) === 4);
    const shares = [];
    for (let i = 0; i < 4; i++) shares.push(+(await rows.nth(i).getAttribute('data-stall-share')));
    // rank r: stall (300 - 100 r) of 420 ticks
    const want = [0, 1, 2, 3].map((r) => (300 - 100 * r) / 420);
    if (shares.some((s, i) => Math.abs(s - want[i]) > 1e-4)) throw new Error(`stall shares ${shares}, want ${want}`);
    const stallWidth = await rows.nth(0).locator('.mpi-seg.mpi-stall_s').evaluate((e) => e.getBoundingClientRect().width);
    const barWidth = await rows.nth(0).locator('.mpi-bar').evaluate((e) => e.getBoundingClientRect().width);
    if (Math.abs(stallWidth / barWidth - want[0]) > 0.02) throw new Error(`stall segment ${stallWidth} of ${barWidth}`);
    const summary = await panel(page).locator('.mpi-imbalance').textContent();
    if (!summary.includes('rank 0 waits most')) throw new Error(summary);
    const site = panel(page).locator('.mpi-sites tr[data-function=MPI_Allreduce]');
    await until('the call site row', async () => (await site.count()) === 1);
    if (!(await site.textContent()).includes('main+0x3a (imbalance)')) throw new Error(await site.textContent());
    await page.screenshot({ path: join(shots, 'panel-mpi.png'), fullPage: true });
  }],
  ['the folded-stack link downloads the profile', async ({ page, url }) => {
    const href = await panel(page).locator('a.mpi-folded').getAttribute('href');
    const text = await (await fetch(url + href)).text();
    const lines = text.trim().split('\n');
    if (lines.length !== 11) throw new Error(`${lines.length} lines:\n${text}`);
    const bad = lines.filter((l) => !/^rank \d+;thread \d+;(not_in_mpi|work;[^;]+;[^;]+|stall;[^;]+;[^;]+) \d+$/.test(l));
    if (bad.length) throw new Error(`not folded stacks: ${bad}`);
  }],
  ['another job can be picked and the pick is kept across refreshes', async ({ page, url }) => {
    await feed(url, 'pair', 2);
    const select = panel(page).locator('select.mpi-job');
    await until('both jobs listed', async () => (await select.locator('option').count()) === 2);
    await select.selectOption('imb');
    await until('imb shown', async () => (await panel(page).getAttribute('data-job')) === 'imb' && (await panel(page).locator('.mpi-ranks tr[data-rank]').count()) === 4);
    await page.waitForTimeout(4500); // two refreshes of the Plugins view
    if ((await panel(page).getAttribute('data-job')) !== 'imb') throw new Error('the pick was lost on refresh');
    await select.selectOption('pair');
    await until('pair shown', async () => (await panel(page).locator('.mpi-ranks tr[data-rank]').count()) === 2);
  }],
  ['an MPI job\'s page shows its profile and downloads its folded stacks with one click', async ({ page, url }) => {
    await page.goto(`${url}/#/jobs/imb`);
    const link = page.locator('#export-folded');
    await until('the folded-stacks button', async () => (await link.count()) === 1);
    await until('the job\'s own profile in its page', async () => (await page.getAttribute('[data-job-panel=mpi] .custom-panel', 'data-job')) === 'imb'
      && (await page.locator('[data-job-panel=mpi] .mpi-ranks tr[data-rank]').count()) === 4);
    const [dl] = await Promise.all([page.waitForEvent('download'), link.click()]);
    const lines = readFileSync(await dl.path(), 'utf8').trim().split('\n');
    if (lines.length !== 11 || !lines.every((l) => /^rank \d+;thread \d+;.* \d+$/.test(l))) throw new Error(`not the folded stacks: ${lines.slice(0, 3)}`);
    await page.screenshot({ path: join(shots, 'job-mpi.png'), fullPage: true });
  }],
]);
