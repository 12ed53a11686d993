// A job's steps on canvas: per batch index, every rank's time stacked by phase
// (the rank the diagnosis names outlined and marked over the batches it
// covers), and the straggler strip (rank × batch, coloured by each rank's own
// step time). Both share one view over the batches, zoomed with the wheel,
// +/- or the buttons, panned by dragging or the arrow keys. Data are typed
// arrays built once; a frame draws at most one column per pixel, so an hour
// of 8 ranks × 36 000 batches draws in a few ms.

// Phase colours spaced in lightness (dark, light, mid, ...) so stacks read in greyscale.
export const PHASE_COLORS = ['#1f4e9c', '#f2b35e', '#5aa6a0', '#7a2e5c', '#c9d66a', '#444444', '#e7869a', '#9ec5f0'];
export const HIGHLIGHT = '#000000';

// Step time → colour, light (fast) to dark (slow): monotonic in lightness.
const RAMP = [[250, 246, 205], [242, 184, 92], [208, 98, 48], [140, 42, 44], [52, 14, 46]];
export function ramp(f) {
  const x = Math.min(1, Math.max(0, f)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const t = x - i;
  return RAMP[i].map((c, k) => Math.round(c + (RAMP[i + 1][k] - c) * t));
}

// The job view's steps as columns.
export function model(job) {
  const steps = job.steps || [];
  const rankIds = [...new Set([...(Array.isArray(job.ranks) ? job.ranks.map((r) => r.rank) : []), ...steps.flatMap((s) => s.ranks.map((r) => r.rank))])].sort((a, b) => a - b);
  // Phases in the order they run within a step (the API's phase_order), any
  // it does not list after them.
  const phaseSet = new Set(Array.isArray(job.phase_order) ? job.phase_order : []);
  for (const s of steps) for (const r of s.ranks) for (const p in r.phases) phaseSet.add(p);
  const phases = [...phaseSet];
  const nB = steps.length;
  const nR = rankIds.length;
  const nP = phases.length;
  const rIdx = new Map(rankIds.map((r, i) => [r, i]));
  const pIdx = new Map(phases.map((p, i) => [p, i]));
  const batch = new Float64Array(nB);
  const dur = new Float32Array(nB * nR * nP);
  const total = new Float32Array(nB * nR).fill(NaN);
  const start = new Float64Array(nB * nR);
  // The rank the diagnosis names, per batch (-1: none); see markCulprit.
  const named = new Int32Array(nB).fill(-1);
  for (let b = 0; b < nB; b++) {
    const s = steps[b];
    batch[b] = s.batch;
    for (const r of s.ranks) {
      const ri = rIdx.get(r.rank);
      total[b * nR + ri] = r.total_s;
      start[b * nR + ri] = r.start_ns;
      for (const p in r.phases) dur[(b * nR + ri) * nP + pIdx.get(p)] = r.phases[p];
    }
  }
  // Per rank: mean step.
  const stats = rankIds.map(() => ({ sum: 0, n: 0 }));
  for (let b = 0; b < nB; b++) {
    for (let r = 0; r < nR; r++) {
      const t = total[b * nR + r];
      if (Number.isNaN(t)) continue;
      stats[r].sum += t; stats[r].n++;
    }
  }
  // Per batch over all ranks: the sum of each phase, how many ranks, and the
  // slowest total, so a zoomed-out frame costs O(batches × phases).
  const phaseSum = new Float32Array(nB * nP);
  const count = new Uint16Array(nB);
  const maxTotal = new Float32Array(nB);
  for (let b = 0; b < nB; b++) {
    for (let r = 0; r < nR; r++) {
      const t = total[b * nR + r];
      if (Number.isNaN(t)) continue;
      count[b]++;
      if (t > maxTotal[b]) maxTotal[b] = t;
      const o = (b * nR + r) * nP;
      for (let p = 0; p < nP; p++) phaseSum[b * nP + p] += dur[o + p];
    }
  }
  // Per rank, running sums of step time and steps over batches: the strip's
  // mean for any column of batches is then two lookups.
  const cumT = new Float64Array((nB + 1) * nR);
  const cumN = new Uint32Array((nB + 1) * nR);
  for (let b = 0; b < nB; b++) {
    for (let r = 0; r < nR; r++) {
      const t = total[b * nR + r];
      const ok = !Number.isNaN(t);
      cumT[(b + 1) * nR + r] = cumT[b * nR + r] + (ok ? t : 0);
      cumN[(b + 1) * nR + r] = cumN[b * nR + r] + (ok ? 1 : 0);
    }
  }
  return { rankIds, phases, nB, nR, nP, batch, dur, total, start, named, stats, phaseSum, count, maxTotal, cumT, cumN };
}

// Marks `rank` (a rank id) as the culprit in the batches whose step starts
// within [fromNs, toNs] (the diagnosis finding's time range; all batches
// without one). Returns how many batches were marked.
export function markCulprit(m, rank, fromNs, toNs) {
  m.named.fill(-1);
  const ri = m.rankIds.indexOf(rank);
  if (ri < 0 || m.nR < 2) return 0;
  let n = 0;
  for (let b = 0; b < m.nB; b++) {
    const t = m.start[b * m.nR + ri];
    if (Number.isNaN(m.total[b * m.nR + ri])) continue;
    if (fromNs != null && (t < fromNs || t > toNs)) continue;
    m.named[b] = ri;
    n++;
  }
  return n;
}

function niceStep(max, n) {
  const raw = max / n;
  const p = 10 ** Math.floor(Math.log10(raw || 1));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw) || raw;
}

const secs = (v) => (v < 1 ? `${+(v * 1000).toPrecision(3)} ms` : `${+v.toPrecision(3)} s`);

// The shared window over batch positions [lo, hi).
export class BatchView {
  constructor(n, onChange) {
    this.n = n;
    this.lo = 0;
    this.hi = n;
    this.onChange = onChange;
    this.charts = [];
    this.frame = 0;
  }

  set(lo, hi) {
    const span = Math.max(Math.min(hi - lo, this.n), Math.min(this.n, 4));
    let a = Math.round(lo);
    a = Math.max(0, Math.min(this.n - Math.round(span), a));
    this.lo = a;
    this.hi = Math.min(this.n, a + Math.round(span));
    this.schedule();
    if (this.onChange) this.onChange(this.lo, this.hi);
  }

  zoom(factor, at = 0.5) {
    const span = this.hi - this.lo;
    const next = Math.max(4, span * factor);
    const c = this.lo + span * at;
    this.set(c - next * at, c - next * at + next);
  }

  pan(frac) {
    const span = this.hi - this.lo;
    this.set(this.lo + span * frac, this.hi + span * frac);
  }

  // Draws on the next frame. Each frame's cost (draw time, and the time from
  // the first change it shows to the end of its drawing) is kept in
  // `frames`, for the benchmark (web/bench/job-page.mjs).
  schedule() {
    if (this.frame) return;
    const asked = performance.now();
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      const t0 = performance.now();
      for (const c of this.charts) c.draw();
      const t1 = performance.now();
      if (!this.frames) { this.frames = []; performance.mark('steps-first-draw'); }
      if (this.frames.length < 1000) this.frames.push({ draw: t1 - t0, latency: t1 - asked });
    });
  }
}

// A canvas sized for the device's pixels, with keyboard and pointer zoom/pan.
class CanvasChart {
  constructor(parent, view, { height, label, cls }) {
    this.view = view;
    this.box = document.createElement('div');
    this.box.className = `chart canvas-chart ${cls}`;
    this.canvas = document.createElement('canvas');
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute('role', 'img');
    this.canvas.setAttribute('aria-label', `${label}. Keys: + and - zoom, arrows pan, 0 resets.`);
    this.tip = document.createElement('div');
    this.tip.className = 'chart-tip';
    this.tip.hidden = true;
    this.box.append(this.canvas, this.tip);
    parent.append(this.box);
    this.height = height;
    this.left = 64;
    this.right = 12;
    view.charts.push(this);
    this.canvas.addEventListener('keydown', (e) => {
      const k = e.key;
      if (k === '+' || k === '=') view.zoom(0.5);
      else if (k === '-' || k === '_') view.zoom(2);
      else if (k === 'ArrowLeft') view.pan(-0.25);
      else if (k === 'ArrowRight') view.pan(0.25);
      else if (k === '0' || k === 'Home') view.set(0, view.n);
      else return;
      e.preventDefault();
    });
    this.canvas.addEventListener('wheel', (e) => {
      e.preventDefault();
      view.zoom(e.deltaY > 0 ? 1.25 : 0.8, this.at(e));
    }, { passive: false });
    let drag = null;
    this.canvas.addEventListener('pointerdown', (e) => { drag = { x: e.clientX, lo: view.lo, hi: view.hi }; this.canvas.setPointerCapture(e.pointerId); });
    this.canvas.addEventListener('pointermove', (e) => {
      if (drag) {
        const per = (drag.hi - drag.lo) / this.plotW();
        const d = (drag.x - e.clientX) * per;
        view.set(drag.lo + d, drag.hi + d);
      } else this.hover(e);
    });
    this.canvas.addEventListener('pointerup', () => { drag = null; });
    this.canvas.addEventListener('pointerleave', () => { this.tip.hidden = true; });
  }

  plotW() { return Math.max(10, this.width - this.left - this.right); }

  at(e) {
    const r = this.canvas.getBoundingClientRect();
    return Math.min(1, Math.max(0, (e.clientX - r.left - this.left) / this.plotW()));
  }

  // The batch position under the pointer.
  pos(e) {
    const v = this.view;
    return Math.min(v.hi - 1, Math.floor(v.lo + this.at(e) * (v.hi - v.lo)));
  }

  prepare() {
    const dpr = window.devicePixelRatio || 1;
    this.width = Math.max(400, this.box.parentElement.clientWidth - 16);
    if (this.canvas.width !== Math.round(this.width * dpr) || this.canvas.height !== Math.round(this.height * dpr)) {
      this.canvas.width = Math.round(this.width * dpr);
      this.canvas.height = Math.round(this.height * dpr);
      this.canvas.style.width = `${this.width}px`;
      this.canvas.style.height = `${this.height}px`;
    }
    const g = this.canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, this.width, this.height);
    g.font = '11px system-ui, sans-serif';
    return g;
  }

  // The plot area in canvas pixels (the browser tests count ink inside it).
  bbox(top, bottom) {
    const dpr = window.devicePixelRatio || 1;
    this.box.dataset.bbox = JSON.stringify({ left: this.left * dpr, top: top * dpr, width: this.plotW() * dpr, height: (bottom - top) * dpr });
  }

  xAxis(g, y) {
    const v = this.view;
    const m = this.m;
    g.fillStyle = '#444';
    g.textAlign = 'center';
    const span = v.hi - v.lo;
    const step = Math.max(1, niceStep(span, 8));
    const first = Math.ceil(v.lo / step) * step;
    for (let p = first; p < v.hi; p += step) {
      const x = this.left + ((p - v.lo + 0.5) / span) * this.plotW();
      g.fillText(String(m.batch[Math.floor(p)]), x, y);
    }
    g.fillText('batch', this.left + this.plotW() / 2, y + 14);
  }
}

export class StepChart extends CanvasChart {
  constructor(parent, view, m, { rank = null } = {}) {
    super(parent, view, { height: 300, label: 'Step time per batch for every rank, stacked by phase; the rank the diagnosis names is outlined', cls: 'step-chart' });
    this.m = m;
    this.rank = rank; // a rank position to show alone, or null for all
    this.box.dataset.title = 'step time per batch';
  }

  draw() {
    const g = this.prepare();
    const { m, view: v } = this;
    const ranks = this.rank == null ? [...Array(m.nR).keys()] : [this.rank];
    const top = 14;
    const bottom = this.height - 34;
    const h = bottom - top;
    const W = this.plotW();
    const span = v.hi - v.lo;
    const all = this.rank == null;
    let ymax = 0;
    if (all) for (let b = v.lo; b < v.hi; b++) { if (m.maxTotal[b] > ymax) ymax = m.maxTotal[b]; }
    else for (let b = v.lo; b < v.hi; b++) { const t = m.total[b * m.nR + this.rank]; if (t > ymax) ymax = t; }
    ymax = ymax > 0 ? ymax * 1.08 : 1;
    const y = (s) => bottom - (s / ymax) * h;
    // y axis
    g.strokeStyle = '#e5e7eb';
    g.fillStyle = '#444';
    g.textAlign = 'right';
    const ys = niceStep(ymax, 5);
    for (let s = 0; s <= ymax; s += ys) {
      g.beginPath(); g.moveTo(this.left, y(s) + 0.5); g.lineTo(this.left + W, y(s) + 0.5); g.stroke();
      g.fillText(secs(s), this.left - 6, y(s) + 4);
    }
    const group = W / span;
    const nr = ranks.length;
    this.detailed = group >= nr * 3;
    this.box.dataset.mode = this.detailed ? 'per-rank' : 'binned';
    if (this.detailed) {
      const sub = (group * 0.85) / nr;
      for (let b = v.lo; b < v.hi; b++) {
        const gx = this.left + (b - v.lo) * group + group * 0.075;
        ranks.forEach((r, k) => {
          const x = gx + k * sub;
          let acc = 0;
          for (let p = 0; p < m.nP; p++) {
            const d = m.dur[(b * m.nR + r) * m.nP + p];
            if (!d) continue;
            g.fillStyle = PHASE_COLORS[p % PHASE_COLORS.length];
            g.fillRect(x, y(acc + d), Math.max(1, sub - 1), y(acc) - y(acc + d));
            acc += d;
          }
          if (m.named[b] === r && m.nR > 1) {
            g.strokeStyle = HIGHLIGHT;
            g.lineWidth = 2;
            g.strokeRect(x, y(acc), Math.max(1, sub - 1), bottom - y(acc));
            g.fillStyle = HIGHLIGHT;
            g.beginPath();
            const cx = x + sub / 2;
            g.moveTo(cx - 4, y(acc) - 9); g.lineTo(cx + 4, y(acc) - 9); g.lineTo(cx, y(acc) - 3); g.fill();
            g.lineWidth = 1;
          }
        });
      }
    } else {
      // One column per pixel pair: mean phases over the column's batches and
      // ranks, stacked; the slowest rank's time as a black line over them.
      const cols = Math.max(1, Math.floor(W / 2));
      const per = span / cols;
      const sums = new Float64Array(m.nP);
      g.lineWidth = 1.5;
      const line = [];
      for (let c = 0; c < cols; c++) {
        const b0 = v.lo + Math.floor(c * per);
        const b1 = Math.max(b0 + 1, v.lo + Math.floor((c + 1) * per));
        sums.fill(0);
        let n = 0;
        let worst = 0;
        for (let b = b0; b < b1; b++) {
          if (all) {
            n += m.count[b];
            if (m.maxTotal[b] > worst) worst = m.maxTotal[b];
            for (let p = 0; p < m.nP; p++) sums[p] += m.phaseSum[b * m.nP + p];
            continue;
          }
          const t = m.total[b * m.nR + this.rank];
          if (Number.isNaN(t)) continue;
          n++;
          if (t > worst) worst = t;
          const o = (b * m.nR + this.rank) * m.nP;
          for (let p = 0; p < m.nP; p++) sums[p] += m.dur[o + p];
        }
        if (!n) continue;
        const x = this.left + (c * W) / cols;
        const w = Math.max(1, W / cols);
        let acc = 0;
        for (let p = 0; p < m.nP; p++) {
          const d = sums[p] / n;
          g.fillStyle = PHASE_COLORS[p % PHASE_COLORS.length];
          g.fillRect(x, y(acc + d), w, y(acc) - y(acc + d));
          acc += d;
        }
        line.push(x + w / 2, y(worst));
      }
      if (m.nR > 1 && this.rank == null) {
        g.strokeStyle = HIGHLIGHT;
        g.beginPath();
        for (let i = 0; i < line.length; i += 2) (i ? g.lineTo : g.moveTo).call(g, line[i], line[i + 1]);
        g.stroke();
      }
      g.lineWidth = 1;
    }
    this.xAxis(g, this.height - 18);
    this.bbox(top, bottom);
    this.box.dataset.lo = String(m.batch[v.lo]);
    this.box.dataset.hi = String(m.batch[v.hi - 1]);
  }

  hover(e) {
    const { m } = this;
    const b = this.pos(e);
    if (b < 0 || b >= m.nB) return;
    const rows = [];
    for (let r = 0; r < m.nR; r++) {
      const t = m.total[b * m.nR + r];
      if (Number.isNaN(t)) continue;
      const parts = m.phases.map((p, k) => `${p} ${secs(m.dur[(b * m.nR + r) * m.nP + k])}`).join(', ');
      rows.push(`${m.named[b] === r && m.nR > 1 ? '▼ ' : ''}rank ${m.rankIds[r]}: ${secs(t)} (${parts})`);
    }
    this.tip.textContent = `batch ${m.batch[b]}\n${rows.join('\n')}`;
    this.tip.hidden = false;
    const r = this.canvas.getBoundingClientRect();
    this.tip.style.left = `${Math.min(e.clientX - r.left + 12, this.width - 260)}px`;
    this.tip.style.top = '8px';
  }
}

export class StragglerStrip extends CanvasChart {
  constructor(parent, view, m, { rank = null } = {}) {
    const row = Math.max(8, Math.min(22, Math.floor(200 / Math.max(1, m.nR))));
    super(parent, view, { height: row * m.nR + 40, label: 'Straggler strip: one row per rank, one column per batch, darker is slower', cls: 'straggler-strip' });
    this.m = m;
    this.row = row;
    this.rank = rank;
    this.box.dataset.title = 'straggler strip';
  }

  draw() {
    const g = this.prepare();
    const { m, view: v, row } = this;
    const W = Math.floor(this.plotW());
    const span = v.hi - v.lo;
    const cols = Math.min(W, span);
    const per = span / cols;
    const vals = new Float32Array(cols * m.nR).fill(NaN);
    let lo = Infinity;
    let hi = -Infinity;
    for (let c = 0; c < cols; c++) {
      const b0 = v.lo + Math.floor(c * per);
      const b1 = Math.max(b0 + 1, v.lo + Math.floor((c + 1) * per));
      for (let r = 0; r < m.nR; r++) {
        const n = m.cumN[b1 * m.nR + r] - m.cumN[b0 * m.nR + r];
        if (!n) continue;
        const x = (m.cumT[b1 * m.nR + r] - m.cumT[b0 * m.nR + r]) / n;
        vals[c * m.nR + r] = x;
        if (x < lo) lo = x;
        if (x > hi) hi = x;
      }
    }
    const top = 4;
    const dpr = window.devicePixelRatio || 1;
    const iw = Math.max(1, Math.round(W * dpr));
    const ih = Math.round(row * m.nR * dpr);
    if (!this.img || this.img.width !== iw || this.img.height !== ih) this.img = g.createImageData(iw, ih);
    const img = this.img;
    const px32 = new Uint32Array(img.data.buffer);
    const range = hi > lo ? hi - lo : 1;
    // 64 colours of the ramp as little-endian RGBA words; one pixel row per
    // rank is computed, the rest of its rows are copies of it.
    if (!this.lut) {
      this.lut = new Uint32Array(65);
      for (let k = 0; k < 64; k++) { const [R, G, B] = ramp(k / 63); this.lut[k] = (255 << 24 | B << 16 | G << 8 | R) >>> 0; }
      this.lut[64] = (255 << 24 | 230 << 16 | 230 << 8 | 230) >>> 0;
    }
    px32.fill(0);
    for (let r = 0; r < m.nR; r++) {
      const y0 = Math.round(r * row * dpr);
      const y1 = Math.round(((r + 1) * row - 1) * dpr);
      if (y1 <= y0) continue;
      const base = y0 * iw;
      for (let px = 0; px < iw; px++) {
        const x = vals[Math.min(cols - 1, Math.floor((px / iw) * cols)) * m.nR + r];
        px32[base + px] = Number.isNaN(x) ? this.lut[64] : this.lut[Math.round(((x - lo) / range) * 63)];
      }
      for (let py = y0 + 1; py < y1; py++) px32.copyWithin(py * iw, base, base + iw);
    }
    g.putImageData(img, Math.round(this.left * dpr), Math.round(top * dpr));
    g.fillStyle = '#444';
    g.textAlign = 'right';
    for (let r = 0; r < m.nR; r++) {
      g.font = r === this.rank ? 'bold 11px system-ui, sans-serif' : '11px system-ui, sans-serif';
      g.fillText(`rank ${m.rankIds[r]}`, this.left - 6, top + r * row + row / 2 + 4);
    }
    g.font = '11px system-ui, sans-serif';
    if (this.rank != null) {
      g.strokeStyle = HIGHLIGHT;
      g.lineWidth = 2;
      g.strokeRect(this.left, top + this.rank * row, W, row - 1);
      g.lineWidth = 1;
    }
    this.xAxis(g, this.height - 18);
    this.bbox(top, top + row * m.nR);
    this.box.dataset.min = String(lo);
    this.box.dataset.max = String(hi);
    if (this.legend) this.legend.textContent = hi >= lo ? `light ${secs(lo)} → dark ${secs(hi)} (mean step per column)` : '';
  }

  hover(e) {
    const { m } = this;
    const b = this.pos(e);
    const r = this.canvas.getBoundingClientRect();
    const ri = Math.floor((e.clientY - r.top - 4) / this.row);
    if (b < 0 || b >= m.nB || ri < 0 || ri >= m.nR) { this.tip.hidden = true; return; }
    const t = m.total[b * m.nR + ri];
    this.tip.textContent = `rank ${m.rankIds[ri]}, batch ${m.batch[b]}: ${Number.isNaN(t) ? 'no step' : secs(t)}${m.named[b] === ri ? ' (the diagnosis names it)' : ''}`;
    this.tip.hidden = false;
    this.tip.style.left = `${Math.min(e.clientX - r.left + 12, this.width - 260)}px`;
    this.tip.style.top = `${e.clientY - r.top + 12}px`;
  }
}
