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
  // Call stacks as the host names the probe's (outermost first): two paths to one call.
  const viaSolve = 'main (imb.c:40);solve (imb.c:22);exchange (imb.c:10)';
  const viaRefine = 'main (imb.c:41);refine (imb.c:30);exchange (imb.c:10)';
  const rows = [row('not_in_mpi', compute), row('work', 20, 'MPI_Allreduce', viaSolve)];
  if (stall > 0) {
    rows.push(row('stall', stall * 3 / 4, 'MPI_Allreduce', viaSolve));
    rows.push(row('stall', stall / 4, 'MPI_Allreduce', viaRefine));
  }
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
    await until('the empty note', async () => (await panel(page).locator('[data-item=empty]').isVisible()));
    if (!(await panel(page).locator('[data-item=empty]').textContent()).includes('probes/mpi/README.md')) throw new Error('no pointer to the probe');
  }],
  ['ranks are drawn with their state bars and stall shares in order', async ({ page, url }) => {
    await feed(url, 'imb', 4);
    const rows = panel(page).locator('[data-item=ranks] tbody tr');
    await until('four ranks', async () => (await rows.count()) === 4);
    const shares = [];
    for (let i = 0; i < 4; i++) shares.push(+(await rows.nth(i).locator('td').nth(5).getAttribute('data-value')));
    // rank r: stall (300 - 100 r) of 420 ticks
    const want = [0, 1, 2, 3].map((r) => (300 - 100 * r) / 420);
    if (shares.some((s, i) => Math.abs(s - want[i]) > 1e-4)) throw new Error(`stall shares ${shares}, want ${want}`);
    const stallWidth = await rows.nth(0).locator('.spec-seg[data-label="MPI stall"]').evaluate((e) => e.getBoundingClientRect().width);
    const barWidth = await rows.nth(0).locator('.spec-bar').evaluate((e) => e.getBoundingClientRect().width);
    if (Math.abs(stallWidth / barWidth - want[0]) > 0.02) throw new Error(`stall segment ${stallWidth} of ${barWidth}`);
    const summary = await panel(page).locator('[data-item=summary]').textContent();
    if (!summary.includes('rank 0 waits most')) throw new Error(summary);
    const site = panel(page).locator('[data-item=callsites] tr[data-key^="MPI_Allreduce@"]');
    await until('the call site rows', async () => (await site.count()) === 2);
    if (!(await site.first().textContent()).includes('solve (imb.c:22)')) throw new Error(await site.first().textContent());
    await page.screenshot({ path: join(shots, 'panel-mpi.png'), fullPage: true });
  }],
  ['the folded-stack link downloads the profile', async ({ page, url }) => {
    const href = await panel(page).locator('[data-item=downloads] a', { hasText: 'folded stacks' }).getAttribute('href');
    const text = await (await fetch(url + href)).text();
    const lines = text.trim().split('\n');
    if (lines.length !== 14) throw new Error(`${lines.length} lines:\n${text}`);
    const bad = lines.filter((l) => !/^rank \d+;thread \d+;(not_in_mpi|(work|stall)(;[^;]+)+;MPI_\w+) \d+$/.test(l));
    if (bad.length) throw new Error(`not folded stacks: ${bad}`);
    if (!lines.includes('rank 0;thread 0;stall;main (imb.c:41);refine (imb.c:30);exchange (imb.c:10);MPI_Allreduce 75000')) throw new Error(`no whole stack:\n${text}`);
  }],
  ['the stall flame graph draws both paths with readable frame names, for all ranks or one', async ({ page }) => {
    const flame = panel(page).locator('[data-item=flame] .spec-flame');
    const frame = (name) => flame.locator(`.spec-frame[data-frame="${name}"]`);
    await until('the solve and refine frames', async () => (await frame('solve (imb.c:22)').count()) === 1 && (await frame('refine (imb.c:30)').count()) === 1);
    // all ranks: stall 300+200+100 = 600 ticks, 3/4 via solve
    const width = async (name) => (await frame(name).boundingBox()).width;
    const all = await width('all');
    const ratio = (await width('solve (imb.c:22)')) / all;
    if (Math.abs(ratio - 0.75) > 0.02) throw new Error(`solve is ${ratio} of the graph, want 0.75`);
    for (const name of ['solve (imb.c:22)', 'refine (imb.c:30)', 'MPI_Allreduce']) {
      const fits = await frame(name).first().evaluate((e) => e.scrollWidth <= e.clientWidth && e.textContent === e.dataset.frame && e.getBoundingClientRect().height > 10);
      if (!fits) throw new Error(`${name}: its name does not fit its box`);
    }
    // Drawn pixels: the screenshot of the graph, decoded by the browser, is mostly the stall reds.
    const png = (await flame.screenshot()).toString('base64');
    const red = await page.evaluate(async (b64) => {
      const img = new Image();
      img.src = `data:image/png;base64,${b64}`;
      await img.decode();
      const c = document.createElement('canvas');
      c.width = img.width; c.height = img.height;
      const g = c.getContext('2d');
      g.drawImage(img, 0, 0);
      const d = g.getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i] > 180 && d[i] - d[i + 2] > 40) n++;
      return n / (d.length / 4);
    }, png);
    if (red < 0.5) throw new Error(`only ${(red * 100).toFixed(1)}% of the flame graph is drawn in reds`);
    await page.screenshot({ path: join(shots, 'panel-mpi-flame.png'), fullPage: true });
    // One rank: rank 3 never stalled; rank 0 has all of its 300 ticks.
    await panel(page).locator('select[data-control=rank]').selectOption('3');
    await until('rank 3: no stall', async () => (await panel(page).locator('[data-item=flame] p').textContent()).includes('No MPI stall'));
    await panel(page).locator('select[data-control=rank]').selectOption('0');
    await until('rank 0 drawn', async () => (await panel(page).locator('[data-item=flame] h4').textContent()).endsWith('rank 0') && (await frame('all').textContent()).includes('300 ms'));
  }],
  ['another job can be picked and the pick is kept across refreshes', async ({ page, url }) => {
    await feed(url, 'pair', 2);
    const select = panel(page).locator('select[data-control=job]');
    const ranks = panel(page).locator('[data-item=ranks] tbody tr');
    const shown = async () => (await panel(page).locator('[data-item=downloads] a').first().getAttribute('href')).split('job=')[1];
    await until('both jobs listed', async () => (await select.locator('option').count()) === 2);
    await select.selectOption('imb');
    await until('imb shown', async () => (await shown()) === 'imb' && (await ranks.count()) === 4);
    await page.waitForTimeout(4500); // two refreshes of the Plugins view
    if ((await shown()) !== 'imb' || (await select.inputValue()) !== 'imb') throw new Error('the pick was lost on refresh');
    await select.selectOption('pair');
    await until('pair shown', async () => (await ranks.count()) === 2);
  }],
  ['an MPI job\'s page shows its profile and downloads its folded stacks with one click', async ({ page, url }) => {
    await page.goto(`${url}/#/jobs/imb`);
    const link = page.locator('[data-job-panel=mpi] [data-item=downloads] a', { hasText: 'folded stacks' });
    await until('the folded-stacks link', async () => (await link.count()) === 1);
    await until('the job\'s own profile in its page', async () => (await link.getAttribute('href')).endsWith('job=imb')
      && (await page.locator('[data-job-panel=mpi] [data-item=ranks] tbody tr').count()) === 4);
    if ((await page.locator('[data-job-panel=mpi] select[data-control=job]').count()) !== 0) throw new Error('a job picker on a job\'s own page');
    const [dl] = await Promise.all([page.waitForEvent('download'), link.click()]);
    const lines = readFileSync(await dl.path(), 'utf8').trim().split('\n');
    if (lines.length !== 14 || !lines.every((l) => /^rank \d+;thread \d+;.* \d+$/.test(l))) throw new Error(`not the folded stacks: ${lines.slice(0, 3)}`);
    await page.screenshot({ path: join(shots, 'job-mpi.png'), fullPage: true });
  }],
]);
