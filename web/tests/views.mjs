// Browser tests of the job-centric views (see harness.mjs for how they run):
// the empty state, charts that draw ink on time axes inside their data, a
// two-rank job posted through /api/ingest whose page opens with the
// diagnosis naming its slower rank,
// its Perfetto export, decisions read as sentences (JSON only behind
// "details"), every deep link opened fresh, the keyboard reaching every
// control of every view, the job page in greyscale, and a screenshot of
// every view.
//
//   node web/tests/views.mjs       (after `cargo build -p sonde` and the plugins)
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { suite, until, shots } from './harness.mjs';
import { chartReport, expectCharts, steps, post } from './checks.mjs';

const tests = [];
const test = (name, f) => tests.push([name, f]);
const shot = (page, name) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
const JOB = 'train-2';

// Opens a URL in a fresh page (a new tab: nothing carried over but the server's state).
async function fresh(page, url) {
  const p = await page.context().newPage();
  const errors = [];
  p.on('pageerror', (e) => errors.push(String(e)));
  await p.goto(url);
  p.errors = errors;
  return p;
}

test('the empty state: no jobs, an unknown job and charts without data say so', async ({ page, url }) => {
  await page.goto(`${url}/#/jobs`);
  await until('the jobs empty state', async () => (await page.locator('#jobs-empty').count()) === 1);
  if (!(await page.textContent('#jobs-empty')).includes('/api/ingest')) throw new Error('the empty state does not say how a job appears');
  await shot(page, 'jobs-empty');
  await page.goto(`${url}/#/jobs/${JOB}`);
  await until('the unknown-job note', async () => (await page.locator('#job-empty').count()) === 1);
  await shot(page, 'job-empty');
  // A chart never shows bare axes: it draws data or says there is none yet.
  await page.goto(`${url}/#/plugins`);
  await until('the panels', async () => (await page.locator('details[data-panel]').count()) >= 3);
  await page.waitForTimeout(1500);
  const blank = await page.evaluate(() => [...document.querySelectorAll('.chart')].filter((c) => c.offsetParent
    && !c.querySelector('canvas') && !/no data yet|one sample so far/.test(c.textContent)).map((c) => c.dataset.title));
  if (blank.length) throw new Error(`charts neither drawn nor saying "no data yet": ${blank}`);
  await shot(page, 'plugins-empty');
});

test('every drawn chart has ink inside its plot, and its time axis lies within its data', async ({ page, url }) => {
  await page.goto(`${url}/#/system`);
  const cpu = page.locator('.chart[data-title="CPU utilization per core"] canvas');
  await until('the CPU chart', async () => (await cpu.count()) === 1, 30000);
  await page.waitForTimeout(2500);
  const charts = await expectCharts(page, { min: 2 });
  for (const c of charts) if (!c.labels.length) throw new Error(`${c.title}: no labels`);
  await shot(page, 'system');
  await page.goto(`${url}/#/plugins`);
  await page.waitForTimeout(2500);
  for (const c of await chartReport(page)) {
    if (c.ink < 30 || c.bad.length) throw new Error(`plugin chart ${c.title}: ${c.ink} ink pixels; ${c.bad.join('; ')}`);
  }
  await shot(page, 'plugins');
});

test('a two-rank job: every rank drawn, and the page opens with the diagnosis naming the slower rank', async ({ page, url }) => {
  await post(url, steps(JOB, 0));
  await post(url, steps(JOB, 1));
  await page.goto(`${url}/#/jobs`);
  await until('the job listed', async () => (await page.locator(`tr[data-job="${JOB}"]`).count()) === 1);
  if (!(await page.textContent(`tr[data-job="${JOB}"]`)).includes('training')) throw new Error('kind not shown');
  await shot(page, 'jobs');
  // The diagnosis plugin judges the steps (after its lag) and names the rank
  // the other waits for; the page shows its finding, ranking nobody itself.
  await until('the job\'s headline finding', async () => {
    const r = await fetch(`${url}/api/jobs/${JOB}`);
    return r.ok && ((await r.json()).findings || []).some((f) => f.finding && f.finding.headline);
  }, 30000);
  await page.click(`tr[data-job="${JOB}"] a`);
  await until('the step chart', async () => (await page.locator('.step-chart canvas').count()) === 1);
  if (!page.url().endsWith(`#/jobs/${JOB}`)) throw new Error(`url ${page.url()}`);
  // One sentence first, above the fold, with the culprit linked.
  const said = page.locator('#diagnosis .diagnosis-sentence');
  await until('the diagnosis sentence', async () => (await said.count()) === 1);
  const text = await said.innerText();
  if (!/^Rank 1 \(node node-a\) holds the job back: last to finish in \d+ of the last 20 batches/.test(text)) throw new Error(`diagnosis: ${text}`);
  const box = await said.boundingBox();
  if (!box || box.y + box.height > 900) throw new Error(`the diagnosis is below the fold: ${JSON.stringify(box)}`);
  const link = said.locator('a.culprit');
  if ((await link.innerText()).toLowerCase() !== 'rank 1' || !(await link.getAttribute('href')).includes('rank=1')) throw new Error('the culprit is not linked');
  await page.locator('#diagnosis > details.evidence summary').click();
  const ev = await page.locator('#diagnosis > details.evidence table').innerText();
  if (!/late by \(ms\)\s+\d/.test(ev) || /[{[]\s*"/.test(ev)) throw new Error(`evidence: ${ev}`);
  const row1 = page.locator('.ranks-table tr[data-rank="1"]');
  const row0 = page.locator('.ranks-table tr[data-rank="0"]');
  if (!(await row1.getAttribute('class')).includes('straggler')) throw new Error('rank 1 is not marked');
  if ((await row0.getAttribute('class')).includes('straggler')) throw new Error('rank 0 is marked too');
  // Mean steps: the fed steps are 80 ms, 95 ms when late (rank 1 in 24 of 30 batches, rank 0 in 6).
  const means = await page.locator('.ranks-table tbody tr td:nth-child(6)').allInnerTexts();
  const want = [80 + (15 * 6) / 30, 80 + (15 * 24) / 30];
  means.forEach((t, i) => {
    const ms = parseFloat(t);
    if (!(Math.abs(ms - want[i]) <= want[i] * 0.05)) throw new Error(`rank ${i}: mean step ${t}, fed ${want[i]} ms`);
  });
  await expectCharts(page, { min: 2, minInk: 500 });
  // The named rank's bars are outlined in black over the batches the finding
  // covers: sample the left edge of each rank's bar at mid height in batches 0 and 4.
  const edges = await page.evaluate(() => {
    const c = document.querySelector('.step-chart');
    const cv = c.querySelector('canvas');
    const box = JSON.parse(c.dataset.bbox);
    const dpr = window.devicePixelRatio || 1;
    const g = cv.getContext('2d');
    const n = +c.dataset.hi - +c.dataset.lo + 1;
    const group = box.width / n;
    const sub = (group * 0.85) / 2;
    // A 2-px outline centred on the bar's left edge covers the pixel under it fully.
    const at = (b, r) => {
      const x = Math.floor(box.left + b * group + group * 0.075 + r * sub);
      const y = Math.round(box.top + box.height - 4 * dpr);
      const [R, G, B] = g.getImageData(x, y, 1, 1).data;
      return R + G + B < 60 ? 'black' : `${R},${G},${B}`;
    };
    return { mode: c.dataset.mode, b0r0: at(0, 0), b0r1: at(0, 1), b4r0: at(4, 0), b4r1: at(4, 1) };
  });
  if (edges.mode !== 'per-rank') throw new Error(`mode ${edges.mode}`);
  if (edges.b0r1 !== 'black' || edges.b0r0 === 'black' || edges.b4r1 !== 'black' || edges.b4r0 === 'black') {
    throw new Error(`outlines wrong: ${JSON.stringify(edges)}`);
  }
  const strip = await page.locator('.straggler-strip').evaluate((c) => [+c.dataset.min, +c.dataset.max]);
  if (!(strip[1] > strip[0])) throw new Error(`strip range ${strip}`);
  await shot(page, 'job-2-ranks');
});

test('in greyscale the phases stay apart and the straggler strip still runs light to dark', async ({ page }) => {
  // What a reader without colour sees: the page through a greyscale filter
  // (its luma is Rec. 709's, which is also what the measurements use).
  await page.evaluate(() => { document.documentElement.style.filter = 'grayscale(1)'; });
  await shot(page, 'job-greyscale');
  const luma = await page.evaluate(() => {
    const l = ([r, g, b]) => 0.2126 * r + 0.7152 * g + 0.0722 * b;
    const keys = [...document.querySelectorAll('.key i')].map((i) => {
      const [r, g, b] = getComputedStyle(i).backgroundColor.match(/\d+/g).map(Number);
      return { phase: i.parentElement.textContent, l: l([r, g, b]) };
    });
    // The strip's cells in batch 0, which rank 1 lost: rows of 22 px from
    // 4 px down, the plot from 64 px across (the strip's layout for two ranks).
    const c = document.querySelector('.straggler-strip canvas');
    const g = c.getContext('2d');
    const dpr = window.devicePixelRatio || 1;
    const px = (x, y) => l(g.getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data);
    return { keys, fast: px(66, 15), slow: px(66, 37) };
  });
  await page.evaluate(() => { document.documentElement.style.filter = ''; });
  if (luma.keys.length < 3) throw new Error(`legend ${JSON.stringify(luma.keys)}`);
  for (let i = 0; i < luma.keys.length; i++) {
    for (let j = i + 1; j < luma.keys.length; j++) {
      const [a, b] = [luma.keys[i], luma.keys[j]];
      if (Math.abs(a.l - b.l) < 25) throw new Error(`${a.phase} and ${b.phase} are ${Math.abs(a.l - b.l).toFixed(0)} grey levels apart`);
    }
  }
  if (!(luma.fast - luma.slow > 40)) throw new Error(`strip: fast cell ${luma.fast.toFixed(0)}, slow cell ${luma.slow.toFixed(0)}`);
});

test('the step chart zooms and pans from the keyboard, and the window is in the URL', async ({ page }) => {
  const chart = page.locator('.step-chart');
  await chart.locator('canvas').focus();
  await page.keyboard.press('+');
  await until('zoomed in', async () => +(await chart.getAttribute('data-hi')) - +(await chart.getAttribute('data-lo')) < 20);
  await page.keyboard.press('ArrowRight');
  // The URL follows the window a moment after it settles: wait for the one
  // now shown (data-lo and data-hi are its first and last batch, as from and to are).
  let [lo, hi] = [null, null];
  await until('the URL to carry the window', async () => {
    [lo, hi] = [await chart.getAttribute('data-lo'), await chart.getAttribute('data-hi')];
    return new RegExp(`from=${lo}&to=${hi}(&|$)`).test(page.url());
  });
  const again = await fresh(page, page.url());
  await until('the same window after reload', async () => (await again.locator('.step-chart').getAttribute('data-lo')) === lo
    && (await again.locator('.step-chart').getAttribute('data-hi')) === hi);
  await again.close();
  await page.keyboard.press('0');
  await until('all batches', async () => +(await chart.getAttribute('data-lo')) === 0 && +(await chart.getAttribute('data-hi')) === 29);
});

test('the Perfetto export downloads one track per rank with every step', async ({ page }) => {
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#export-trace')]);
  const trace = JSON.parse(readFileSync(await dl.path(), 'utf8'));
  const tracks = trace.traceEvents.filter((e) => e.ph === 'M' && e.name === 'thread_name').map((e) => e.args.name);
  if (tracks.join('|') !== 'rank 0 (node-a)|rank 1 (node-a)') throw new Error(`tracks ${tracks}`);
  const batches = trace.traceEvents.filter((e) => e.ph === 'X' && e.cat === 'step');
  const phases = trace.traceEvents.filter((e) => e.ph === 'X' && e.cat === 'phase');
  if (batches.length !== 60 || phases.length !== 180) throw new Error(`${batches.length} steps, ${phases.length} phases`);
  if (!batches.every((e) => e.dur > 0 && e.ts > 1e15)) throw new Error('steps without a time or duration');
  // Phases are laid out as they ran (dataloader, forward, backward), not alphabetically.
  const first = phases.filter((e) => e.args.batch === 0 && e.tid === 0).sort((a, b) => a.ts - b.ts).map((e) => e.name);
  if (first.join(',') !== 'dataloader,forward,backward') throw new Error(`phase order ${first}`);
  // Every phase at its real start, inside its step's slice.
  for (const p of phases) {
    const step = batches.find((b) => b.tid === p.tid && b.args.batch === p.args.batch);
    if (p.ts < step.ts - 1 || p.ts + p.dur > step.ts + step.dur + 1) throw new Error(`phase ${p.name} of batch ${p.args.batch} outside its step`);
  }
  const fwd = phases.find((e) => e.args.batch === 0 && e.tid === 0 && e.name === 'forward');
  const b0 = batches.find((b) => b.tid === 0 && b.args.batch === 0);
  if (Math.abs(fwd.ts - b0.ts - 6000) > 1) throw new Error(`forward starts ${fwd.ts - b0.ts} µs into its step, fed 6 ms`);
  if (dl.suggestedFilename() !== `${JOB}.trace.json`) throw new Error(dl.suggestedFilename());
});

// Decisions of the shapes the plugins write (dlrover's plan, paramserver's
// recovery, the cluster's node-lost), served in place of /api/decisions.
const DECISIONS = [
  { plugin: 'dlrover', kind: 'resource-plan', subject: 'job-7', reason: 'worker memory peaked at 92% of its limit', time_ns: Date.now() * 1e6 - 5e9,
    body: { id: 3, kind: 'scale-up', plan: { groups: { worker: { count: 4, cpu: 8, memory_mib: 16384 } }, nodes: {} }, adjustments: ['memory +25%'] } },
  { plugin: 'paramserver', kind: 'recovery', subject: 'ps-1', reason: 'heartbeats stopped for 3 intervals', time_ns: Date.now() * 1e6 - 2e9,
    body: { incident: 1, phases: [{ phase: 1, duration_ms: 1200 }, { phase: 2, duration_ms: 800 }], total_ms: 2000, complete: true } },
  { plugin: 'mpi', kind: 'node-lost', subject: 'node-3', reason: 'no heartbeat for 2500 ms', time_ns: Date.now() * 1e6 - 1e9,
    body: { node: 'node-3', silent_ms: 2600, last_seen_ns: Date.now() * 1e6 - 2.6e9 } },
  // A finding: its reason is the whole sentence, said once.
  { plugin: 'paramserver', kind: 'node-dead', subject: 'ps-ctr/worker-3', reason: 'worker-3 missed heartbeats for 3.0 s (timeout 3 s); declared dead', time_ns: Date.now() * 1e6 - 1e9,
    finding: { job: 'ps-ctr', about: 'process', id: 'worker-3', headline: true, ended: false }, body: { process: 'worker-3' } },
];

test('decisions read as one sentence with their fields; raw JSON only behind "details"', async ({ page, url }) => {
  await page.route('**/api/decisions*', (r) => {
    const plugin = new URL(r.request().url()).searchParams.get('plugin');
    r.fulfill({ contentType: 'application/json', body: JSON.stringify({ decisions: DECISIONS.filter((d) => !plugin || d.plugin === plugin) }) });
  });
  await page.goto(`${url}/#/plugins`);
  await until('four decisions', async () => (await page.locator('#panels .decision').count()) === 4);
  const dead = await page.locator('#panels .decision[data-kind=node-dead] .decision-sentence').innerText();
  if (!dead.includes('Worker-3 missed heartbeats') || (dead.match(/worker-3/gi) || []).length !== 1) throw new Error(`the subject said twice: ${dead}`);
  const text = await page.locator('#panels').innerText();
  if (/[{[]\s*"|"\s*:/.test(text)) throw new Error(`raw JSON on the page:\n${text}`);
  for (const want of ['Resource plan job-7: worker memory peaked', 'Node node-3 was lost: no heartbeat', 'worker: count 4, cpu 8, memory mib 16,384', '2,000 ms']) {
    if (!text.includes(want)) throw new Error(`"${want}" not shown`);
  }
  const raw = page.locator('#panels .decision[data-plugin=dlrover] details.decision-raw');
  if (await raw.getAttribute('open') !== null) throw new Error('details open by default');
  await raw.locator('summary').click();
  // Opened, it stays open while the view refreshes (every 2 s) and shows the body.
  await until('details open with the body', async () => (await raw.getAttribute('open')) !== null
    && (await raw.locator('pre').innerText()).includes('"memory_mib": 16384'));
  // The view asks for the panel's decisions again on each refresh; by the
  // second request the first refresh has rebuilt the list.
  const refresh = () => page.waitForRequest((r) => r.url().includes('/api/decisions?plugin=dlrover'));
  await refresh();
  await refresh();
  if (await raw.getAttribute('open') === null) throw new Error('details closed again by a refresh');
  await shot(page, 'decisions');
  await page.unroute('**/api/decisions*');
});

// Deep links, each opened in a new tab: [hash, the view, what must show].
const LINKS = [
  ['#/system', 'system', '#system-charts'],
  ['#/jobs', 'jobs', `tr[data-job="${JOB}"]`],
  [`#/jobs/${JOB}`, 'jobs', '.step-chart canvas'],
  [`#/jobs/${JOB}?rank=1&from=5&to=14&window=900`, 'jobs', '.ranks-table tr.selected[data-rank="1"]'],
  ['#/nodes', 'nodes', '.nodes-table tr[data-node]'],
  ['#/nodes/local', 'nodes', 'dd[data-fact=state]'],
  ['#/plugins', 'plugins', 'details[data-panel=mpi]'],
  ['#/plugins/mpi', 'plugins', 'details[data-panel=mpi] [data-item=empty], details[data-panel=mpi] [data-item=summary]'],
  ['#/timings', 'timings', '#timings-empty'],
  ['#/config', 'config', '#config-text'],
  ['#plugins', 'plugins', 'details[data-panel=dlrover]'],
];

test('every deep link opens its view in a fresh tab, with its rank, batches and window', async ({ page, url }) => {
  for (const [hash, view, sel] of LINKS) {
    const p = await fresh(page, `${url}/${hash}`);
    try {
      await until(`${hash}: the ${view} tab and ${sel}`, async () => (await p.getAttribute('#tabs a.active', 'data-view')) === view
        && (await p.locator(`#view-${view} ${sel.split(', ').join(`, #view-${view} `)}`).count()) > 0);
      if (!(await p.locator(`#view-${view}`).isVisible())) throw new Error(`${hash}: view hidden`);
      if (hash.includes('rank=1')) {
        if (await p.inputValue('#job-rank') !== '1') throw new Error('rank not picked');
        await until('batches 5..14', async () => (await p.getAttribute('.step-chart', 'data-lo')) === '5' && (await p.getAttribute('.step-chart', 'data-hi')) === '14');
        if (await p.inputValue('#window') !== '900') throw new Error('window not taken from the URL');
        await shot(p, 'job-rank-1');
      }
      if (hash === '#/plugins/mpi') {
        if (await p.locator('details[data-panel=dlrover]').isVisible()) throw new Error('other panels shown');
        await shot(p, 'plugin-mpi');
      }
      if (hash === '#/nodes') await shot(p, 'nodes-standalone');
      if (hash === '#/nodes/local') await shot(p, 'node-local');
      if (p.errors.length) throw new Error(p.errors.join('\n'));
    } finally {
      await p.close();
    }
  }
});

// Tabs through the page and fails naming every visible control under the
// header or `view` that focus never reached. Controls are named by what they
// are (tag, id, name, link, label, text), not marked, because live views
// redraw their elements while the test tabs through them.
async function tabReachesEveryControl(page, view) {
  const describe = () => {
    window.kbName = (e) => [e.tagName, e.id, e.getAttribute('name'), e.getAttribute('href'), e.getAttribute('aria-label'),
      (e.textContent || '').trim().slice(0, 40)].join('|');
  };
  await page.evaluate(describe);
  const want = await page.evaluate((v) => {
    const sel = ['a', 'button', 'select', 'input', 'textarea', 'summary', '[tabindex="0"]'];
    const all = [...document.querySelectorAll(sel.flatMap((t) => [`header ${t}`, `#${v} ${t}`]).join(', '))];
    const shown = all.filter((e) => e.offsetParent && !e.disabled);
    return { names: [...new Set(shown.map(window.kbName))], stops: shown.length };
  }, view);
  const reached = new Set();
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  for (let i = 0; i < want.stops * 2 + 10 && want.names.some((k) => !reached.has(k)); i++) {
    await page.keyboard.press('Tab');
    reached.add(await page.evaluate(() => document.activeElement && window.kbName(document.activeElement)));
  }
  const missed = want.names.filter((k) => !reached.has(k));
  if (missed.length) throw new Error(`${view}: not reachable by Tab:\n${missed.join('\n')}`);
  return want.names.length;
}

test('the keyboard reaches every control of every view', async ({ page, url }) => {
  await page.goto(`${url}/#/jobs/${JOB}`);
  await until('the step chart', async () => (await page.locator('.step-chart canvas').count()) === 1);
  await page.waitForTimeout(500);
  const counts = { 'view-jobs': await tabReachesEveryControl(page, 'view-jobs') };
  for (const [hash, view] of [['#/system', 'view-system'], ['#/nodes', 'view-nodes'], ['#/timings', 'view-timings'],
    ['#/plugins', 'view-plugins'], ['#/config', 'view-config']]) {
    await page.goto(`${url}/${hash}`);
    await page.waitForTimeout(1200);
    if (view === 'view-system') {
      await until('the charts and their legends', async () => (await page.locator('#view-system .u-legend th[role="switch"]').count()) > 2, 20000);
    }
    counts[view] = await tabReachesEveryControl(page, view);
  }
  // Each view with content has controls of its own beyond the header's eight
  // (links, window, token); Timings may have none beyond its job picker.
  for (const [view, n] of Object.entries(counts)) {
    if (view !== 'view-timings' && n <= 8) throw new Error(`${view}: no controls of its own (${n})`);
  }
  // A chart legend entry is a switch: Enter hides its series and says so.
  await page.goto(`${url}/#/system`);
  const entry = page.locator('#view-system .u-legend th[role="switch"]').first();
  await until('a legend switch', async () => (await entry.count()) === 1, 20000);
  await entry.focus();
  await page.keyboard.press('Enter');
  if ((await entry.getAttribute('aria-checked')) !== 'false') throw new Error('Enter did not switch the series off');
  // A legend is one tab stop: its other entries are reached with the arrow keys.
  const stops = await page.locator('#view-system .u-legend').evaluateAll((ls) => ls.map((l) => l.querySelectorAll('th[tabindex="0"]').length));
  if (stops.some((n) => n > 1)) throw new Error(`legend tab stops per chart: ${stops}`);
  await page.keyboard.press('ArrowRight');
  const second = page.locator('#view-system .u-legend').first().locator('th[role="switch"]').nth(1);
  if (!(await second.evaluate((e) => e === document.activeElement))) throw new Error('ArrowRight did not move to the next legend entry');
});

test('at 600 px wide no view scrolls sideways', async ({ page, url }) => {
  await page.setViewportSize({ width: 600, height: 900 });
  const wide = [];
  for (const hash of ['#/system', '#/jobs', `#/jobs/${JOB}`, '#/nodes', '#/timings', '#/plugins', '#/config']) {
    await page.goto(`${url}/${hash}`);
    await page.reload(); // a fresh load at this width (a hash change alone keeps what was drawn wider)
    await page.waitForTimeout(1500); // charts and panels drawn
    const w = await page.evaluate(() => document.documentElement.scrollWidth);
    if (w > 600) {
      // The outermost elements that stick out, to say what to fix.
      const culprits = await page.evaluate(() => [...document.querySelectorAll('body *')]
        .filter((e) => e.getBoundingClientRect().right > 601 && e.parentElement.getBoundingClientRect().right <= 601)
        .slice(0, 4).map((e) => `${e.tagName.toLowerCase()}${e.id ? `#${e.id}` : ''}${e.className && typeof e.className === 'string' ? `.${e.className.split(' ').join('.')}` : ''} (${Math.round(e.getBoundingClientRect().right)} px)`));
      wide.push(`${hash}: ${w} px: ${culprits.join(', ')}`);
    }
    if (hash === '#/plugins') await shot(page, 'plugins-600px');
  }
  await page.setViewportSize({ width: 1400, height: 1000 });
  if (wide.length) throw new Error(`wider than the window: ${wide.join(', ')}`);
});

test('screenshots of the remaining views', async ({ page, url }) => {
  for (const [hash, name] of [['#/timings', 'timings-job'], ['#/config', 'config']]) {
    await page.goto(`${url}/${hash}`);
    await page.waitForTimeout(800);
    await shot(page, name);
  }
});

await suite({
  name: 'views',
  plugins: [['bundled/sysmetrics.wasm', 'sysmetrics'], ['bundled/mpi.wasm', 'mpi'], ['bundled/dlrover.wasm', 'dlrover'], ['bundled/paramserver.wasm', 'paramserver'], ['bundled/bottleneck.wasm', 'bottleneck']],
  args: ['--set', 'host.name="local"', '--set', 'sampler.period_ms=100', '--set', 'plugin.bottleneck.settings={lag_ms=200}'],
}, tests);
