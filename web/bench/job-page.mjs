// Benchmark of the job page, two jobs:
//   hour:  an hour-long job of 8 ranks × 3 phases × 36 000 batches (one
//          batch every 100 ms);
//   wide:  a 1 024-rank job's first 10 minutes: 1 024 ranks × 3 phases ×
//          600 batches (one step a second, as a large model's step takes),
//          with a diagnosis naming rank 745 (1.6× the median in batches
//          450–499).
// The job view is a synthetic fixture in the shape of GET /api/jobs/{job}
// (the wide job's with phase_start_ns and span, as sonde sends them),
// served to the page in place of sonde's by a front server that passes
// everything else to a real sonde serving the dashboard (the 1 024-rank
// job's 96 MB full load is more than page.route carries). Measured in
// chromium with the Performance API:
//   first paint: navigation start → the step chart's first drawn frame
//                (opened by its link, the page first asks for the last 8
//                batches, then 500 of an 8-rank job, then all);
//   all batches: navigation start → the frame after the full load is in
//                (all 36 000 batches; at 1 024 ranks the last 292, the
//                page's cap of 300 000 rank-steps);
//   zoom / pan:  per frame (step chart and heatmap), from the input
//                event's change to the end of the frame's drawing, over 30
//                wheel zooms and 30 drag steps.
//
//   node web/bench/job-page.mjs [hour|wide]   (after `cargo build -p sonde`; prints a table)
import { chromium } from 'playwright-core';
import { createServer } from 'node:http';
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

// A fixture's answers: its job view (the first load and the full one built
// once), the job list and its findings; null for anything else.
function answers(fx, first) {
  const all = Math.min(fx.batches, Math.floor(300000 / fx.ranks));
  const bodies = new Map([[first, fx.view(first)], [all, fx.view(all)]]);
  const name = fx.summary.job;
  const findings = JSON.stringify({ decisions: JSON.parse(bodies.get(first)).findings });
  const answer = (u) => {
    if (u.pathname === `/api/jobs/${name}`) {
      const n = Math.min(fx.batches, +u.searchParams.get('batches'));
      return bodies.get(n) || fx.view(n);
    }
    if (u.pathname === '/api/jobs') return JSON.stringify({ jobs: [fx.summary] });
    if (u.pathname === '/api/decisions') return u.searchParams.get('plugin') ? '{"decisions":[]}' : findings;
    return null;
  };
  return { bodies, answer };
}

// Serves a fixture to a page by page.route (its bodies must stay under
// about 90 MB: larger ones close the page).
export async function serve(page, fx, first) {
  const { bodies, answer } = answers(fx, first);
  await page.route((u) => answer(u) != null, (r) => r.fulfill({ contentType: 'application/json', body: answer(new URL(r.request().url())) }));
  return bodies;
}

// Serves a fixture from a front server on its own port, passing everything
// else to sonde: a 1 024-rank job's full load (96 MB) is more than
// page.route carries.
export async function front(sondeUrl, fx, first) {
  const { bodies, answer } = answers(fx, first);
  const server = createServer(async (q, s) => {
    const u = new URL(q.url, sondeUrl);
    const body = answer(u);
    if (body != null) { s.writeHead(200, { 'content-type': 'application/json' }); s.end(body); return; }
    try {
      const r = await fetch(new URL(q.url, sondeUrl), { method: q.method });
      s.writeHead(r.status, { 'content-type': r.headers.get('content-type') || 'application/octet-stream' });
      s.end(Buffer.from(await r.arrayBuffer()));
    } catch (e) {
      if (!s.headersSent) s.writeHead(502);
      s.end(String(e));
    }
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return { bodies, server, url: `http://127.0.0.1:${server.address().port}` };
}

export const CASES = {
  hour: () => fixture({ job: 'hour', ranks: 8, batches: 36000, every: 1e8, base: 0.08, slow: (r, b) => (r === 5 && b > 20000 ? 0.012 : 0) }),
  wide: () => fixture({ job: 'wide', ranks: 1024, batches: 600, every: 1e9, base: 0.8, realistic: true, slow: (r, b) => (r === 745 && b >= 450 && b < 500 ? 0.48 : 0),
    findings: finding(745, 450, 499, 1e9) }),
};
// What the page asks for first, and then in all (300 000 rank-steps at most).
const FIRST = { hour: 8, wide: 8 };
const HOLDS = { hour: 36000, wide: 292 };

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
      const { bodies, server, url } = await front(sonde.url, fx, FIRST[name]);
      for (let run = 0; run < 3; run++) {
        const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
        await routeDist(context, url);
        const page = await context.newPage();
        if (!run) {
          size = bodies.get(HOLDS[name]).length;
          console.log(`${name}: ${fx.batches} batches × ${fx.ranks} ranks × ${PHASES.length} phases; the page loads ${FIRST[name]}, then ${HOLDS[name]} batches: ${(bodies.get(FIRST[name]).length / 1e6).toFixed(1)} MB, then ${(size / 1e6).toFixed(1)} MB of JSON (built in ${Date.now() - t} ms)`);
        }
        await page.goto(`${url}/#/jobs/${name}`);
        await page.waitForFunction(() => document.querySelector('#view-jobs').dataset.loaded === 'true', null, { timeout: 120000 });
        await page.waitForTimeout(300);
        const load = await page.evaluate(() => {
          const first = performance.getEntriesByName('steps-first-draw')[0].startTime;
          const all = performance.getEntriesByName('job-page-all')[0]?.startTime ?? first;
          const p = window.sondeApp.jobPage;
          return { first, all, n: p.view.n, rows: +document.querySelector('.heatmap').dataset.rows };
        });
        if (load.n !== HOLDS[name]) throw new Error(`the page holds ${load.n} batches, want ${HOLDS[name]}`);
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
      server.close();
      const f = (x) => `${x.toFixed(0)} ms`.padStart(8);
      console.log('run  first paint  all batches  zoom p95 (max, draw p95)   pan p95 (max, draw p95)   frames  heatmap rows');
      for (const r of results) {
        console.log(`${String(r.run).padEnd(4)} ${f(r.first)}    ${f(r.all)}    ${f(r.zoomP95)} (${r.zoomMax.toFixed(0)}, ${r.zoomDraw.toFixed(1)})      ${f(r.panP95)} (${r.panMax.toFixed(0)}, ${r.panDraw.toFixed(1)})      ${r.zoomFrames}+${r.panFrames}  ${r.rows}`);
      }
      const worst = (k) => Math.max(...results.map((r) => r[k]));
      table.push(`${name.padEnd(5)} ${`${fx.ranks} × ${PHASES.length} × ${HOLDS[name]}`.padEnd(16)} ${`${(size / 1e6).toFixed(0)} MB`.padStart(7)}  first paint ${worst('first').toFixed(0)} ms (budget 1000), all batches ${worst('all').toFixed(0)} ms, zoom ${worst('zoomMax').toFixed(0)} ms and pan ${worst('panMax').toFixed(0)} ms per frame at most (budget 50)`);
    }
  } finally {
    await browser.close();
    sonde.child.kill('SIGTERM');
  }
  console.log(`\nworst of 3 runs:\n${table.join('\n')}`);
}
