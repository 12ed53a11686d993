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

// The median of the first n values of a (reordered in place).
function median(a, n) {
  if (n <= 16) {
    for (let i = 1; i < n; i++) { const v = a[i]; let j = i - 1; while (j >= 0 && a[j] > v) { a[j + 1] = a[j]; j--; } a[j + 1] = v; }
  } else a.subarray(0, n).sort();
  return n % 2 ? a[n >> 1] : (a[(n >> 1) - 1] + a[n >> 1]) / 2;
}

// The job view's steps as columns.
export function model(job) {
  const steps = job.steps || [];
  const ids = new Set(Array.isArray(job.ranks) ? job.ranks.map((r) => r.rank) : []);
  for (const s of steps) for (const r of s.ranks) ids.add(r.rank);
  const rankIds = [...ids].sort((a, b) => a - b);
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
  // Per batch over all ranks: the sum of each phase, how many ranks, the
  // slowest total and the median one, so a zoomed-out frame costs
  // O(batches × phases).
  const phaseSum = new Float32Array(nB * nP);
  const count = new Uint16Array(nB);
  const maxTotal = new Float32Array(nB);
  const med = new Float32Array(nB);
  const scratch = new Float64Array(nR);
  for (let b = 0; b < nB; b++) {
    let k = 0;
    for (let r = 0; r < nR; r++) {
      const t = total[b * nR + r];
      if (Number.isNaN(t)) continue;
      scratch[k++] = t;
      if (t > maxTotal[b]) maxTotal[b] = t;
      const o = (b * nR + r) * nP;
      for (let p = 0; p < nP; p++) phaseSum[b * nP + p] += dur[o + p];
    }
    count[b] = k;
    med[b] = k ? median(scratch, k) : NaN;
  }
  // Per rank, running sums over batches of its step time, of its slowdown
  // (its step over the batch's median across ranks) and of its steps: the
  // heatmap's mean for any column of batches is then two lookups.
  const cumT = new Float64Array((nB + 1) * nR);
  const cumS = new Float64Array((nB + 1) * nR);
  const cumN = new Uint32Array((nB + 1) * nR);
  for (let b = 0; b < nB; b++) {
    const m = med[b];
    for (let r = 0; r < nR; r++) {
      const t = total[b * nR + r];
      const ok = !Number.isNaN(t);
      const i = b * nR + r;
      cumT[i + nR] = cumT[i] + (ok ? t : 0);
      cumS[i + nR] = cumS[i] + (ok && m > 0 ? t / m : ok ? 1 : 0);
      cumN[i + nR] = cumN[i] + (ok ? 1 : 0);
    }
  }
  return { rankIds, phases, nB, nR, nP, batch, dur, total, start, named, stats, phaseSum, count, maxTotal, med, cumT, cumS, cumN };
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

// Over this many ranks the step chart draws per batch the ranks' mean phases
// and the named rank's bar instead of a bar per rank.
export const MANY_RANKS = 32;
// Over this many ranks the heatmap's rows are groups of ranks (at most
// GROUP_ROWS per level), each expanding on demand into its members.
export const ROWS_FIT = 64;
export const GROUP_ROWS = 32;

// The shared window over batch positions [lo, hi).
export class BatchView {
  constructor(n, onChange) {
    this.n = n;
    this.lo = 0;
    this.hi = n;
    this.onChange = onChange;
    this.touched = false; // set by the reader's first zoom or pan
    this.charts = [];
    this.frame = 0;
    // A resized window redraws the charts at their new width; the listener
    // goes once none of them is on the page any more.
    this.onResize = () => {
      if (this.charts.some((c) => c.box.isConnected)) this.schedule();
      else window.removeEventListener('resize', this.onResize);
    };
    window.addEventListener('resize', this.onResize);
  }

  set(lo, hi) {
    const span = Math.max(Math.min(hi - lo, this.n), Math.min(this.n, 4));
    let a = Math.round(lo);
    a = Math.max(0, Math.min(this.n - Math.round(span), a));
    this.lo = a;
    this.hi = Math.min(this.n, a + Math.round(span));
    this.touched = true;
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
      // A chart whose page was rebuilt since this frame was asked for is
      // no longer in the document: nothing to draw.
      const live = this.charts.filter((c) => c.box.isConnected);
      // Every width read before any drawing: one layout per frame at most.
      for (const c of live) c.avail = c.box.parentElement.clientWidth;
      for (const c of live) c.draw();
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
      if (this.key && this.key(e)) { e.preventDefault(); return; }
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
    this.canvas.addEventListener('pointerdown', (e) => { drag = { x: e.clientX, lo: view.lo, hi: view.hi }; this.dragged = false; this.canvas.setPointerCapture(e.pointerId); });
    this.canvas.addEventListener('pointermove', (e) => {
      if (drag) {
        if (Math.abs(e.clientX - drag.x) > 3) this.dragged = true;
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
    this.width = Math.max(400, (this.avail ?? this.box.parentElement.clientWidth) - 16);
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
    const bbox = JSON.stringify({ left: this.left * dpr, top: top * dpr, width: this.plotW() * dpr, height: (bottom - top) * dpr });
    if (this.box.dataset.bbox !== bbox) this.box.dataset.bbox = bbox;
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

// A stack of phases for rank position r in batch b, at x, w wide; returns its top.
function stack(g, m, y, b, r, x, w) {
  let acc = 0;
  for (let p = 0; p < m.nP; p++) {
    const d = m.dur[(b * m.nR + r) * m.nP + p];
    if (!d) continue;
    g.fillStyle = PHASE_COLORS[p % PHASE_COLORS.length];
    g.fillRect(x, y(acc + d), w, y(acc) - y(acc + d));
    acc += d;
  }
  return acc;
}

// The black outline and ▼ of the rank the diagnosis names.
function outline(g, x, top, w, bottom) {
  g.strokeStyle = HIGHLIGHT;
  g.lineWidth = 2;
  g.strokeRect(x, top, w, bottom - top);
  g.fillStyle = HIGHLIGHT;
  g.beginPath();
  const cx = x + w / 2;
  g.moveTo(cx - 4, top - 9); g.lineTo(cx + 4, top - 9); g.lineTo(cx, top - 3); g.fill();
  g.lineWidth = 1;
}

export class StepChart extends CanvasChart {
  constructor(parent, view, m, { rank = null } = {}) {
    super(parent, view, { height: 300, label: m.nR > MANY_RANKS
      ? `Step time per batch over ${m.nR} ranks: the ranks' mean phases stacked, the rank the diagnosis names beside them, the slowest rank's step as a black line`
      : 'Step time per batch for every rank, stacked by phase; the rank the diagnosis names is outlined', cls: 'step-chart' });
    this.m = m;
    this.rank = rank; // a rank position to show alone, or null for all
    if (m.nR > ROWS_FIT) this.left = 120; // the heatmap's group labels: its columns line up with these
    this.box.dataset.title = 'step time per batch';
    this.sums = new Float64Array(m.nP);
    this.line = new Float32Array(0);
    this.nline = new Float32Array(0);
  }

  draw() {
    const g = this.prepare();
    const { m, view: v } = this;
    const top = 14;
    const bottom = this.height - 34;
    const h = bottom - top;
    const W = this.plotW();
    const span = v.hi - v.lo;
    const all = this.rank == null;
    // Over MANY_RANKS ranks a bar per rank is never drawn: the ranks' mean
    // phases per batch, the named rank's bar beside them, the slowest line.
    const many = all && m.nR > MANY_RANKS;
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
    const nr = all ? m.nR : 1;
    this.detailed = !many && group >= nr * 3;
    if (this.detailed) {
      this.box.dataset.mode = 'per-rank';
      const sub = (group * 0.85) / nr;
      for (let b = v.lo; b < v.hi; b++) {
        const gx = this.left + (b - v.lo) * group + group * 0.075;
        for (let k = 0; k < nr; k++) {
          const r = all ? k : this.rank;
          const x = gx + k * sub;
          const acc = stack(g, m, y, b, r, x, Math.max(1, sub - 1));
          if (m.named[b] === r && m.nR > 1) outline(g, x, y(acc), Math.max(1, sub - 1), bottom);
        }
      }
    } else {
      // One column per batch, or per pixel pair when batches are more: mean
      // phases over the column's batches and ranks, stacked; the slowest
      // rank's time as a black line over them. Over MANY_RANKS ranks, with
      // 8 px or more per batch, the named rank's bar stands beside the mean;
      // with less, its time is a dashed line.
      const cols = Math.max(1, Math.min(Math.floor(W / 2), span));
      const per = span / cols;
      const cw = W / cols;
      const pair = many && cw >= 8;
      this.box.dataset.mode = pair ? 'mean+named' : 'binned';
      const sums = this.sums;
      if (this.line.length < cols * 2) { this.line = new Float32Array(cols * 2); this.nline = new Float32Array(cols * 2); }
      const line = this.line;
      const nline = this.nline;
      let nl = 0;
      g.lineWidth = 1.5;
      for (let c = 0; c < cols; c++) {
        const b0 = v.lo + Math.floor(c * per);
        const b1 = Math.max(b0 + 1, v.lo + Math.floor((c + 1) * per));
        sums.fill(0);
        let n = 0;
        let worst = 0;
        let nt = 0;
        let nn = 0;
        for (let b = b0; b < b1; b++) {
          if (all) {
            n += m.count[b];
            if (m.maxTotal[b] > worst) worst = m.maxTotal[b];
            for (let p = 0; p < m.nP; p++) sums[p] += m.phaseSum[b * m.nP + p];
            if (many && m.named[b] >= 0) { nt += m.total[b * m.nR + m.named[b]]; nn++; }
            continue;
          }
          const t = m.total[b * m.nR + this.rank];
          if (Number.isNaN(t)) continue;
          n++;
          if (t > worst) worst = t;
          const o = (b * m.nR + this.rank) * m.nP;
          for (let p = 0; p < m.nP; p++) sums[p] += m.dur[o + p];
        }
        const x0 = this.left + c * cw;
        nline[c * 2] = x0 + cw / 2;
        nline[c * 2 + 1] = nn ? y(nt / nn) : NaN;
        if (!n) continue;
        const w = pair ? (cw * 0.85) / 2 : Math.max(1, cw);
        const x = pair ? x0 + cw * 0.075 : x0;
        let acc = 0;
        for (let p = 0; p < m.nP; p++) {
          const d = sums[p] / n;
          g.fillStyle = PHASE_COLORS[p % PHASE_COLORS.length];
          g.fillRect(x, y(acc + d), pair ? w - 1 : w, y(acc) - y(acc + d));
          acc += d;
        }
        if (pair && nn) {
          const r = m.named[b0];
          const nx = x + w;
          const top2 = stack(g, m, y, b0, r, nx, w - 1);
          outline(g, nx, y(top2), w - 1, bottom);
        }
        line[nl++] = x0 + cw / 2;
        line[nl++] = y(worst);
      }
      if (m.nR > 1 && all) {
        g.lineWidth = 1.5;
        g.strokeStyle = HIGHLIGHT;
        g.beginPath();
        for (let i = 0; i < nl; i += 2) (i ? g.lineTo : g.moveTo).call(g, line[i], line[i + 1]);
        g.stroke();
        if (many && !pair) {
          // The named rank's time, dashed, where the diagnosis names it.
          g.setLineDash([4, 3]);
          g.beginPath();
          let on = false;
          for (let c = 0; c < cols; c++) {
            const yy = nline[c * 2 + 1];
            if (Number.isNaN(yy)) { on = false; continue; }
            (on ? g.lineTo : g.moveTo).call(g, nline[c * 2], yy);
            on = true;
          }
          g.stroke();
          g.setLineDash([]);
        }
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
    if (m.nR > MANY_RANKS && this.rank == null) {
      // Over MANY_RANKS ranks: the mean phases, the median and slowest step,
      // and the named rank's, not a line per rank.
      const n = m.count[b];
      let slow = -1;
      for (let r = 0; r < m.nR; r++) if (m.total[b * m.nR + r] === m.maxTotal[b]) { slow = r; break; }
      rows.push(`${n} of ${m.nR} ranks; mean ${m.phases.map((p, k) => `${p} ${secs(m.phaseSum[b * m.nP + k] / (n || 1))}`).join(', ')}`);
      rows.push(`median step ${secs(m.med[b])}; slowest rank ${slow >= 0 ? m.rankIds[slow] : '–'}: ${secs(m.maxTotal[b])}`);
      const r = m.named[b];
      if (r >= 0) rows.push(`▼ rank ${m.rankIds[r]}: ${secs(m.total[b * m.nR + r])} (${m.phases.map((p, k) => `${p} ${secs(m.dur[(b * m.nR + r) * m.nP + k])}`).join(', ')})`);
    } else {
      for (let r = 0; r < m.nR; r++) {
        if (this.rank != null && r !== this.rank) continue;
        const t = m.total[b * m.nR + r];
        if (Number.isNaN(t)) continue;
        const parts = m.phases.map((p, k) => `${p} ${secs(m.dur[(b * m.nR + r) * m.nP + k])}`).join(', ');
        rows.push(`${m.named[b] === r && m.nR > 1 ? '▼ ' : ''}rank ${m.rankIds[r]}: ${secs(t)} (${parts})`);
      }
    }
    this.tip.textContent = `batch ${m.batch[b]}\n${rows.join('\n')}`;
    this.tip.hidden = false;
    const r = this.canvas.getBoundingClientRect();
    this.tip.style.left = `${Math.max(0, Math.min(e.clientX - r.left + 12, this.width - 320))}px`;
    this.tip.style.top = '8px';
  }
}

// The rows under rank positions [lo, hi): each rank when they fit, else
// ranges of a power-of-two number of ranks, at most GROUP_ROWS of them.
export function childRows(lo, hi, fit = ROWS_FIT) {
  const n = hi - lo;
  const out = [];
  if (n <= fit) { for (let r = lo; r < hi; r++) out.push({ lo: r, hi: r + 1 }); return out; }
  let g = 1;
  while (Math.ceil(n / g) > GROUP_ROWS) g *= 2;
  for (let a = lo; a < hi; a += g) out.push({ lo: a, hi: Math.min(hi, a + g) });
  return out;
}

const SELECT = '#2a6fdb';
const x2 = (v) => `${v.toFixed(2)}×`;

// Worker × window heatmap of slowdown: a row per rank (or, over ROWS_FIT
// ranks, per group of ranks showing its slowest member), a column per batch
// (or per window of batches when they outnumber the pixels). A cell is the
// rank's step over its batch's median step across ranks, averaged over the
// column's batches: light at or under the median, darker slower. A group
// expands into its ranks on click or Enter. Arrows move a selection whose
// numbers an aria-live line reads out. `state` ({expanded, sel}) outlives
// the chart, so a reload of the data keeps what the reader opened.
export class Heatmap extends CanvasChart {
  constructor(parent, view, m, { rank = null, culprit = null, state = { expanded: new Set(), sel: null } } = {}) {
    super(parent, view, { height: 100, label: 'Slowdown heatmap', cls: 'straggler-strip heatmap' });
    this.m = m;
    this.rank = rank;
    this.culprit = culprit == null ? -1 : m.rankIds.indexOf(culprit);
    this.state = state;
    this.grouped = m.nR > ROWS_FIT;
    if (this.grouped) this.left = 120;
    const base = childRows(0, m.nR).length;
    this.row = Math.max(12, Math.min(22, Math.floor(200 / Math.max(1, base))));
    this.top = 4;
    this.box.dataset.title = 'slowdown heatmap';
    this.readout = document.createElement('p');
    this.readout.className = 'heat-readout';
    this.readout.setAttribute('aria-live', 'polite');
    parent.append(this.readout);
    // The selected rank's groups open, so its row shows.
    if (rank != null) this.reveal(rank);
    this.rowsFor();
    this.canvas.addEventListener('focus', () => { if (!this.sel()) this.selectDefault(); });
    this.canvas.addEventListener('click', (e) => this.click(e));
    this.rowVals = new Float32Array(0);
    this.pxCol = new Int32Array(0);
    this.colB = new Int32Array(0);
    this.lut = new Uint32Array(65);
    for (let k = 0; k < 64; k++) { const [R, G, B] = ramp(k / 63); this.lut[k] = (255 << 24 | B << 16 | G << 8 | R) >>> 0; }
    this.lut[64] = (255 << 24 | 230 << 16 | 230 << 8 | 230) >>> 0;
  }

  // Opens every group holding rank position p.
  reveal(p) {
    let kids = childRows(0, this.m.nR);
    for (;;) {
      const g = kids.find((k) => k.lo <= p && p < k.hi);
      if (!g || g.hi - g.lo === 1) return g;
      this.state.expanded.add(`${g.lo}-${g.hi}`);
      kids = childRows(g.lo, g.hi);
    }
  }

  // Per batch and top-level group: its worst rank's slowdown.
  groupMax() {
    const { m } = this;
    const tops = childRows(0, m.nR);
    const nT = tops.length;
    const gmax = new Float32Array(m.nB * nT).fill(NaN);
    for (let b = 0; b < m.nB; b++) {
      const o0 = b * m.nR;
      const o1 = o0 + m.nR;
      for (let t = 0; t < nT; t++) {
        let x = NaN;
        for (let p = tops[t].lo; p < tops[t].hi; p++) {
          if (m.cumN[o1 + p] === m.cumN[o0 + p]) continue;
          const y = m.cumS[o1 + p] - m.cumS[o0 + p];
          if (!(y <= x)) x = y;
        }
        gmax[b * nT + t] = x;
      }
    }
    this.gmax = gmax;
    this.nTop = nT;
  }

  // The rows shown, in order: {lo, hi, depth, key, group, open, top (the
  // index of a top-level group, else -1)}.
  rowsFor() {
    const out = [];
    const walk = (lo, hi, depth) => {
      childRows(lo, hi).forEach((k, idx) => {
        const key = `${k.lo}-${k.hi}`;
        const group = k.hi - k.lo > 1;
        const open = group && this.state.expanded.has(key);
        out.push({ lo: k.lo, hi: k.hi, depth, key, group, open, top: depth === 0 && group ? idx : -1 });
        if (open) walk(k.lo, k.hi, depth + 1);
      });
    };
    walk(0, this.m.nR, 0);
    this.rows = out;
    this.height = this.top + out.length * this.row + 40;
    return out;
  }

  label(r) {
    const id = this.m.rankIds;
    return r.group ? `ranks ${id[r.lo]}–${id[r.hi - 1]}` : `rank ${id[r.lo]}`;
  }

  // The selection as {i: row index, b: batch position}, or null.
  sel() {
    const s = this.state.sel;
    if (!s) return null;
    const i = this.rows.findIndex((r) => r.key === s.key);
    if (i < 0) return null;
    const b = posOf(this.m, s.batch);
    return { i, b: Math.min(this.m.nB - 1, b) };
  }

  select(i, b, announce = true) {
    const r = this.rows[Math.max(0, Math.min(this.rows.length - 1, i))];
    const v = this.view;
    b = Math.max(0, Math.min(this.m.nB - 1, b));
    this.state.sel = { key: r.key, batch: this.m.batch[b] };
    if (b < v.lo || b >= v.hi) {
      const span = v.hi - v.lo;
      v.set(b < v.lo ? b : b - span + 1, (b < v.lo ? b : b - span + 1) + span);
    } else v.schedule();
    if (announce) this.announce();
  }

  selectDefault() {
    const p = this.culprit;
    let i = 0;
    if (p >= 0) {
      // The deepest shown row holding the named rank.
      this.rows.forEach((r, k) => { if (r.lo <= p && p < r.hi) i = k; });
    }
    this.select(i, this.view.hi - 1);
  }

  // The batch positions [b0, b1) of the column holding position b.
  column(b) {
    const v = this.view;
    const span = v.hi - v.lo;
    const cols = Math.min(Math.floor(this.plotW()), span);
    const per = span / cols;
    const c = Math.max(0, Math.min(cols - 1, Math.floor((b - v.lo) / per)));
    const b0 = v.lo + Math.floor(c * per);
    return [b0, Math.max(b0 + 1, v.lo + Math.floor((c + 1) * per)), c];
  }

  toggle(i) {
    const r = this.rows[i];
    if (!r) return;
    if (r.group) {
      if (r.open) {
        // Closing forgets what was open inside it too.
        for (const k of [...this.state.expanded]) { const [a, z] = k.split('-').map(Number); if (a >= r.lo && z <= r.hi) this.state.expanded.delete(k); }
      } else this.state.expanded.add(r.key);
    } else {
      // Enter on a rank: close the group it is in.
      const parent = this.rows.slice(0, i).reverse().find((p) => p.group && p.open && p.lo <= r.lo && r.hi <= p.hi);
      if (!parent) return;
      this.state.sel = { ...this.state.sel, key: parent.key };
      return this.toggle(this.rows.indexOf(parent));
    }
    this.rowsFor();
    this.view.schedule();
    this.announce();
  }

  key(e) {
    this.tip.hidden = true;
    const s = this.sel();
    if (!s) {
      if (['ArrowUp', 'ArrowDown', 'ArrowLeft', 'ArrowRight', 'Enter', ' ', 'Home', 'End'].includes(e.key)) { this.selectDefault(); return true; }
      return false;
    }
    const v = this.view;
    const [b0, b1] = this.column(s.b);
    const per = Math.max(1, b1 - b0);
    switch (e.key) {
      case 'ArrowUp': this.select(s.i - 1, s.b); return true;
      case 'ArrowDown': this.select(s.i + 1, s.b); return true;
      case 'ArrowLeft': this.select(s.i, b0 - per); return true;
      case 'ArrowRight': this.select(s.i, b1); return true;
      case 'Home': this.select(s.i, v.lo); return true;
      case 'End': this.select(s.i, v.hi - 1); return true;
      case 'Enter': case ' ': this.toggle(s.i); return true;
      default: return false;
    }
  }

  // The cell under a pointer: {i, b} or null; x < 0 for the labels.
  at2(e) {
    const r = this.canvas.getBoundingClientRect();
    const i = Math.floor((e.clientY - r.top - this.top) / this.row);
    if (i < 0 || i >= this.rows.length) return null;
    return { i, b: this.pos(e), label: e.clientX - r.left < this.left };
  }

  click(e) {
    if (this.dragged) return;
    this.tip.hidden = true;
    const c = this.at2(e);
    if (!c) return;
    if (!c.label) this.select(c.i, c.b, false);
    else if (!this.sel() || this.sel().i !== c.i) this.select(c.i, this.sel() ? this.sel().b : this.view.hi - 1, false);
    if (this.rows[c.i].group) this.toggle(c.i);
    else this.announce();
  }

  // The numbers of row r in the column holding batch position b.
  describe(r, b) {
    const m = this.m;
    const [b0, b1] = this.column(b);
    const nR = m.nR;
    const when = b1 - b0 > 1 ? `batches ${m.batch[b0]}–${m.batch[b1 - 1]}` : `batch ${m.batch[b0]}`;
    const cell = (p) => {
      const n = m.cumN[b1 * nR + p] - m.cumN[b0 * nR + p];
      return n ? { n, s: (m.cumS[b1 * nR + p] - m.cumS[b0 * nR + p]) / n, t: (m.cumT[b1 * nR + p] - m.cumT[b0 * nR + p]) / n } : null;
    };
    let worst = -1;
    let best = null;
    for (let p = r.lo; p < r.hi; p++) { const x = cell(p); if (x && (!best || x.s > best.s)) { best = x; worst = p; } }
    const medTxt = b1 - b0 > 1 ? 'its batches\' median steps' : `the batch's median step (${secs(m.med[b0])})`;
    const named = (p) => (p === this.culprit ? ' — the rank the diagnosis names' : '');
    if (!best) return `${this.label(r)}, ${when}: no step`;
    const what = b1 - b0 > 1
      ? `mean step ${secs(best.t)}, ${x2(best.s)} ${medTxt} on average`
      : `step ${secs(best.t)}, ${x2(best.s)} ${medTxt}`;
    if (!r.group) return `rank ${m.rankIds[r.lo]}, ${when}: ${what}${named(r.lo)}`;
    const holds = this.culprit >= r.lo && this.culprit < r.hi ? `; holds rank ${m.rankIds[this.culprit]}, which the diagnosis names` : '';
    return `ranks ${m.rankIds[r.lo]}–${m.rankIds[r.hi - 1]}, ${when}: slowest rank ${m.rankIds[worst]}, ${what}${holds}. ${r.open ? 'Enter hides' : 'Enter shows'} its ${r.hi - r.lo} ranks`;
  }

  announce() {
    const s = this.sel();
    if (!s) return;
    this.readout.textContent = this.describe(this.rows[s.i], s.b);
    this.box.dataset.selected = `${this.label(this.rows[s.i])}:${this.m.batch[s.b]}`;
  }

  draw() {
    const { m, view: v, row, top, rows } = this;
    const g = this.prepare();
    const nR = m.nR;
    const W = Math.floor(this.plotW());
    const span = v.hi - v.lo;
    const cols = Math.min(W, span);
    const per = span / cols;
    // Per shown row and column: the rank's mean slowdown over the column's
    // batches, or its group's worst rank's. A top-level group in a column of
    // one batch is read from per-batch maxima computed once per data load.
    const nRows = rows.length;
    if (this.rowVals.length < nRows * cols) this.rowVals = new Float32Array(nRows * cols);
    if (this.colB.length < cols + 1) this.colB = new Int32Array(cols + 1);
    const { rowVals: rv, colB } = this;
    const single = cols === span;
    if (single && !this.gmax) this.groupMax();
    const { cumN, cumS } = m;
    let lo = Infinity;
    let hi = -Infinity;
    for (let c = 0; c < cols; c++) {
      const b0 = v.lo + Math.floor(c * per);
      const b1 = Math.max(b0 + 1, v.lo + Math.floor((c + 1) * per));
      colB[c] = b0;
      const o0 = b0 * nR;
      const o1 = b1 * nR;
      for (let i = 0; i < nRows; i++) {
        const r = rows[i];
        let x = NaN;
        if (single && r.top >= 0) x = this.gmax[b0 * this.nTop + r.top];
        else {
          for (let p = r.lo; p < r.hi; p++) {
            const n = cumN[o1 + p] - cumN[o0 + p];
            if (!n) continue;
            const y = (cumS[o1 + p] - cumS[o0 + p]) / n;
            if (!(y <= x)) x = y;
          }
        }
        rv[i * cols + c] = x;
        if (x < lo) lo = x;
        if (x > hi) hi = x;
      }
    }
    // Light at or under the median (1×), darkest at the view's worst (at least 1.2×).
    const full = Math.max(1.2, hi);
    const scale = 63 / (full - 1);
    const dpr = window.devicePixelRatio || 1;
    const iw = Math.max(1, Math.round(W * dpr));
    const ih = Math.max(1, Math.round(row * nRows * dpr));
    if (!this.img || this.img.width !== iw || this.img.height !== ih) this.img = g.createImageData(iw, ih);
    if (this.pxCol.length !== iw || this.pxCols !== cols) {
      this.pxCol = new Int32Array(iw);
      for (let px = 0; px < iw; px++) this.pxCol[px] = Math.min(cols - 1, Math.floor((px / iw) * cols));
      this.pxCols = cols;
    }
    const img = this.img;
    const px32 = new Uint32Array(img.data.buffer);
    const { lut, pxCol } = this;
    px32.fill(0);
    for (let i = 0; i < nRows; i++) {
      const y0 = Math.round(i * row * dpr);
      const y1 = Math.round(((i + 1) * row - 1) * dpr);
      if (y1 <= y0) continue;
      const base = y0 * iw;
      const o = i * cols;
      for (let px = 0; px < iw; px++) {
        const x = rv[o + pxCol[px]];
        px32[base + px] = x !== x ? lut[64] : lut[x <= 1 ? 0 : Math.min(63, Math.round((x - 1) * scale))];
      }
      for (let py = y0 + 1; py < y1; py++) px32.copyWithin(py * iw, base, base + iw);
    }
    g.putImageData(img, Math.round(this.left * dpr), Math.round(top * dpr));
    // Labels; nested rows get a bracket in the gutter; the rows holding the
    // named rank a black ▶; the picked rank's row an outline.
    g.textAlign = 'right';
    for (let i = 0; i < nRows; i++) {
      const r = rows[i];
      const yc = top + i * row + row / 2;
      const holds = this.culprit >= r.lo && this.culprit < r.hi;
      g.font = holds || (this.rank != null && r.lo === this.rank && !r.group) ? 'bold 11px system-ui, sans-serif' : '11px system-ui, sans-serif';
      g.fillStyle = '#222';
      g.fillText(`${r.group ? (r.open ? '▾ ' : '▸ ') : ''}${this.label(r)}`, this.left - 12, yc + 4);
      if (r.depth) { g.fillStyle = '#9ca3af'; g.fillRect(2 + (r.depth - 1) * 4, top + i * row, 2, row); }
      if (holds && nR > 1) {
        g.fillStyle = HIGHLIGHT;
        g.beginPath(); g.moveTo(this.left - 9, yc - 5); g.lineTo(this.left - 2, yc); g.lineTo(this.left - 9, yc + 5); g.fill();
      }
      if (this.rank != null && !r.group && r.lo === this.rank) {
        g.strokeStyle = HIGHLIGHT;
        g.lineWidth = 2;
        g.strokeRect(this.left, top + i * row, W, row - 1);
        g.lineWidth = 1;
      }
    }
    g.font = '11px system-ui, sans-serif';
    const s = this.sel();
    if (s && s.b >= v.lo && s.b < v.hi) {
      const [, , c] = this.column(s.b);
      const x = this.left + (c * W) / cols;
      const w = Math.max(4, W / cols);
      const yy = top + s.i * row;
      g.lineWidth = 3;
      g.strokeStyle = '#fff';
      g.strokeRect(x - 1, yy - 1, w + 1, row + 1);
      g.lineWidth = 2;
      g.strokeStyle = SELECT;
      g.strokeRect(x - 1, yy - 1, w + 1, row + 1);
      g.lineWidth = 1;
    }
    this.xAxis(g, this.height - 18);
    this.bbox(top, top + row * nRows);
    // What tests and screen readers read, written only when it changes (an
    // unchanged page needs no layout before the next frame).
    const d = this.box.dataset;
    const put = (k, val) => { if (d[k] !== val) d[k] = val; };
    put('min', String(lo));
    put('max', String(hi));
    put('lo', String(m.batch[v.lo]));
    put('hi', String(m.batch[v.hi - 1]));
    put('cols', String(cols));
    if (this.shownRows !== rows) {
      this.shownRows = rows;
      put('rows', String(nRows));
      put('groups', String(rows.filter((r) => r.group).length));
      put('rowHeight', String(row));
      put('top', String(top));
      put('labels', JSON.stringify(rows.map((r) => this.label(r))));
    }
    const label = `Slowdown heatmap: ${nRows} rows (${this.grouped ? `groups of ranks showing their slowest rank, ${nR} ranks in all` : 'one per rank'}) by ${span} batches, light at the batch's median step, darker slower. Arrows move the selection, Enter shows or hides a group's ranks, + and - zoom, 0 shows all batches.`;
    if (this.canvas.getAttribute('aria-label') !== label) this.canvas.setAttribute('aria-label', label);
    const legend = hi >= lo ? `light ≤ 1.00× → dark ≥ ${x2(full)} the batch's median step (now ${x2(Math.max(0, lo))}–${x2(hi)})` : '';
    if (this.legend && this.legend.textContent !== legend) this.legend.textContent = legend;
    if (s && this.readout.textContent === '') this.announce();
  }

  hover(e) {
    const c = this.at2(e);
    const r = this.canvas.getBoundingClientRect();
    if (!c || c.label || c.b < 0) { this.tip.hidden = true; return; }
    this.tip.textContent = this.describe(this.rows[c.i], c.b);
    this.tip.hidden = false;
    this.tip.style.left = `${Math.max(0, Math.min(e.clientX - r.left + 12, this.width - 360))}px`;
    this.tip.style.top = `${e.clientY - r.top + 12}px`;
  }
}

// Position of batch number `b` in the model (the first at or after it).
export function posOf(m, b) {
  let lo = 0;
  let hi = m.nB;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (m.batch[mid] < b) lo = mid + 1; else hi = mid; }
  return lo;
}
