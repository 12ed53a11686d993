// The bottleneck plugin's panel: on a job's page, a strip of one row per rank
// and one column per batch (or MPI window), each cell coloured by the step's
// verdict, with the rank that finished last in a batch marked; a legend with
// each verdict's count; the persistent straggler; and the selected step's
// reason. Keyboard: focus the strip, arrows move the selected cell, Home/End
// jump to the first/last batch. On the Plugins view (no job), the jobs it
// judged with links to their pages.
// Data: GET /api/plugins/bottleneck/jobs and /api/plugins/bottleneck/jobs/{job}.

export const VERDICT_COLORS = {
  'input-bound': '#e8a33d',
  'compute-bound': '#4f8fc9',
  'communication-bound': '#9b59b6',
  'host-bound': '#d0554b',
  idle: '#8fbf6a',
  unknown: '#b8b8b8',
};

const CELL_H = 16;
const LABEL_W = 64;
const MAX_COLUMNS = 400;

const CSS = `
.bn-legend { display: flex; flex-wrap: wrap; gap: 0.4em 1em; margin: 0.4em 0; font-size: 0.9em; }
.bn-key { display: inline-flex; align-items: center; gap: 0.35em; }
.bn-swatch { display: inline-block; width: 0.9em; height: 0.9em; border-radius: 2px; border: 1px solid #0003; }
.bn-strip { display: block; border: 1px solid #ccc; border-radius: 3px; background: #fff; }
.bn-strip:focus { outline: 2px solid #2a6fdb; outline-offset: 2px; }
.bn-detail { font-size: 0.9em; min-height: 2.6em; margin: 0.4em 0; }
.bn-straggler { margin: 0.3em 0; }`;

let ui = null;

function build(box, el) {
  if (!document.getElementById('bn-panel-style')) document.head.append(el('style', { id: 'bn-panel-style' }, CSS));
  const canvas = el('canvas', { class: 'bn-strip', tabindex: '0', role: 'img' });
  const parts = {
    box,
    canvas,
    empty: el('p', { class: 'empty bn-empty' }, 'No verdicts yet: steps are judged a moment after they end, once the node\'s samples covering them are in.'),
    straggler: el('p', { class: 'bn-straggler' }),
    legend: el('div', { class: 'bn-legend', 'aria-label': 'verdict colours' }),
    detail: el('p', { class: 'bn-detail', 'aria-live': 'polite' }),
    body: el('div', { class: 'bn-body' }),
    jobs: el('ul', { class: 'bn-jobs' }),
    data: null,
    sel: null,
  };
  parts.body.append(parts.straggler, parts.legend, canvas, parts.detail);
  canvas.addEventListener('keydown', (e) => move(parts, e));
  canvas.addEventListener('click', (e) => {
    const r = canvas.getBoundingClientRect();
    const g = parts.grid;
    if (!g) return;
    const col = Math.floor((e.clientX - r.left - LABEL_W) / g.cw);
    const row = Math.floor((e.clientY - r.top) / CELL_H);
    if (col >= 0 && col < g.batches.length && row >= 0 && row < g.ranks.length) select(parts, row, col);
  });
  box.replaceChildren(parts.empty, parts.body, parts.jobs);
  return parts;
}

function move(parts, e) {
  const g = parts.grid;
  if (!g || !g.batches.length) return;
  const [row, col] = parts.sel || [0, g.batches.length - 1];
  const keys = {
    ArrowLeft: [row, col - 1], ArrowRight: [row, col + 1], ArrowUp: [row - 1, col], ArrowDown: [row + 1, col],
    Home: [row, 0], End: [row, g.batches.length - 1],
  };
  const to = keys[e.key];
  if (!to) return;
  e.preventDefault();
  select(parts, Math.max(0, Math.min(g.ranks.length - 1, to[0])), Math.max(0, Math.min(g.batches.length - 1, to[1])));
}

function select(parts, row, col) {
  parts.sel = [row, col];
  draw(parts);
  const g = parts.grid;
  const cell = g.cells.get(`${g.ranks[row]}:${g.batches[col]}`);
  const unit = cell && cell.unit === 'window' ? 'window' : 'step';
  parts.detail.textContent = cell
    ? `rank ${cell.rank}, ${unit} ${cell.batch}: ${cell.verdict}${cell.last ? ' (finished last)' : ''} — ${cell.reason}`
    : `rank ${g.ranks[row]}, batch ${g.batches[col]}: not judged`;
  parts.canvas.dataset.selected = `${g.ranks[row]}:${g.batches[col]}`;
}

function grid(data) {
  const rows = data.rows || [];
  const ranks = [...new Set(rows.map((r) => r.rank))].sort((a, b) => a - b);
  let batches = [...new Set(rows.map((r) => r.batch))].sort((a, b) => a - b);
  batches = batches.slice(-MAX_COLUMNS);
  const cells = new Map(rows.map((r) => [`${r.rank}:${r.batch}`, r]));
  return { ranks, batches, cells, cw: 1 };
}

function draw(parts) {
  const g = parts.grid;
  const c = parts.canvas;
  const avail = Math.max(320, (parts.box.clientWidth || 800) - 4);
  g.cw = Math.max(1, Math.min(12, Math.floor((avail - LABEL_W) / Math.max(1, g.batches.length))));
  const w = LABEL_W + g.cw * g.batches.length;
  const h = CELL_H * g.ranks.length;
  const dpr = window.devicePixelRatio || 1;
  c.width = Math.round(w * dpr);
  c.height = Math.round(h * dpr);
  c.style.width = `${w}px`;
  c.style.height = `${h}px`;
  const x = c.getContext('2d');
  x.setTransform(dpr, 0, 0, dpr, 0, 0);
  x.fillStyle = '#fff';
  x.fillRect(0, 0, w, h);
  x.font = '12px system-ui, sans-serif';
  x.textBaseline = 'middle';
  g.ranks.forEach((rank, i) => {
    x.fillStyle = '#222';
    x.fillText(`rank ${rank}`, 4, i * CELL_H + CELL_H / 2);
    g.batches.forEach((b, j) => {
      const cell = g.cells.get(`${rank}:${b}`);
      if (!cell) return;
      x.fillStyle = VERDICT_COLORS[cell.verdict] || VERDICT_COLORS.unknown;
      x.fillRect(LABEL_W + j * g.cw, i * CELL_H + 1, Math.max(1, g.cw - (g.cw > 3 ? 1 : 0)), CELL_H - 2);
      if (cell.last && g.cw >= 3) {
        // The rank that finished last in the batch: a dark mark on top of its cell.
        x.fillStyle = '#000';
        x.fillRect(LABEL_W + j * g.cw, i * CELL_H + 1, Math.max(1, g.cw - 1), 3);
      }
    });
  });
  if (parts.sel) {
    const [row, col] = parts.sel;
    x.strokeStyle = '#000';
    x.lineWidth = 2;
    x.strokeRect(LABEL_W + col * g.cw, row * CELL_H + 1, Math.max(2, g.cw), CELL_H - 2);
  }
  c.setAttribute('aria-label', `Verdict per step: ${g.ranks.length} ranks by ${g.batches.length} batches, batches ${g.batches[0]} to ${g.batches[g.batches.length - 1]}. Arrow keys select a step and read its reason.`);
}

function legend(parts, el, data) {
  const counts = data.steps || {};
  parts.legend.replaceChildren(...Object.entries(VERDICT_COLORS).map(([v, color]) => el('span', { class: 'bn-key', 'data-verdict': v },
    el('span', { class: 'bn-swatch', style: `background:${color}` }), `${v} (${counts[v] || 0})`)));
  const s = data.straggler;
  parts.straggler.textContent = s
    ? `Straggler: rank ${s.rank} finished last in ${s.batches} of the last ${s.of} batches, by ${(s.late_by_s * 1000).toFixed(0)} ms on average; its steps there are ${s.verdict}. The black mark on a cell: that rank finished last in the batch.`
    : 'No persistent straggler. The black mark on a cell: that rank finished last in the batch.';
}

export async function render(box, { get, el, job }) {
  if (!ui || ui.box !== box) ui = build(box, el);
  if (!job) {
    const r = await get('/api/plugins/bottleneck/jobs');
    const jobs = (r.json && r.json.jobs) || [];
    ui.body.hidden = true;
    ui.empty.hidden = jobs.length > 0;
    ui.jobs.replaceChildren(...jobs.map((j) => el('li', {}, el('a', { href: `#/jobs/${encodeURIComponent(j.job)}` }, j.job),
      ` — ${Object.entries(j.steps).filter(([, n]) => n).map(([v, n]) => `${n} ${v}`).join(', ')}`)));
    return;
  }
  const r = await get(`/api/plugins/bottleneck/jobs/${encodeURIComponent(job)}?limit=4000`);
  const data = r.ok ? r.json : null;
  const has = !!(data && data.rows && data.rows.length);
  ui.empty.hidden = has;
  ui.body.hidden = !has;
  ui.jobs.replaceChildren();
  if (!has) return;
  box.dataset.job = job;
  ui.data = data;
  const keep = ui.sel && ui.grid ? [ui.grid.ranks[ui.sel[0]], ui.grid.batches[ui.sel[1]]] : null;
  ui.grid = grid(data);
  if (keep) {
    const row = ui.grid.ranks.indexOf(keep[0]);
    const col = ui.grid.batches.indexOf(keep[1]);
    ui.sel = row >= 0 && col >= 0 ? [row, col] : null;
  }
  legend(ui, el, data);
  draw(ui);
}
