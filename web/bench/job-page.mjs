// Benchmark of the job page, two jobs:
//   hour:  an hour-long job of 8 ranks × 3 phases × 36 000 batches (one
//          batch every 100 ms);
//   wide:  a 1 024-rank job's first 10 minutes: 1 024 ranks × 3 phases ×
//          600 batches (one step a second, as a large model's step takes),
//          with a diagnosis naming rank 745 (1.6× the median in batches
//          450–499).
// The job view is a synthetic fixture in the shape of GET /api/jobs/{job}
// (the wide job's with phase_start_ns and span, as sonde sends them),
// served to the page in place of sonde's, behind a real sonde serving the
// dashboard. Measured in chromium with the Performance API:
//   first paint: navigation start → the step chart's first drawn frame
//                (the page first asks for the last 500 batches, or for a
//                1 024-rank job the last 20);
//   all batches: navigation start → the frame after all batches are in;
//   zoom / pan:  per frame (step chart and heatmap), from the input
//                event's change to the end of the frame's drawing, over 30
//                wheel zooms and 30 drag steps.
//
//   node web/bench/job-page.mjs [hour|wide]   (after `cargo build -p sonde`; prints a table)
import { chromium } from 'playwright-core';
import { startSonde, chromiumPath, routeDist } from '../tests/harness.mjs';

const PHASES = ['dataloader', 'forward', 'backward'];
const NOW = Date.now() * 1e6;

// A job of `ranks` ranks and `batches` batches `every` ns apart; slow(r, b)
// is the extra forward time of rank r in batch b; findings(T0) its findings
// (T0: the first batch's start, ns).
export function fixture({ job, ranks, batches, every, base, slow, realistic, findings = () => [] }) {
  const T0 = NOW - batches * every;
  const view = (n) => {
    const steps = [];
    for (let b = batches - n; b < batches; b++) {
      const rs = [];
      let sl = 0;
      let max = 0;
      let min = Infinity;
      for (let r = 0; r < ranks; r++) {
        const noise = ((b * 7919 + r * 104729) % 1000) / 1000;
        const phases = { dataloader: base * (0.05 + noise * 0.02), forward: base * (0.4 + noise * 0.04) + slow(r, b), backward: base * (0.55 + noise * 0.03) };
        const total = phases.dataloader + phases.forward + phases.backward;
        if (total > max) { max = total; sl = r; }
        if (total < min) min = total;
        const start = T0 + b * every;
        const step = { rank: r, start_ns: start, end_ns: start + Math.round(total * 1e9), total_s: total, phases };
        if (realistic) {
          step.phase_start_ns = { dataloader: start, forward: start + Math.round(phases.dataloader * 1e9), backward: start + Math.round((phases.dataloader + phases.forward) * 1e9) };
          step.span = {};
        }
        rs.push(step);
      }
      steps.push({ batch: b, ranks: rs, slowest_rank: sl, spread_s: max - min });
    }
    return JSON.stringify({
      job, kinds: ['training'], nodes: [...Array(Math.ceil(ranks / 8)).keys()].map((k) => `node-${k}`), first_ns: T0, last_ns: T0 + batches * every, rows: batches * ranks * PHASES.length,
      node_last_ns: {}, ranks: [...Array(ranks).keys()].map((r) => ({ rank: r, node: `node-${r >> 3}`, local_rank: r % 8, role: 'worker', last_batch: batches - 1, last_ns: T0 + batches * every, steps_dropped: 0 })),
      steps, phase_order: PHASES, ranks_refused: 0, phases_refused: 0, findings: findings(T0),
    });
  };
  const summary = { job, kinds: ['training'], nodes: [], rank_count: ranks, first_ns: T0, last_ns: T0 + batches * every, rows: 0 };
  return { view, summary, batches, ranks };
}

// The diagnosis naming rank `rank` over batches [from, to] of a fixture
// whose batches are `every` ns apart.
export const finding = (rank, from, to, every) => (T0) => [{ plugin: 'diagnosis', kind: 'straggler', body: {},
  reason: `rank ${rank} holds the job back: 1.6× the median step in batches ${from}–${to}`,
  finding: { headline: true, about: 'rank', id: String(rank), start_ns: T0 + from * every, end_ns: T0 + to * every, ended: false } }];

// Serves a fixture to a page: its job view (the first load and the full one
// built once), the job list and its findings.
export async function serve(page, fx, first) {
  const bodies = new Map([[first, fx.view(first)], [fx.batches, fx.view(fx.batches)]]);
  const name = fx.summary.job;
  const findings = JSON.parse(bodies.get(first)).findings;
  await page.route(`**/api/jobs/${name}?*`, (r) => {
    const n = Math.min(fx.batches, +new URL(r.request().url()).searchParams.get('batches'));
    r.fulfill({ contentType: 'application/json', body: bodies.get(n) || fx.view(n) });
  });
  await page.route('**/api/jobs', (r) => r.fulfill({ contentType: 'application/json', body: JSON.stringify({ jobs: [fx.summary] }) }));
  await page.route('**/api/decisions?*', (r) => r.fulfill({ contentType: 'application/json', body: JSON.stringify({ decisions: new URL(r.request().url()).searchParams.get('plugin') ? [] : findings }) }));
  return bodies;
}

const CASES = {
  hour: () => fixture({ job: 'hour', ranks: 8, batches: 36000, every: 1e8, base: 0.08, slow: (r, b) => (r === 5 && b > 20000 ? 0.012 : 0) }),
  wide: () => fixture({ job: 'wide', ranks: 1024, batches: 600, every: 1e9, base: 0.8, realistic: true, slow: (r, b) => (r === 745 && b >= 450 && b < 500 ? 0.48 : 0),
    findings: finding(745, 450, 499, 1e9) }),
};
const FIRST = { hour: 500, wide: 20 };

if (process.argv[1] && process.argv[1].endsWith('job-page.mjs')) {
  const which = process.argv[2] ? [process.argv[2]] : ['hour', 'wide'];
  const sonde = await startSonde({});
  const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox', '--disable-gpu'] });
  const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
  const table = [];
  try {
    for (const name of which) {
      const t = Date.now();
      const fx = CASES[name]();
      const results = [];
      let size = 0;
      for (let run = 0; run < 3; run++) {
        const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
        await routeDist(context, sonde.url);
        const page = await context.newPage();
        const bodies = await serve(page, fx, FIRST[name]);
        if (!run) {
          size = bodies.get(fx.batches).length;
          console.log(`${name}: ${fx.batches} batches × ${fx.ranks} ranks × ${PHASES.length} phases, ${(size / 1e6).toFixed(1)} MB of JSON (first load ${(bodies.get(FIRST[name]).length / 1e6).toFixed(1)} MB; built in ${Date.now() - t} ms)`);
        }
        await page.goto(`${sonde.url}/#/jobs/${name}?batches=${fx.batches}`);
        await page.waitForFunction(() => document.querySelector('#view-jobs').dataset.loaded === 'true', null, { timeout: 120000 });
        await page.waitForTimeout(300);
        const load = await page.evaluate(() => {
          const first = performance.getEntriesByName('steps-first-draw')[0].startTime;
          const all = performance.getEntriesByName('job-page-all')[0]?.startTime ?? first;
          const p = window.sondeApp.jobPage;
          return { first, all, n: p.view.n, rows: +document.querySelector('.heatmap').dataset.rows };
        });
        if (load.n !== fx.batches) throw new Error(`the page holds ${load.n} batches`);
        // Zoom out to everything, then 30 wheel zooms in and 30 drag steps.
        await page.evaluate(() => { const v = window.sondeApp.jobPage.view; v.set(0, v.n); v.frames.length = 0; });
        await page.waitForTimeout(200);
        const box = await page.locator('.step-chart canvas').boundingBox();
        await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2);
        for (let i = 0; i < 30; i++) { await page.mouse.wheel(0, -100); await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))); }
        const zoom = await page.evaluate(() => window.sondeApp.jobPage.view.frames.splice(0));
        await page.evaluate(() => { const v = window.sondeApp.jobPage.view; v.set(0, v.n / 3); v.frames.length = 0; });
        await page.waitForTimeout(200);
        await page.mouse.down();
        for (let i = 0; i < 30; i++) { await page.mouse.move(box.x + box.width * 0.6 - i * 20, box.y + box.height / 2); await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))); }
        await page.mouse.up();
        const pan = await page.evaluate(() => window.sondeApp.jobPage.view.frames.splice(0));
        results.push({ run, first: load.first, all: load.all, rows: load.rows, zoomP95: pct(zoom.map((f) => f.latency), 0.95), zoomMax: Math.max(...zoom.map((f) => f.latency)),
          zoomDraw: pct(zoom.map((f) => f.draw), 0.95), panP95: pct(pan.map((f) => f.latency), 0.95), panMax: Math.max(...pan.map((f) => f.latency)), panDraw: pct(pan.map((f) => f.draw), 0.95), zoomFrames: zoom.length, panFrames: pan.length });
        await context.close();
      }
      const f = (x) => `${x.toFixed(0)} ms`.padStart(8);
      console.log('run  first paint  all batches  zoom p95 (max, draw p95)   pan p95 (max, draw p95)   frames  heatmap rows');
      for (const r of results) {
        console.log(`${String(r.run).padEnd(4)} ${f(r.first)}    ${f(r.all)}    ${f(r.zoomP95)} (${r.zoomMax.toFixed(0)}, ${r.zoomDraw.toFixed(1)})      ${f(r.panP95)} (${r.panMax.toFixed(0)}, ${r.panDraw.toFixed(1)})      ${r.zoomFrames}+${r.panFrames}  ${r.rows}`);
      }
      const worst = (k) => Math.max(...results.map((r) => r[k]));
      table.push(`${name.padEnd(5)} ${`${fx.ranks} × ${PHASES.length} × ${fx.batches}`.padEnd(16)} ${`${(size / 1e6).toFixed(0)} MB`.padStart(7)}  first paint ${worst('first').toFixed(0)} ms (budget 1000), all batches ${worst('all').toFixed(0)} ms, zoom ${worst('zoomMax').toFixed(0)} ms and pan ${worst('panMax').toFixed(0)} ms per frame at most (budget 50)`);
    }
  } finally {
    await browser.close();
    sonde.child.kill('SIGTERM');
  }
  console.log(`\nworst of 3 runs:\n${table.join('\n')}`);
}
