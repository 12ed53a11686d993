// Benchmark of the job page for an hour-long job: 8 ranks × 3 phases ×
// 36 000 batches (one batch every 100 ms). The job view is a synthetic
// fixture in the shape of GET /api/jobs/{job}, served to the page in place
// of sonde's (whose `batches` cap is 5 000), behind a real sonde serving the
// dashboard. Measured in chromium with the Performance API:
//   first paint: navigation start → the step chart's first drawn frame
//                (the page first asks for the last 500 batches);
//   all batches: navigation start → the frame after all 36 000 are in;
//   zoom / pan:  per frame, from the input event's change to the end of
//                the frame's drawing, over 30 wheel zooms and 30 drag steps.
//
//   node web/bench/job-page.mjs          (after `cargo build -p sonde`; prints a table)
import { chromium } from 'playwright-core';
import { startSonde, chromiumPath, routeDist } from '../tests/harness.mjs';

const RANKS = 8;
const BATCHES = 36000;
const PHASES = ['dataloader', 'forward', 'backward'];
const T0 = Date.now() * 1e6 - 3600e9;

function jobView(n) {
  const steps = [];
  for (let b = BATCHES - n; b < BATCHES; b++) {
    const ranks = [];
    let slow = 0;
    let max = 0;
    let min = Infinity;
    for (let r = 0; r < RANKS; r++) {
      // rank 5 straggles from batch 20 000 on; a little noise everywhere
      const noise = ((b * 7919 + r * 104729) % 1000) / 1000;
      const phases = { dataloader: 0.004 + noise * 0.002, forward: 0.03 + (r === 5 && b > 20000 ? 0.012 : 0) + noise * 0.004, backward: 0.045 + noise * 0.003 };
      const total = phases.dataloader + phases.forward + phases.backward;
      if (total > max) { max = total; slow = r; }
      if (total < min) min = total;
      const start = T0 + b * 1e8;
      ranks.push({ rank: r, start_ns: start, end_ns: start + Math.round(total * 1e9), total_s: total, phases });
    }
    steps.push({ batch: b, ranks, slowest_rank: slow, spread_s: max - min });
  }
  return JSON.stringify({
    job: 'hour', kinds: ['training'], nodes: ['node-0', 'node-1'], first_ns: T0, last_ns: T0 + BATCHES * 1e8, rows: BATCHES * RANKS * PHASES.length,
    node_last_ns: {}, ranks: [...Array(RANKS).keys()].map((r) => ({ rank: r, node: `node-${r >> 2}`, local_rank: r % 4, role: 'worker', last_batch: BATCHES - 1, last_ns: T0 + BATCHES * 1e8, steps_dropped: 0 })),
    steps, ranks_refused: 0, phases_refused: 0,
  });
}

const t = Date.now();
const bodies = new Map([[500, jobView(500)], [BATCHES, jobView(BATCHES)]]);
console.log(`fixture: ${BATCHES} batches × ${RANKS} ranks × ${PHASES.length} phases, ${(bodies.get(BATCHES).length / 1e6).toFixed(1)} MB of JSON (built in ${Date.now() - t} ms)`);

const sonde = await startSonde({});
const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox', '--disable-gpu'] });
const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const results = [];
try {
  for (let run = 0; run < 3; run++) {
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    await routeDist(context, sonde.url);
    const page = await context.newPage();
    await page.route('**/api/jobs/hour?*', (r) => {
      const n = +new URL(r.request().url()).searchParams.get('batches');
      r.fulfill({ contentType: 'application/json', body: bodies.get(n) || jobView(Math.min(n, BATCHES)) });
    });
    await page.route('**/api/jobs', (r) => r.fulfill({ contentType: 'application/json', body: JSON.stringify({ jobs: [{ job: 'hour', kinds: ['training'], nodes: ['node-0', 'node-1'], ranks: RANKS, first_ns: T0, last_ns: T0 + BATCHES * 1e8, rows: 0 }] }) }));
    await page.goto(`${sonde.url}/#/jobs/hour?batches=${BATCHES}`);
    await page.waitForFunction(() => document.querySelector('#view-jobs').dataset.loaded === 'true', null, { timeout: 60000 });
    await page.waitForTimeout(300);
    const load = await page.evaluate(() => {
      const first = performance.getEntriesByName('steps-first-draw')[0].startTime;
      const all = performance.getEntriesByName('job-page-all')[0].startTime;
      const v = window.sondeApp.jobPage.view;
      return { first, all, n: v.n };
    });
    if (load.n !== BATCHES) throw new Error(`the page holds ${load.n} batches`);
    // Zoom out to everything, then 30 wheel zooms in and 30 drag steps.
    await page.evaluate(() => { const v = window.sondeApp.jobPage.view; v.set(0, v.n); v.frames.length = 0; });
    await page.waitForTimeout(200);
    const box = await page.locator('.step-chart canvas').boundingBox();
    await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2);
    for (let i = 0; i < 30; i++) { await page.mouse.wheel(0, -100); await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))); }
    const zoom = await page.evaluate(() => { const f = window.sondeApp.jobPage.view.frames.splice(0); return { frames: f, span: window.sondeApp.jobPage.view.hi - window.sondeApp.jobPage.view.lo }; });
    await page.evaluate(() => { const v = window.sondeApp.jobPage.view; v.set(0, v.n / 3); v.frames.length = 0; });
    await page.waitForTimeout(200);
    await page.mouse.down();
    for (let i = 0; i < 30; i++) { await page.mouse.move(box.x + box.width * 0.6 - i * 20, box.y + box.height / 2); await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))); }
    await page.mouse.up();
    const pan = await page.evaluate(() => window.sondeApp.jobPage.view.frames.splice(0));
    results.push({ run, first: load.first, all: load.all, zoomP95: pct(zoom.frames.map((f) => f.latency), 0.95), zoomMax: Math.max(...zoom.frames.map((f) => f.latency)),
      zoomDraw: pct(zoom.frames.map((f) => f.draw), 0.95), panP95: pct(pan.map((f) => f.latency), 0.95), panMax: Math.max(...pan.map((f) => f.latency)), panDraw: pct(pan.map((f) => f.draw), 0.95), zoomFrames: zoom.frames.length, panFrames: pan.length });
    await context.close();
  }
} finally {
  await browser.close();
  sonde.child.kill('SIGTERM');
}
const f = (x) => `${x.toFixed(0)} ms`.padStart(8);
console.log('run  first paint  all batches  zoom p95 (max, draw p95)   pan p95 (max, draw p95)   frames');
for (const r of results) {
  console.log(`${String(r.run).padEnd(4)} ${f(r.first)}    ${f(r.all)}    ${f(r.zoomP95)} (${r.zoomMax.toFixed(0)}, ${r.zoomDraw.toFixed(1)})      ${f(r.panP95)} (${r.panMax.toFixed(0)}, ${r.panDraw.toFixed(1)})      ${r.zoomFrames}+${r.panFrames}`);
}
const worst = (k) => Math.max(...results.map((r) => r[k]));
console.log(`\nworst of ${results.length}: first paint ${worst('first').toFixed(0)} ms (budget 1000), zoom ${worst('zoomMax').toFixed(0)} ms and pan ${worst('panMax').toFixed(0)} ms per frame at most (budget 100)`);
