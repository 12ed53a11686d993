// Browser tests of the bottleneck plugin's strip on a job's page (see
// harness.mjs for how they run). Two ranks report steps through the JSON
// ingest: phases and the process's CPU time; rank 1's batches 10-19 wait on
// their dataloader. tests/tests/bottleneck.rs runs real injected loops.
//
//   node web/tests/panel-bottleneck.mjs     (after `cargo build -p sonde` and the plugins; WEB_DIST=web/dist to test an unembedded dashboard)
import { join } from 'node:path';
import { suite, until, shots } from './harness.mjs';
import { post } from './checks.mjs';

const MS = 1000000;
const COLORS = { 'input-bound': [0xe8, 0xa3, 0x3d], 'compute-bound': [0x4f, 0x8f, 0xc9] };

// Rank `rank`'s 30 steps of 100 ms, a minute ago: dataloader 8 ms (rank 1,
// batches 10-19: 60 ms), forward, backward; the process busy on one core.
function report(job, rank, t0) {
  const timings = [];
  const points = [];
  let cpu = 0;
  for (let b = 0; b < 30; b++) {
    const t = t0 + b * 100 * MS;
    const load = rank === 1 && b >= 10 && b < 20 ? 60 : 8;
    timings.push(
      { name: 'train_batch', start_ns: t, end_ns: t + 100 * MS, batch_idx: b },
      { name: 'dataloader_next', start_ns: t, end_ns: t + load * MS, batch_idx: b },
      { name: 'forward', start_ns: t + load * MS, end_ns: t + (load + 30) * MS, batch_idx: b },
      { name: 'backward', start_ns: t + (load + 30) * MS, end_ns: t + 100 * MS, batch_idx: b },
    );
    points.push({ metric: 'process.cpu.time', unit: 's', time_ns: t, value: cpu });
    cpu += load === 60 ? 0.04 : 0.095;
  }
  points.push({ metric: 'process.cpu.time', unit: 's', time_ns: t0 + 30 * 100 * MS, value: cpu });
  return { origin: { job, rank, local_rank: rank, node: 'node-a', role: 'worker' }, timings, points };
}

// Pixels of each verdict colour drawn on the strip.
async function inked(page) {
  return page.locator('[data-job-panel=bottleneck] .spec-strip').evaluate((c, colors) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    const out = Object.fromEntries(Object.keys(colors).map((k) => [k, 0]));
    for (let i = 0; i < d.length; i += 4) {
      for (const [k, [r, g, b]] of Object.entries(colors)) if (d[i] === r && d[i + 1] === g && d[i + 2] === b) out[k]++;
    }
    return out;
  }, COLORS);
}

await suite({
  name: 'panel-bottleneck',
  plugins: [['bundled/bottleneck.wasm', 'bottleneck']],
  args: ['--set', 'plugin.bottleneck.settings={lag_ms=200}'],
}, [
  ['a job\'s page draws the verdict strip with a readable legend', async ({ page, url }) => {
    const t0 = Date.now() * MS - 60000 * MS;
    await post(url, report('strip', 0, t0));
    await post(url, report('strip', 1, t0));
    await until('all 60 steps judged', async () => {
      const r = await fetch(`${url}/api/plugins/bottleneck/jobs/strip`);
      return r.ok && (await r.json()).rows.length === 60;
    });
    await page.goto(`${url}/#/jobs/strip`);
    const strip = page.locator('[data-job-panel=bottleneck] .spec-strip');
    await until('the strip', async () => (await strip.count()) === 1 && (await strip.isVisible()));
    const ink = await inked(page);
    // Rank 1's ten input-bound steps and the fifty compute-bound ones, as coloured cells.
    if (ink['input-bound'] < 10 * 8) throw new Error(`input-bound cells not drawn: ${JSON.stringify(ink)}`);
    if (ink['compute-bound'] < 4 * ink['input-bound']) throw new Error(`compute-bound cells not drawn: ${JSON.stringify(ink)}`);
    const legend = page.locator('[data-job-panel=bottleneck] .spec-legend');
    const text = await legend.innerText();
    if (!text.includes('input-bound (10)') || !text.includes('compute-bound (50)')) throw new Error(`legend: ${text}`);
    const size = await legend.evaluate((e) => parseFloat(getComputedStyle(e).fontSize));
    if (size < 11) throw new Error(`legend text too small: ${size}px`);
    await page.screenshot({ path: join(shots, 'panel-bottleneck.png'), fullPage: true });
  }],
  ['the strip is keyboard reachable and reads the selected step\'s reason', async ({ page }) => {
    const strip = page.locator('[data-job-panel=bottleneck] .spec-strip');
    await strip.focus();
    if (!(await strip.evaluate((e) => e === document.activeElement))) throw new Error('the strip takes no focus');
    const label = await strip.getAttribute('aria-label');
    if (!label.includes('2 rows by 30 batches')) throw new Error(`aria-label: ${label}`);
    await page.keyboard.press('End');
    await page.keyboard.press('ArrowDown');
    for (let i = 0; i < 15; i++) await page.keyboard.press('ArrowLeft');
    const detail = page.locator('[data-job-panel=bottleneck] .spec-detail');
    await until('batch 14 of rank 1 selected', async () => (await strip.getAttribute('data-selected')) === 'rank 1:14');
    const sentence = await detail.innerText();
    if (!/^rank 1, batch 14: input-bound — the dataloader takes 60 % of the step/.test(sentence)) throw new Error(`detail: ${sentence}`);
  }],
]);
