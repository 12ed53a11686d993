// Browser tests of the bottleneck plugin's strip on a job's page (see
// harness.mjs for how they run). Two ranks report steps through the JSON
// ingest: phases and the process's CPU time; rank 1's batches 10-19 wait on
// their dataloader. A pipeline job's operations (tests/diagnosis/simulate.py,
// one stage too long) get the stage view, its figures checked against the
// trace fed. tests/tests/bottleneck.rs runs real injected loops.
//
//   node web/tests/panel-bottleneck.mjs     (after `cargo build -p sonde` and the plugins; WEB_DIST=web/dist to test an unembedded dashboard)
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { suite, until, shots, repo } from './harness.mjs';
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

// A dp 2 x pp 2 job's operations, one stage's compute 1.25-1.6 times the
// other's, from the simulator the diagnosis benchmark uses: the ingest
// bodies (one per rank, a minute ago), the stage named, and each stage's
// mean compute (forward and backward) per rank and step, in ms.
function pipelineJob(job) {
  const out = execFileSync('python3', [join(repo, 'tests/diagnosis/simulate.py'), '--seed', '5', '--cause', 'overlong_stage',
    '--dp', '2', '--pp', '2', '--tp', '1', '--steps', '8'], { maxBuffer: 64 << 20 });
  const trace = JSON.parse(out);
  const base = Date.now() * MS - 60000 * MS;
  const perRank = new Map();
  const compute = new Map(); // stage -> {sum, pairs: Set(rank:step)}
  for (const [rank, node, dp, stage, tp, step, micro, kind, start, end] of trace.ops) {
    if (!perRank.has(rank)) perRank.set(rank, { node: trace.nodes[node], ops: [] });
    const row = { step, dp, stage, tp, kind, start_ns: base + start, end_ns: base + end };
    if (micro != null) row.micro = micro;
    perRank.get(rank).ops.push(row);
    const name = typeof kind === 'number' ? trace.kinds[kind] : kind;
    if (name === 'forward' || name === 'backward') {
      const c = compute.get(stage) || { sum: 0, pairs: new Set() };
      c.sum += (end - start) / MS;
      c.pairs.add(`${rank}:${step}`);
      compute.set(stage, c);
    }
  }
  const bodies = [...perRank].map(([rank, { node, ops }]) => ({ origin: { job, rank, node, role: 'worker' }, ops }));
  const perStage = new Map([...compute].map(([s, c]) => [s, c.sum / c.pairs.size]));
  return { bodies, stage: trace.truth.stage, perStage };
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
  ['a pipeline job\'s page shows its stages, the long one named with the figures fed', async ({ page, url }) => {
    const { bodies, stage, perStage } = pipelineJob('pipe');
    for (const b of bodies) await post(url, b);
    await page.goto(`${url}/#/jobs/pipe`);
    const table = page.locator('[data-job-panel=bottleneck] [data-item=stages] table');
    // Each rank's body is posted apart: the replay takes in the ranks that came late.
    const ranks = page.locator('[data-job-panel=bottleneck] [data-item=whatif-shares] [data-stat=ranks] dd');
    await until('the stage view of all four ranks', async () => (await table.count()) === 1 && (await ranks.innerText()) === '4', 30000);
    const other = 1 - stage;
    const value = async (s, col) => +(await table.locator(`tr[data-key="${s}"] td`).nth(col).getAttribute('data-value'));
    for (const s of [0, 1]) {
      // Typical (median) against the mean fed: the simulator's jitter is 2 %.
      const shown = await value(s, 2);
      if (Math.abs(shown / perStage.get(s) - 1) > 0.05) throw new Error(`stage ${s}: ${shown} ms shown, ${perStage.get(s).toFixed(3)} ms fed`);
    }
    const excess = await value(stage, 3);
    const fed = (perStage.get(stage) / perStage.get(other) - 1) * 100;
    if (Math.abs(excess - fed) > 3) throw new Error(`stage ${stage} shown ${excess} % longer, fed ${fed.toFixed(1)} %`);
    if (!(await table.locator(`tr[data-key="${stage}"]`).getAttribute('class')).includes('error')) throw new Error('the long stage is not marked');
    const sentence = await page.locator('[data-job-panel=bottleneck] [data-item=whatif-sentence]').innerText();
    if (!sentence.includes(`stage ${stage}`)) throw new Error(`sentence: ${sentence}`);
    const diag = await page.locator('#diagnosis').innerText();
    if (!diag.includes(`stage ${stage}`)) throw new Error(`the page's diagnosis: ${diag}`);
    await table.scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(shots, 'job-pipeline.png'), fullPage: true });
  }],
]);
