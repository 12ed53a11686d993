// Checks shared by the view suites: charts that draw ink, time axes inside
// their data, and helpers to post a job's steps through /api/ingest.

// Every drawn chart on the page: opaque pixels inside its canvas (grid lines
// are nearly transparent, so axes alone count ~0), and every x-axis label of
// a time chart parsed back (HH:MM[:SS], local time) to a moment within the
// data's own range. Returns [{title, ink, labels, bad}].
export async function chartReport(page) {
  return page.evaluate(() => [...document.querySelectorAll('.chart')].filter((c) => c.offsetParent && c.querySelector('canvas')).map((c) => {
    const out = { title: c.dataset.title, ink: 0, labels: [], bad: [] };
    const cv = c.querySelector('canvas');
    const box = c.dataset.bbox ? JSON.parse(c.dataset.bbox) : { left: 0, top: 0, width: cv.width, height: cv.height };
    if (!c.dataset.bbox) out.bad.push('no plot area (data-bbox)');
    const d = cv.getContext('2d').getImageData(Math.round(box.left), Math.round(box.top), Math.max(1, Math.round(box.width)), Math.max(1, Math.round(box.height))).data;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 200) out.ink++;
    if (c.classList.contains('canvas-chart')) return out; // batches on x, not time
    const min = +c.dataset.xMin;
    const max = +c.dataset.xMax;
    if (!(max > min)) { out.bad.push(`no data range (x-min ${c.dataset.xMin}, x-max ${c.dataset.xMax})`); return out; }
    const ticks = c.dataset.ticks ? JSON.parse(c.dataset.ticks) : [];
    const labels = c.dataset.labels ? JSON.parse(c.dataset.labels) : [];
    out.labels = labels;
    if (!labels.length) out.bad.push('no axis labels recorded');
    for (const t of ticks) if (t < min - 1e-6 || t > max + 1e-6) out.bad.push(`tick ${t} outside ${min}..${max}`);
    for (const l of labels) {
      const m = /^(\d\d):(\d\d)(?::(\d\d))?$/.exec(l);
      if (!m) { out.bad.push(`label "${l}" is not a time of day within the data`); continue; }
      const sod = +m[1] * 3600 + +m[2] * 60 + +(m[3] || 0);
      const day0 = new Date(min * 1000);
      day0.setHours(0, 0, 0, 0);
      const slack = m[3] ? 1 : 60;
      const ok = [-1, 0, 1].some((k) => {
        const t = day0.getTime() / 1000 + k * 86400 + sod;
        return t >= min - slack && t <= max + slack;
      });
      if (!ok) out.bad.push(`label "${l}" outside the data (${new Date(min * 1000).toTimeString().slice(0, 8)}–${new Date(max * 1000).toTimeString().slice(0, 8)})`);
    }
    return out;
  }));
}

export async function expectCharts(page, { min = 1, minInk = 30 } = {}) {
  const charts = await chartReport(page);
  if (charts.length < min) throw new Error(`${charts.length} drawn charts, want at least ${min}`);
  const bad = charts.filter((c) => c.ink < minInk || c.bad.length);
  if (bad.length) throw new Error(`broken charts:\n${bad.map((c) => `${c.title}: ${c.ink} ink pixels; ${c.bad.join('; ')}`).join('\n')}`);
  return charts;
}

const MS = 1000000;

// One rank's report of `batches` steps: dataloader, forward, backward; rank
// `slow` takes `extraMs` longer in forward except every fifth batch, where
// rank 0 is the slow one (so the slowest rank changes between batches).
export function steps(job, rank, { batches = 30, t0 = Date.now() * MS - 60000 * MS, slow = 1, extraMs = 15, node = 'node-a' } = {}) {
  const timings = [];
  for (let b = 0; b < batches; b++) {
    const t = t0 + b * 120 * MS;
    const late = (b % 5 === 4 ? rank === 0 : rank === slow) ? extraMs : 0;
    timings.push(
      { name: 'dataloader', start_ns: t, end_ns: t + 6 * MS, batch_idx: b },
      { name: 'forward', start_ns: t + 6 * MS, end_ns: t + (36 + late) * MS, batch_idx: b },
      { name: 'backward', start_ns: t + (36 + late) * MS, end_ns: t + (80 + late) * MS, batch_idx: b },
    );
  }
  return { origin: { job, rank, local_rank: rank, node, role: 'worker' }, progress: [{ value: batches - 1, time_ns: t0 }], timings };
}

export async function post(url, body) {
  const r = await fetch(`${url}/api/ingest`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (r.status !== 202) throw new Error(`ingest answered ${r.status}: ${await r.text()}`);
}

// The decisions under `scope`: at least `min`, each a sentence, no raw JSON
// in what the page shows until a "details" toggle is opened.
export async function expectReadableDecisions(page, scope, min = 1) {
  const items = page.locator(`${scope} .decision`);
  const n = await items.count();
  if (n < min) throw new Error(`${n} decisions under ${scope}, want at least ${min}`);
  const text = await page.locator(scope).innerText();
  if (/[{[]\s*"|"\s*:\s*[[{"\d]/.test(text)) throw new Error(`raw JSON shown under ${scope}:\n${text.slice(0, 2000)}`);
  if (await page.locator(`${scope} details.decision-raw[open]`).count()) throw new Error('a details toggle is open by default');
  for (let i = 0; i < n; i++) {
    const s = (await items.nth(i).locator('.decision-sentence').innerText()).trim();
    if (s.length < 8 || /[{}]/.test(s)) throw new Error(`not a sentence: ${s}`);
  }
}
