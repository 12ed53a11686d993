// Plugin panels: what a plugin answers at GET /api/plugins/<name>/panel
// (plugins/sdk/src/panel.rs writes the format down), drawn as it says. The
// dashboard knows the item kinds (heading, text, stats, table, strip, flame,
// list, links) and no plugin: a plugin's view ships with the plugin.
//
//   fetchPanel(name, {job, ...controls}) -> spec | null (the plugin has no panel here)
//   drawPanel(box, spec, {name, onControl, hide}) updates box in place (controls
//   named in `hide` are the page's own, e.g. `job` on a job's page): an item is
//   redrawn only when its data changed, and a strip keeps its selected cell.
import { get, el } from './api.js';

export async function fetchPanel(name, params = {}) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v != null && v !== '')).toString();
  const r = await get(`/api/plugins/${encodeURIComponent(name)}/panel${q ? `?${q}` : ''}`);
  if (r.status === 404) return null;
  if (!r.ok || !r.json) throw new Error((r.json && r.json.error) || `HTTP ${r.status}`);
  return r.json;
}

const tone = (t) => (t && t !== 'plain' ? t : '');

// A link in a spec is relative to the plugin's routes unless it is a page route or absolute.
const resolve = (name, href) => (/^(#|\/|https?:)/.test(href) ? href : `/api/plugins/${encodeURIComponent(name)}/${href}`);

function bar(segments) {
  const total = segments.reduce((s, x) => s + Math.max(0, x.value), 0) || 1;
  return el('span', { class: 'spec-bar', role: 'img', 'aria-label': segments.map((s) => `${s.label} ${s.value}`).join(', ') },
    ...segments.map((s) => el('span', {
      class: 'spec-seg', 'data-label': s.label, title: s.label,
      style: `width:${((100 * Math.max(0, s.value)) / total).toFixed(2)}%;background:${s.color}`,
    })));
}

function cell(c) {
  const attrs = { class: tone(c.tone) };
  if (c.value != null) attrs['data-value'] = String(c.value);
  return el('td', attrs, ...(c.bar && c.bar.length ? [bar(c.bar), ' '] : []), c.text);
}

function table(t) {
  if (!t.rows.length) return [t.title ? el('h4', {}, t.title) : '', el('p', { class: 'muted' }, t.empty || 'Nothing yet.')];
  return [t.title ? el('h4', {}, t.title) : '',
    el('div', { class: 'spec-scroll' }, el('table', { class: 'spec-table' },
      el('thead', {}, el('tr', {}, ...t.columns.map((h) => el('th', {}, h)))),
      el('tbody', {}, ...t.rows.map((r) => el('tr', { 'data-key': r.key, class: tone(r.tone) }, ...r.cells.map(cell))))))];
}

// A flame graph (root at the bottom); frames under 0.3 % of the root are left out.
const FRAME_H = 18;
function flame(item) {
  const root = item.tree;
  const box = el('div', { class: 'spec-flame' });
  const nodes = [];
  let depth = 0;
  const walk = (n, x, d) => {
    depth = Math.max(depth, d + 1);
    nodes.push({ n, x, d });
    let cx = x;
    for (const c of n.children) {
      if (c.value / root.value >= 0.003) walk(c, cx, d + 1);
      cx += c.value / root.value;
    }
  };
  if (root.value > 0) walk(root, 0, 0);
  const amount = (v) => (item.unit === 's' ? (v < 1 ? `${(v * 1000).toFixed(0)} ms` : `${v.toFixed(2)} s`) : `${v} ${item.unit}`);
  box.style.height = `${depth * FRAME_H}px`;
  box.append(...nodes.map(({ n, x, d }) => el('div', {
    class: 'spec-frame',
    'data-frame': n.name,
    title: `${n.name}: ${amount(n.value)} (${((100 * n.value) / root.value).toFixed(1)}%)`,
    style: `left:${(100 * x).toFixed(3)}%;width:${((100 * n.value) / root.value).toFixed(3)}%;bottom:${d * FRAME_H}px;background:${d ? shade(n.name) : '#c9483f'};${d ? '' : 'color:#fff;'}`,
  }, d ? n.name : `${n.name}: ${amount(n.value)}`)));
  return [el('h4', {}, item.title), el('p', { class: 'muted' }, item.note), box];
}

// A stable warm shade per frame name, so one function reads the same everywhere.
function shade(name) {
  let h = 0;
  for (const c of name) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${h % 30}, ${70 + (h % 20)}%, ${62 + (h % 12)}%)`;
}

// The strip: rows × columns of category colours on a canvas, an axis of
// column labels under it, a legend with each category's count, and the
// selected cell's detail read out. Arrows move the selection, Home/End jump.
const CELL_H = 16;
const LABEL_W = 72;
const AXIS_H = 18;
const MAX_COLUMNS = 400;

class StripView {
  constructor(box) {
    this.box = box;
    this.title = el('h4');
    this.legend = el('div', { class: 'spec-legend' });
    this.canvas = el('canvas', { class: 'spec-strip', tabindex: '0', role: 'img' });
    this.mark = el('p', { class: 'muted spec-mark' });
    this.detail = el('p', { class: 'spec-detail', 'aria-live': 'polite' });
    this.sel = null;
    this.canvas.addEventListener('keydown', (e) => this.key(e));
    this.canvas.addEventListener('click', (e) => {
      const r = this.canvas.getBoundingClientRect();
      const col = Math.floor((e.clientX - r.left - LABEL_W) / this.cw);
      const row = Math.floor((e.clientY - r.top) / CELL_H);
      if (col >= 0 && col < this.cols.length && row >= 0 && row < this.s.rows.length) this.select(row, col);
    });
    box.replaceChildren(this.title, this.legend, el('div', { class: 'spec-scroll' }, this.canvas), this.mark, this.detail);
  }

  update(s) {
    const keep = this.sel && this.s ? [this.s.rows[this.sel[0]], this.cols[this.sel[1]]] : null;
    this.s = s;
    // The last MAX_COLUMNS columns: a cell stays wide enough to see and click.
    const first = Math.max(0, s.columns.length - MAX_COLUMNS);
    this.cols = s.columns.slice(first);
    this.cells = new Map();
    for (const c of s.cells) if (c.col >= first) this.cells.set(`${c.row}:${c.col - first}`, c);
    this.title.textContent = s.title;
    this.legend.replaceChildren(...s.categories.map(([name, color, n]) => el('span', { class: 'spec-key', 'data-category': name },
      el('span', { class: 'spec-swatch', style: `background:${color}` }), `${name} (${n})`)));
    this.mark.textContent = s.mark;
    this.sel = null;
    if (keep) {
      const row = s.rows.indexOf(keep[0]);
      const col = this.cols.indexOf(keep[1]);
      if (row >= 0 && col >= 0) this.sel = [row, col];
    }
    this.draw();
    if (this.sel) this.select(...this.sel);
  }

  key(e) {
    if (!this.cols.length) return;
    const [row, col] = this.sel || [0, this.cols.length - 1];
    const to = { ArrowLeft: [row, col - 1], ArrowRight: [row, col + 1], ArrowUp: [row - 1, col], ArrowDown: [row + 1, col], Home: [row, 0], End: [row, this.cols.length - 1] }[e.key];
    if (!to) return;
    e.preventDefault();
    this.select(Math.max(0, Math.min(this.s.rows.length - 1, to[0])), Math.max(0, Math.min(this.cols.length - 1, to[1])));
  }

  select(row, col) {
    this.sel = [row, col];
    this.draw();
    const c = this.cells.get(`${row}:${col}`);
    const where = `${this.s.rows[row]}, ${this.s.column_label} ${this.cols[col]}`;
    this.detail.textContent = c ? `${where}: ${c.detail}` : `${where}: nothing recorded`;
    this.canvas.dataset.selected = `${this.s.rows[row]}:${this.cols[col]}`;
  }

  draw() {
    const { s, canvas: c } = this;
    const avail = Math.max(280, (this.box.clientWidth || 800) - 4);
    this.cw = Math.max(1, Math.min(14, Math.floor((avail - LABEL_W) / Math.max(1, this.cols.length))));
    const w = LABEL_W + this.cw * this.cols.length;
    const h = CELL_H * s.rows.length + AXIS_H;
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
    s.rows.forEach((label, i) => {
      x.fillStyle = '#222';
      x.fillText(label, 4, i * CELL_H + CELL_H / 2);
    });
    for (const [k, cell] of this.cells) {
      const [i, j] = k.split(':').map(Number);
      x.fillStyle = (s.categories[cell.category] || [])[1] || '#b8b8b8';
      x.fillRect(LABEL_W + j * this.cw, i * CELL_H + 1, Math.max(1, this.cw - (this.cw > 3 ? 1 : 0)), CELL_H - 2);
      if (cell.marked && this.cw >= 3) {
        x.fillStyle = '#000';
        x.fillRect(LABEL_W + j * this.cw, i * CELL_H + 1, Math.max(1, this.cw - 1), 3);
      }
    }
    // The column axis: a label about every 80 px.
    const every = Math.max(1, Math.ceil(80 / this.cw));
    x.fillStyle = '#444';
    x.textBaseline = 'top';
    const y = CELL_H * s.rows.length + 3;
    x.fillText(s.column_label, 4, y);
    for (let j = 0; j < this.cols.length; j += every) x.fillText(String(this.cols[j]), LABEL_W + j * this.cw, y);
    if (this.sel) {
      const [row, col] = this.sel;
      x.strokeStyle = '#000';
      x.lineWidth = 2;
      x.strokeRect(LABEL_W + col * this.cw, row * CELL_H + 1, Math.max(2, this.cw), CELL_H - 2);
    }
    c.setAttribute('aria-label', `${s.title}: ${s.rows.length} rows by ${this.cols.length} ${s.column_label}es, ${this.cols[0] ?? ''} to ${this.cols[this.cols.length - 1] ?? ''}. Arrow keys select a cell and read it.`);
  }
}

function render(item, name) {
  switch (item.kind) {
    case 'heading': return [el('h3', {}, item.text)];
    case 'text': return [el('p', { class: tone(item.tone) }, item.text)];
    case 'stats': return [el('dl', { class: 'spec-stats' }, ...item.stats.map((s) => el('div', { 'data-stat': s.label }, el('dt', {}, s.label), el('dd', {}, s.value))))];
    case 'table': return table(item);
    case 'flame': return flame(item);
    case 'list': return item.items.length
      ? [el('ul', { class: 'spec-list' }, ...item.items.map((e) => el('li', { class: tone(e.tone) }, e.href ? el('a', { href: resolve(name, e.href) }, e.text) : e.text)))]
      : [el('p', { class: 'muted' }, item.empty)];
    case 'links': return [el('p', { class: 'spec-links' }, ...item.links.flatMap((l, i) => [i ? ' · ' : '',
      el('a', { href: resolve(name, l.href), ...(l.download ? { download: l.download } : {}) }, l.label)]))];
    default: return [el('p', { class: 'muted' }, `(a "${item.kind}" item this dashboard cannot draw)`)];
  }
}

export function drawPanel(box, spec, { name, onControl, hide = [] }) {
  box.classList.add('spec-panel');
  let controls = box.querySelector(':scope > .spec-controls');
  if (!controls) {
    controls = el('div', { class: 'spec-controls' });
    box.prepend(controls);
  }
  const shown = spec.controls.filter((c) => !hide.includes(c.name));
  const csig = JSON.stringify(shown);
  if (controls.dataset.sig !== csig) {
    controls.dataset.sig = csig;
    controls.replaceChildren(...shown.map((c) => {
      const s = el('select', { 'data-control': c.name, 'aria-label': c.label }, ...c.options.map(([v, l]) => el('option', { value: v }, l)));
      s.value = c.value;
      s.addEventListener('change', () => onControl(c.name, s.value));
      return el('label', {}, `${c.label} `, s);
    }));
  }
  const seen = new Set();
  let prev = controls;
  spec.items.forEach((item, i) => {
    const id = item.id || `${item.kind}-${i}`;
    seen.add(id);
    let part = box.querySelector(`:scope > [data-item="${CSS.escape(id)}"]`);
    if (!part) {
      part = el('div', { class: `spec-item spec-item-${item.kind}`, 'data-item': id });
      if (item.kind === 'strip') part.view = new StripView(part);
    }
    if (prev.nextSibling !== part) prev.after(part);
    prev = part;
    const sig = JSON.stringify(item);
    if (part.sig === sig) return;
    part.sig = sig; // a property, not an attribute: a strip's data can be large
    if (part.view) part.view.update(item);
    else part.replaceChildren(...render(item, name));
  });
  for (const part of box.querySelectorAll(':scope > [data-item]')) if (!seen.has(part.dataset.item)) part.remove();
}
