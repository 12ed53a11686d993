// The live feed (server-sent events from /api/stream) and the charts it feeds.
//
// The server sends one `snapshot` (the window in buckets of min/max/mean),
// then `append` events holding only the buckets from the last one it sent
// onwards. The feed merges them into per-series arrays (replace the last
// bucket when its time repeats, append the rest, drop what left the window)
// and tells the charts which series changed; series derived from others (a
// CPU's busy share from its modes, cpu.js) are merged the same way, right
// after the buckets they come from. Each chart keeps its own aligned
// table and updates it the same way: nothing is ever rebuilt from scratch on
// an update, so an hour of 100 ms data costs the same per update as a minute.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { formatter } from './api.js';
import { CpuBusy } from './cpu.js';

export class Feed {
  constructor() {
    this.meta = new Map(); // id -> series metadata
    this.data = new Map(); // id -> {t, mean, min, max}
    this.listeners = new Set();
    this.events = 0;
    this.buckets = 0;
    this.windowS = 300;
    this.decisions = [];
    this.cpuBusy = new CpuBusy();
  }

  start(windowS) {
    this.windowS = windowS;
    if (this.source) this.source.close();
    this.meta.clear();
    this.data.clear();
    this.cpuBusy.clear();
    const maxPoints = 1000;
    this.source = new EventSource(`/api/stream?window_s=${windowS}&max_points=${maxPoints}&interval_ms=1000`);
    const on = (kind) => (ev) => this.receive(kind, JSON.parse(ev.data));
    this.source.addEventListener('snapshot', on('snapshot'));
    this.source.addEventListener('append', on('append'));
  }

  receive(kind, msg) {
    this.events++;
    for (const m of msg.series) this.meta.set(m.id, m);
    const changed = new Set();
    const horizon = msg.now_ms - msg.window_ms;
    const merge = (b) => {
      let d = this.data.get(b.id);
      if (!d) { d = { t: [], mean: [], min: [], max: [] }; this.data.set(b.id, d); }
      mergeBuckets(d, b, ['mean', 'min', 'max']);
      trimBefore(d, horizon, ['mean', 'min', 'max']);
      changed.add(b.id);
    };
    for (const b of msg.data) {
      this.buckets += b.t.length;
      merge(b);
    }
    for (const b of this.cpuBusy.derive(this, msg)) merge(b);
    this.decisions.push(...msg.decisions);
    if (this.decisions.length > 500) this.decisions.splice(0, this.decisions.length - 500);
    for (const f of this.listeners) f(kind, changed, msg);
  }

  series(pred) {
    return [...this.meta.values()].filter(pred).sort((a, b) => a.id - b.id);
  }
}

// Appends buckets `b` ({t, <cols>}) to `d`; a first bucket at d's last time replaces it.
function mergeBuckets(d, b, cols) {
  let i = 0;
  const n = d.t.length;
  if (n && b.t.length && b.t[0] <= d.t[n - 1]) {
    // Replace from the first bucket whose time is >= b.t[0] (normally just the last).
    let k = n - 1;
    while (k > 0 && d.t[k - 1] >= b.t[0]) k--;
    d.t.length = k;
    for (const c of cols) d[c].length = k;
  }
  for (; i < b.t.length; i++) {
    d.t.push(b.t[i]);
    for (const c of cols) d[c].push(b[c][i]);
  }
}

function trimBefore(d, horizon, cols) {
  let k = 0;
  while (k < d.t.length && d.t[k] < horizon) k++;
  if (k) {
    d.t.splice(0, k);
    for (const c of cols) d[c].splice(0, k);
  }
}

// Colours that stay apart in greyscale too: alternating dark and light, and
// lines are also told apart by dash pattern (see DASHES).
export const PALETTE = ['#1f4e9c', '#f29e38', '#2b2b2b', '#7fc7e8', '#b23a48', '#9bd17a', '#6a3d9a', '#d9c36a', '#3f8f7a', '#e88fb4'];
const DASHES = [[], [6, 3], [2, 2], [10, 3, 2, 3]];

const pad = (n) => String(n).padStart(2, '0');
// Time-axis steps in seconds: whole seconds at least, so no two labels repeat.
const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];
// Time-axis labels for ticks (seconds) over a span: HH:MM:SS under an hour,
// HH:MM under two days, else the date and hour. Always derived from the data.
export function timeLabel(t, span) {
  const d = new Date(t * 1000);
  const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  if (span < 3600) return `${hm}:${pad(d.getSeconds())}`;
  if (span < 2 * 86400) return hm;
  return `${d.toLocaleString('en', { month: 'short' })} ${d.getDate()} ${hm}`;
}

// A time chart of several series of the feed: a line through each bucket's
// mean and, where a bucket holds several samples (the 15-minute and hour
// windows), a band from its min to its max, so a spike shorter than a bucket
// still shows and stays inside the axis. It draws only with two samples or more, on an x axis spanning exactly the data; until
// then it says "no data yet" (or shows the one sample) instead of empty axes.
export class TimeChart {
  constructor(parent, feed, { title, match, label, unit, height = 180, width }) {
    this.feed = feed;
    this.match = match;
    this.label = label;
    this.unit = unit;
    this.title = title;
    this.height = height;
    this.width = width;
    this.ids = [];
    this.updates = 0;
    this.box = document.createElement('div');
    this.box.className = 'chart';
    this.box.dataset.title = title;
    this.box.dataset.updates = '0';
    this.box.dataset.points = '0';
    this.empty = document.createElement('div');
    this.empty.className = 'chart-empty';
    parent.append(this.box);
    this.onFeed = (kind, changed) => this.update(kind, changed);
    feed.listeners.add(this.onFeed);
    // A narrower or wider window resizes the chart (a fixed width stays).
    this.onResize = () => {
      if (!this.box.isConnected) { window.removeEventListener('resize', this.onResize); return; }
      if (this.plot && !this.width) this.plot.setSize({ width: this.fitWidth(), height: this.height });
    };
    window.addEventListener('resize', this.onResize);
    this.rebuild();
  }

  // Two charts side by side in the parent's width.
  fitWidth() {
    const pw = this.box.parentElement.clientWidth || 1200;
    return Math.max(320, Math.floor(pw / 2) - 24);
  }

  destroy() {
    this.feed.listeners.delete(this.onFeed);
    window.removeEventListener('resize', this.onResize);
    if (this.plot) this.plot.destroy();
    this.box.remove();
  }

  showEmpty(cols) {
    if (this.plot) { this.plot.destroy(); this.plot = null; }
    const one = cols.find((c) => c.t.length);
    const fmt = formatter(this.unit);
    this.empty.replaceChildren(
      Object.assign(document.createElement('strong'), { textContent: this.title }),
      document.createElement('br'),
      one && one.t.length === 1
        ? `one sample so far: ${fmt(one.mean[0])} at ${timeLabel(one.t[0] / 1000, 0)}; the chart starts at the second`
        : 'no data yet');
    this.box.replaceChildren(this.empty);
    this.box.dataset.empty = 'true';
    this.x = [];
    this.redrawn();
  }

  rebuild() {
    this.ids = this.feed.series(this.match).map((m) => m.id);
    if (this.plot) { this.plot.destroy(); this.plot = null; }
    // The aligned table: union of bucket times, one column per series.
    const cols = this.ids.map((id) => this.feed.data.get(id) || { t: [], mean: [] });
    const ts = [...new Set(cols.flatMap((c) => c.t))].sort((a, b) => a - b);
    if (ts.length < 2) { this.showEmpty(cols); return; }
    this.box.replaceChildren();
    delete this.box.dataset.empty;
    const index = new Map(ts.map((t, i) => [t, i]));
    this.x = ts.map((t) => t / 1000);
    const column = (c, key) => {
      const y = new Array(ts.length).fill(null);
      c.t.forEach((t, i) => { y[index.get(t)] = (c[key] || c.mean)[i]; });
      return y;
    };
    this.ys = cols.map((c) => column(c, 'mean'));
    this.lo = cols.map((c) => column(c, 'min'));
    this.hi = cols.map((c) => column(c, 'max'));
    // Where each series' data ends: updates start from there.
    this.lastSeen = new Map(this.ids.map((id, i) => [id, cols[i].t.length ? cols[i].t[cols[i].t.length - 1] : -Infinity]));
    const fmt = formatter(this.unit);
    const width = this.width || this.fitWidth();
    this.plot = new uPlot({
      title: this.title,
      width,
      height: this.height,
      scales: {
        x: { time: true, range: () => [this.x[0], this.x[this.x.length - 1]] },
        // A share (unit 1) starts at 0 and, all zero, spans 0–100 %: uPlot's
        // own range for a flat line would run to 100 (10 000 %).
        y: { range: (u, min, max) => this.yRange(min, max) },
      },
      axes: [
        { incrs: TIME_INCRS, space: 80, values: (u, splits) => {
          const span = this.x[this.x.length - 1] - this.x[0];
          const labels = splits.map((t) => timeLabel(t, span));
          // What the axis draws, for the browser tests (uPlot draws it on the canvas).
          this.box.dataset.ticks = JSON.stringify(splits);
          this.box.dataset.labels = JSON.stringify(labels);
          return labels;
        } },
        { values: (u, vals) => vals.map(fmt), size: 84 },
      ],
      series: [{ value: (u, t) => (t == null ? '' : timeLabel(t, 0)) }, ...this.ids.map((id, i) => ({
        label: this.label(this.feed.meta.get(id)),
        stroke: PALETTE[i % PALETTE.length],
        dash: DASHES[Math.floor(i / 2) % DASHES.length],
        width: 1.5,
        spanGaps: true,
        points: { show: false },
        value: (u, v) => fmt(v),
      }))],
      cursor: { drag: { x: false, y: false } },
      hooks: {
        drawSeries: [(u, si) => this.drawBand(u, si)],
        // What the axis spans and where the plot is, for the browser tests.
        draw: [(u) => { this.box.dataset.bbox = JSON.stringify(u.bbox); this.box.dataset.yMax = String(u.scales.y.max); }],
      },
    }, [this.x, ...this.ys], this.box);
    keyboardLegend(this.plot);
    this.redrawn();
  }

  update(kind, changed) {
    const ids = this.feed.series(this.match).map((m) => m.id);
    if (kind === 'snapshot' || ids.length !== this.ids.length || !this.plot) {
      if (kind === 'snapshot' || ids.length !== this.ids.length || ids.some((id) => changed.has(id))) this.rebuild();
      return;
    }
    let touched = false;
    this.ids.forEach((id, col) => {
      if (!changed.has(id)) return;
      const d = this.feed.data.get(id);
      // Only the tail can have changed: walk back to the first row at or after
      // the series' earliest bucket that may be new (the one the server resent).
      const last = this.lastSeen.get(id) ?? -Infinity;
      let i = d.t.length - 1;
      while (i > 0 && d.t[i - 1] >= last) i--;
      for (; i < d.t.length; i++) this.put(d.t[i] / 1000, col, d.mean[i], (d.min || d.mean)[i], (d.max || d.mean)[i]);
      this.lastSeen.set(id, d.t[d.t.length - 1]);
      touched = true;
    });
    if (!touched) return;
    const horizon = Date.now() / 1000 - this.feed.windowS;
    let k = 0;
    while (k < this.x.length && this.x[k] < horizon) k++;
    if (k) { this.x.splice(0, k); for (const y of [...this.ys, ...this.lo, ...this.hi]) y.splice(0, k); }
    if (this.x.length < 2) { this.rebuild(); return; }
    this.plot.setData([this.x, ...this.ys]);
    this.redrawn();
  }

  // Sets row x (appending a row, or finding it near the end) in column `col`.
  put(x, col, v, lo, hi) {
    let r = this.x.length - 1;
    while (r >= 0 && this.x[r] > x) r--;
    if (r < 0 || this.x[r] !== x) {
      r += 1;
      this.x.splice(r, 0, x);
      for (const y of [...this.ys, ...this.lo, ...this.hi]) y.splice(r, 0, null);
    }
    this.ys[col][r] = v;
    this.lo[col][r] = lo;
    this.hi[col][r] = hi;
  }

  // The y axis holds the bands, not only the means; a share (unit 1) starts
  // at 0 and, all zero, spans 0-100 % (uPlot's own range for a flat line would
  // run to 100, read as 10 000 %).
  yRange(min, max) {
    for (const y of this.lo) for (const v of y) if (v != null && v < min) min = v;
    for (const y of this.hi) for (const v of y) if (v != null && v > max) max = v;
    if (this.unit === '1') return [Math.min(0, min), max > 0 ? max * 1.05 : 1];
    if (min === max) return [min - 1, max + 1];
    const pad = (max - min) * 0.05;
    return [min - pad, max + pad];
  }

  // Series `si`'s min-max band, in a fifth of its colour: one polygon per run
  // of buckets with data, along the maxima and back along the minima (zero
  // height where a bucket holds one sample, a peak where one spread).
  drawBand(u, si) {
    const col = si - 1;
    const lo = this.lo[col];
    const hi = this.hi[col];
    if (!lo || !u.series[si].show || !hi.some((v, i) => v != null && lo[i] != null && v > lo[i])) return;
    const ctx = u.ctx;
    const x = (i) => u.valToPos(this.x[i], 'x', true);
    ctx.save();
    ctx.fillStyle = `${PALETTE[col % PALETTE.length]}33`;
    ctx.beginPath();
    for (let i = 0; i < this.x.length;) {
      if (lo[i] == null || hi[i] == null) { i++; continue; }
      let j = i;
      while (j + 1 < this.x.length && lo[j + 1] != null && hi[j + 1] != null) j++;
      ctx.moveTo(x(i), u.valToPos(hi[i], 'y', true));
      for (let k = i + 1; k <= j; k++) ctx.lineTo(x(k), u.valToPos(hi[k], 'y', true));
      for (let k = j; k >= i; k--) ctx.lineTo(x(k), u.valToPos(lo[k], 'y', true));
      ctx.closePath();
      i = j + 1;
    }
    ctx.fill();
    ctx.restore();
    this.box.dataset.bands = 'true';
  }

  redrawn() {
    this.updates++;
    this.box.dataset.updates = String(this.updates);
    this.box.dataset.points = String(this.x ? this.x.length : 0);
    if (this.x && this.x.length) {
      this.box.dataset.xMin = String(this.x[0]);
      this.box.dataset.xMax = String(this.x[this.x.length - 1]);
    }
  }
}

// A chart of arbitrary aligned data (x not time), e.g. timings per batch.
export function barChart(parent, { title, xLabel, names, x, ys, unit, stacked = true }) {
  const fmt = formatter(unit);
  // Stacked: each series is drawn at the cumulative height, the tallest first.
  const cum = [];
  let acc = x.map(() => 0);
  for (const y of ys) { acc = acc.map((a, i) => a + (y[i] || 0)); cum.push(acc); }
  const order = stacked ? cum.map((_, i) => i).reverse() : ys.map((_, i) => i);
  const data = [x, ...order.map((i) => (stacked ? cum[i] : ys[i]))];
  const bars = uPlot.paths.bars({ size: [0.8, 40] });
  const plot = new uPlot({
    title,
    width: Math.max(400, parent.clientWidth - 24),
    height: 320,
    scales: { x: { time: false } },
    axes: [{ label: xLabel }, { values: (u, vals) => vals.map(fmt), size: 70 }],
    series: [{ label: xLabel }, ...order.map((i) => ({
      label: names[i],
      stroke: PALETTE[i % PALETTE.length],
      fill: PALETTE[i % PALETTE.length] + 'cc',
      paths: bars,
      points: { show: false },
      value: (u, v, s, idx) => fmt(ys[i][idx]),
    }))],
  }, data, parent);
  keyboardLegend(plot);
  return plot;
}

// uPlot's legend shows or hides a series on a mouse click only. The legend
// becomes one tab stop (a roving tabindex: Tab reaches its first entry, the
// arrow keys move between entries) whose entries are switches that Enter and
// Space toggle; a page of charts is not dozens of tab stops (row 0 is the x
// axis: not a series).
function keyboardLegend(plot) {
  const ths = [...plot.root.querySelectorAll('.u-legend .u-series')].slice(1).map((row) => row.querySelector('th')).filter(Boolean);
  ths.forEach((th, i) => {
    const row = th.parentElement;
    th.tabIndex = i === 0 ? 0 : -1;
    th.setAttribute('role', 'switch');
    const sync = () => th.setAttribute('aria-checked', String(!row.classList.contains('u-off')));
    sync();
    th.addEventListener('keydown', (e) => {
      const to = { ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: ths.length - 1 }[e.key];
      if (to != null) {
        e.preventDefault();
        const next = ths[Math.max(0, Math.min(ths.length - 1, to))];
        th.tabIndex = -1;
        next.tabIndex = 0;
        next.focus();
        return;
      }
      if (e.key !== 'Enter' && e.key !== ' ') return;
      e.preventDefault();
      th.click();
      sync();
    });
  });
}
