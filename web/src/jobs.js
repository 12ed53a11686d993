// Jobs: the list (/api/jobs) and a page per job (/api/jobs/{job}). A job's
// page opens with its diagnosis (the findings plugins published about it,
// headline first), then every rank's step time per batch stacked by phase
// with the named rank marked, the straggler strip, the ranks table, the job's
// nodes' system metrics, the plugin panels that apply to its kinds, and a
// Perfetto export. The page paints from the last 500 batches first, then
// loads the rest.
import { get, el } from './api.js';
import { TimeChart } from './live.js';
import { href, setParams } from './router.js';
import { model, markCulprit, BatchView, StepChart, Heatmap, PHASE_COLORS, ramp, posOf, MANY_RANKS, ROWS_FIT } from './steps.js';
import { diagnosis, culpritRank } from './findings.js';
import { chromeTrace, download } from './trace.js';
import { nodeMatch, NODE_CHARTS, LOCAL } from './nodes.js';
import { decisionList, replaceDecisions } from './decisions.js';
import { fetchPanel, drawPanel } from './panel.js';

const FIRST_BATCHES = 500;
// Loads grow in stages so the page paints early: first at most 8 batches
// (a page opened from the job list, whose rank count is known: up to
// FIRST_RANK_STEPS rank-steps), then at most FIRST_RANK_STEPS rank-steps
// (500 batches of 8 ranks; skipped where that is no more), then all.
const FIRST_RANK_STEPS = 10000;
const PEEK_BATCHES = 8;
// The full load stops at about as many rank-steps as an hour of 8 ranks
// (the JSON is ~320 bytes a rank-step): the last 292 batches of 1 024 ranks.
const ALL_RANK_STEPS = 300000;
const NODES_SIDE_BY_SIDE = 8;
const ALL_BATCHES = 36000; // an hour of 100 ms steps, the host's default per rank; ?batches=N in the URL asks for another number

const when = (ns) => (ns ? new Date(ns / 1e6).toLocaleString('en-GB') : '–');
const dur = (s) => (s < 1 ? `${(s * 1000).toFixed(1)} ms` : s < 120 ? `${s.toFixed(2)} s` : `${(s / 60).toFixed(1)} min`);

export async function showJobs(app, box) {
  const r = await get('/api/jobs');
  const jobs = (r.json && r.json.jobs) || [];
  app.jobs = jobs;
  // Redraw only on change, so keyboard focus in the table survives refreshes.
  const sig = JSON.stringify(jobs);
  if (box.dataset.sig === sig && box.querySelector('h2')) return;
  box.dataset.sig = sig;
  box.replaceChildren(el('h2', {}, 'Jobs'), jobs.length
    ? el('table', { class: 'jobs-table' },
      el('thead', {}, el('tr', {}, ...['job', 'kinds', 'ranks', 'nodes', 'first seen', 'last seen', 'duration', 'rows'].map((h) => el('th', {}, h)))),
      el('tbody', {}, ...jobs.map((j) => el('tr', { 'data-job': j.job },
        el('td', {}, el('a', { href: href('jobs', j.job) }, j.job)),
        el('td', {}, ...j.kinds.map((k) => el('span', { class: `kind kind-${k}` }, k))),
        el('td', {}, String(j.rank_count)),
        el('td', {}, ...j.nodes.flatMap((n, i) => [i ? ', ' : '', el('a', { href: href('nodes', n) }, n)])),
        el('td', {}, when(j.first_ns)), el('td', {}, when(j.last_ns)),
        el('td', {}, dur((j.last_ns - j.first_ns) / 1e9)), el('td', {}, String(j.rows))))))
    : el('div', { class: 'empty', id: 'jobs-empty' },
      el('p', {}, 'No jobs yet. A job appears here as soon as it reports to sonde, e.g.:'),
      el('pre', {}, `curl -X POST ${location.origin}/api/ingest -H 'content-type: application/json' -d '{"origin": {"job": "mnist", "rank": 0},
  "timings": [{"name": "forward", "start_ns": ${Date.now()}000000, "end_ns": ${Date.now() + 20}000000, "batch_idx": 0}]}'`)));
}

export class JobPage {
  constructor(app, box, name, params) {
    this.app = app;
    this.box = box;
    this.name = name;
    this.params = params;
    this.charts = [];
    this.sig = '';
    // Settles once the first view is drawn (or said to be missing).
    this.painted = new Promise((done) => { this.donePainting = done; });
  }

  destroy() {
    this.dead = true;
    this.donePainting();
    for (const c of this.charts) c.destroy();
    this.charts = [];
  }

  // ?batches=N, or as many batches as make ALL_RANK_STEPS rank-steps (up to ALL_BATCHES).
  allBatches() {
    const n = Math.floor(+this.params.batches);
    if (n > 0) return n;
    return Math.max(this.first || 1, Math.min(ALL_BATCHES, Math.floor(ALL_RANK_STEPS / Math.max(1, this.rankCount || 1))));
  }

  async load(batches) {
    const r = await get(`/api/jobs/${encodeURIComponent(this.name)}?batches=${batches}`);
    return r;
  }

  async start() {
    performance.mark('job-page-start');
    // The job list's rank count, where it is at hand (the page was opened
    // from the list), sizes the first load; otherwise a peek of 8 batches.
    const known = (this.app.jobs || []).find((j) => j.job === this.name);
    const peek = (n) => Math.max(PEEK_BATCHES, Math.min(FIRST_BATCHES, Math.floor(FIRST_RANK_STEPS / Math.max(1, n))));
    this.first = known && known.rank_count ? peek(known.rank_count) : PEEK_BATCHES;
    const r = await this.load(this.first);
    if (this.dead) { this.donePainting(); return; }
    if (!r.ok) { this.notFound(r); this.donePainting(); return; }
    this.render(r.json, true);
    performance.mark('job-page-first-paint');
    // After the frame that draws it.
    requestAnimationFrame(() => setTimeout(this.donePainting, 0));
    this.rankCount = this.m.nR;
    if (r.json.steps.length >= this.first) {
      const mid = peek(this.rankCount);
      const all = this.allBatches();
      if (mid >= this.first * 2 && mid < all) {
        const more = await this.load(mid);
        if (this.dead) return;
        if (more.ok) this.render(more.json, false);
        this.first = mid;
        if (!more.ok || more.json.steps.length < mid) { this.box.dataset.loaded = 'true'; return; }
      }
      const full = await this.load(all);
      if (!this.dead && full.ok) this.render(full.json, false);
      performance.mark('job-page-all');
    }
    this.box.dataset.loaded = 'true';
  }

  // Every 2 s: the job list's summary says whether anything changed; only
  // then is the (possibly large) job view fetched again.
  async refresh() {
    if (!this.job || this.busy) return;
    this.busy = true;
    try {
      const l = await get('/api/jobs');
      const s = ((l.json && l.json.jobs) || []).find((j) => j.job === this.name);
      if (s && s.last_ns !== this.job.last_ns) {
        const r = await this.load(this.job.steps.length >= this.first ? this.allBatches() : this.first);
        if (!this.dead && r.ok) this.render(r.json, false);
      } else {
        // Findings come after the steps they judge: redraw when they change.
        const d = await get(`/api/decisions?job=${encodeURIComponent(this.name)}`);
        const findings = (d.json && d.json.decisions) || [];
        if (!this.dead && d.ok && JSON.stringify(findings) !== JSON.stringify(this.job.findings || [])) {
          this.render({ ...this.job, findings }, false);
        }
      }
      await this.panels();
    } finally {
      this.busy = false;
    }
  }

  notFound(r) {
    this.box.replaceChildren(el('p', {}, el('a', { href: href('jobs') }, '← all jobs')), el('h2', {}, `Job ${this.name}`),
      el('p', { class: 'empty', id: 'job-empty' }, r.status === 404
        ? `No job named "${this.name}" has reported to this sonde yet. It appears as soon as one of its ranks posts to /api/ingest.`
        : `The job could not be read (${r.status}): ${(r.json && r.json.error) || r.text}`));
  }

  // Builds the page once; later calls replace only what depends on the data.
  render(job, first) {
    // The reader's window survives a reload of the data; an untouched one
    // follows the latest batches.
    const keepView = this.view && this.m && this.view.touched ? [this.m.batch[this.view.lo], this.m.batch[this.view.hi - 1]] : null;
    this.job = job;
    const m = model(job);
    this.m = m;
    this.culprit = culpritRank(job.findings);
    if (this.culprit != null) {
      const h = job.findings.find((f) => f.finding && f.finding.headline && !f.finding.ended);
      markCulprit(m, this.culprit, h.finding.start_ns, h.finding.end_ns);
    }
    if (first) this.skeleton(job);
    this.diag.replaceChildren(diagnosis(job));
    this.summary(job, m);
    const training = m.nB > 0 || job.kinds.includes('training');
    this.toolbar.hidden = !training;
    this.stepsBox.hidden = !training;
    this.ranksTitle.textContent = training ? 'Ranks' : 'Processes';
    if (training) this.ranksTable(job, m);
    else this.processTable(job);
    this.exportBtn.disabled = !m.nB;
    this.exportBtn.title = m.nB ? 'Chrome trace-event JSON: open in ui.perfetto.dev or chrome://tracing' : 'no timed steps to export yet';
    for (const c of [this.steps, this.strip]) if (c) c.box.remove();
    this.stepBox.replaceChildren();
    this.stripBox.replaceChildren();
    if (!m.nB) {
      this.stepBox.append(el('p', { class: 'chart-empty' }, 'no data yet: no rank has reported a timed phase with a batch index'));
      this.legend.replaceChildren();
      return;
    }
    const rankPos = this.params.rank != null && this.params.rank !== '' ? m.rankIds.indexOf(+this.params.rank) : -1;
    // The window goes into the URL once the reader pauses (history.replaceState
    // on every wheel step costs more than drawing the frame).
    this.view = new BatchView(m.nB, (lo, hi) => {
      clearTimeout(this.urlTimer);
      this.urlTimer = setTimeout(() => { if (!this.dead) setParams({ from: m.batch[lo], to: m.batch[hi - 1] }); }, 150);
    });
    const rank = rankPos >= 0 ? rankPos : null;
    this.steps = new StepChart(this.stepBox, this.view, m, { rank });
    // What the reader opened in the heatmap outlives reloads of the data.
    if (!this.heat || this.heat.nR !== m.nR) this.heat = { nR: m.nR, expanded: new Set(), sel: null };
    this.strip = new Heatmap(this.stripBox, this.view, m, { rank, culprit: this.culprit, state: this.heat });
    this.strip.legend = this.stripLegend;
    const many = rank == null && m.nR > MANY_RANKS;
    this.stepsTitle.textContent = many ? `Step time per batch over ${m.nR} ranks: the ranks' mean phases${this.culprit != null ? `, rank ${this.culprit} beside them` : ''}` : 'Step time per batch, every rank, stacked by phase';
    this.stepsNote.textContent = many
      ? `Over ${MANY_RANKS} ranks a batch shows the ranks' mean phases${this.culprit != null ? ' and the bar of the rank the diagnosis names' : ''}; the black line is the slowest rank's step. Pick a rank to see its bars alone. Wheel or +/− to zoom, drag or arrow keys to pan, 0 for all batches; hover for the numbers.`
      : 'Each batch shows one bar per rank. Wheel or +/− to zoom, drag or arrow keys to pan, 0 for all batches; hover for the numbers.';
    this.heatNote.textContent = m.nR > ROWS_FIT
      ? `A cell is a rank's step over its batch's median step across ranks (a column of several batches: their mean). ${m.nR} ranks are grouped; a group's row shows its slowest rank. Click a group, or select it and press Enter, to show its ranks. ▶ marks the rank the diagnosis names; arrows move the selection, read out below. `
      : 'A cell is a rank\'s step over its batch\'s median step across ranks (a column of several batches: their mean): light at or under the median, darker slower. ▶ marks the rank the diagnosis names; arrows move the selection, read out below. ';
    this.legend.replaceChildren(...m.phases.map((p, i) => el('span', { class: 'key' }, el('i', { style: `background:${PHASE_COLORS[i % PHASE_COLORS.length]}` }), p)),
      this.culprit != null ? el('span', { class: 'key' }, el('i', { class: 'outline' }), `▼ rank ${this.culprit}, which the diagnosis names${many ? '' : ' (zoomed out: black line, the slowest rank\'s time)'}`) : '',
      many ? el('span', { class: 'key' }, el('i', { class: 'line' }), 'slowest rank\'s step') : '',
      many && this.culprit != null ? el('span', { class: 'key' }, el('i', { class: 'dashed' }), `rank ${this.culprit}'s step, zoomed out`) : '');
    const from = keepView ? keepView[0] : this.params.from != null ? +this.params.from : null;
    const to = keepView ? keepView[1] : this.params.to != null ? +this.params.to : null;
    if (from != null && to != null && !Number.isNaN(from)) {
      const a = posOf(m, from);
      this.view.lo = Math.max(0, Math.min(a, m.nB - 1));
      this.view.hi = Math.max(this.view.lo + 1, Math.min(m.nB, posOf(m, to) + 1));
    } else if (m.nB > 400) {
      this.view.lo = m.nB - 400; // the latest batches, readable per rank
    }
    this.view.schedule();
  }

  skeleton(job) {
    this.diag = el('div', { class: 'diagnosis-box' });
    this.head = el('div', { class: 'job-summary' });
    this.rankSel = el('select', { id: 'job-rank', 'aria-label': 'rank' });
    this.rankSel.addEventListener('change', () => { this.params.rank = this.rankSel.value; setParams({ rank: this.rankSel.value }); this.render(this.job, false); });
    const exportBtn = el('button', { id: 'export-trace', type: 'button' }, 'Download Perfetto trace');
    this.exportBtn = exportBtn;
    exportBtn.addEventListener('click', () => download(`${this.name}.trace.json`, JSON.stringify(chromeTrace(this.job))));
    const zoom = (f) => el('button', { type: 'button', onclick: () => this.view && (f ? this.view.zoom(f) : this.view.set(0, this.view.n)) }, f ? (f < 1 ? 'zoom in' : 'zoom out') : 'all batches');
    const pan = (d, t) => el('button', { type: 'button', 'aria-label': t, onclick: () => this.view && this.view.pan(d) }, d < 0 ? '◀' : '▶');
    this.ranksBox = el('div', { class: 'ranks' });
    this.legend = el('div', { class: 'legend' });
    this.stepBox = el('div', { class: 'step-box' });
    this.stripBox = el('div', { class: 'strip-box' });
    this.stripLegend = el('span', { class: 'muted' });
    this.nodeSel = el('select', { id: 'job-node', 'aria-label': 'node' });
    this.nodeSel.addEventListener('change', () => { setParams({ node: this.nodeSel.value }); this.params.node = this.nodeSel.value; this.nodeCharts(); });
    this.nodeBox = el('div', { class: 'charts small' });
    this.pluginBox = el('div', { class: 'job-plugins' });
    const grad = el('span', { class: 'ramp' }, ...[0, 0.25, 0.5, 0.75, 1].map((f) => el('i', { style: `background:rgb(${ramp(f).join(',')})` })));
    this.box.replaceChildren(
      el('p', {}, el('a', { href: href('jobs') }, '← all jobs')),
      el('h2', {}, `Job ${job.job}`),
      this.diag,
      this.head,
      this.toolbar = el('div', { class: 'toolbar' }, el('label', {}, 'rank ', this.rankSel), zoom(0.5), zoom(2), pan(-0.25, 'earlier batches'), pan(0.25, 'later batches'), zoom(0), exportBtn),
      this.ranksTitle = el('h3', {}, 'Ranks'), this.ranksBox,
      // Steps per batch: a training job's; a job of another kind never shows them.
      this.stepsBox = el('div', { class: 'job-steps' },
        this.stepsTitle = el('h3', {}, 'Step time per batch, every rank, stacked by phase'),
        this.stepsNote = el('p', { class: 'muted' }),
        this.legend, this.stepBox,
        el('h3', {}, 'Slowdown per rank and batch'), el('p', { class: 'muted' }, this.heatNote = el('span'), grad, ' ', this.stripLegend),
        this.stripBox),
      el('h3', {}, 'Nodes'), el('div', { class: 'toolbar' }, el('label', {}, 'node ', this.nodeSel)), this.nodeBox,
      el('h3', {}, 'Plugin views for this job'), this.pluginBox);
    // The node charts and plugin panels after the steps' first frame.
    requestAnimationFrame(() => setTimeout(() => { if (!this.dead) { this.nodeCharts(); this.panels(); } }, 0));
  }

  summary(job, m) {
    const ranks = Array.isArray(job.ranks) ? job.ranks : [];
    const dropped = ranks.reduce((s, r) => s + r.steps_dropped, 0);
    this.head.replaceChildren(
      ...job.kinds.map((k) => el('span', { class: `kind kind-${k}` }, k)),
      ` ${ranks.length} ${m.nB > 0 || job.kinds.includes('training') ? 'rank(s)' : 'process(es)'} on ${job.nodes.length || 1} node(s) · `,
      m.nB ? `batches ${m.batch[0]}–${m.batch[m.nB - 1]} (${m.nB} shown${dropped ? `, ${dropped} older steps dropped by the host` : ''}) · ` : '',
      `from ${when(job.first_ns)} to ${when(job.last_ns)} (${dur((job.last_ns - job.first_ns) / 1e9)}) · ${job.rows} rows`);
    const opts = [['', 'all ranks'], ...m.rankIds.map((r) => [String(r), `rank ${r}`])];
    if (this.rankSel.options.length !== opts.length) this.rankSel.replaceChildren(...opts.map(([v, t]) => el('option', { value: v }, t)));
    this.rankSel.value = this.params.rank || '';
  }

  // The ranks; the one the diagnosis names is marked (the page ranks nobody
  // itself). Over ROWS_FIT ranks the table shows the named and the picked
  // rank, and every rank behind "all N ranks", built when first opened.
  ranksTable(job, m) {
    const ranks = Array.isArray(job.ranks) ? job.ranks : [];
    const byRank = new Map(ranks.map((r) => [r.rank, r]));
    const table = (pos) => el('table', { class: 'ranks-table' },
      el('thead', {}, el('tr', {}, ...['rank', 'node', 'local rank', 'role', 'last batch', 'mean step'].map((h) => el('th', {}, h)))),
      el('tbody', {}, ...pos.map((i) => {
        const rank = m.rankIds[i];
        const info = byRank.get(rank) || {};
        const s = m.stats[i];
        const named = rank === this.culprit;
        const sel = String(rank) === String(this.params.rank ?? '');
        return el('tr', { 'data-rank': rank, class: `${named ? 'straggler' : ''}${sel ? ' selected' : ''}` },
          el('td', {}, el('a', { href: href('jobs', this.name, { ...this.params, rank }) }, `rank ${rank}`), named ? el('strong', { class: 'straggler-flag' }, ' ▼ holds the job back') : ''),
          el('td', {}, info.node ? el('a', { href: href('nodes', info.node) }, info.node) : '–'),
          el('td', {}, info.local_rank == null || info.local_rank < 0 ? '–' : String(info.local_rank)),
          el('td', {}, info.role || '–'),
          el('td', {}, info.last_batch == null ? '–' : String(info.last_batch)),
          el('td', {}, s.n ? dur(s.sum / s.n) : '–'));
      })));
    const every = m.rankIds.map((_, i) => i);
    if (m.nR <= ROWS_FIT) { this.ranksBox.replaceChildren(table(every)); return; }
    const few = [...new Set([this.culprit, this.params.rank != null && this.params.rank !== '' ? +this.params.rank : null])]
      .map((r) => m.rankIds.indexOf(r)).filter((i) => i >= 0);
    const all = el('details', { class: 'all-ranks' }, el('summary', {}, `all ${m.nR} ranks`));
    const fill = () => { if (all.open && all.children.length < 2) all.append(table(every)); this.allRanksOpen = all.open; };
    all.addEventListener('toggle', fill);
    all.open = !!this.allRanksOpen;
    fill();
    this.ranksBox.replaceChildren(...(few.length ? [table(few)] : []), all);
  }

  // A job without steps (a parameter-server or serving job): its processes,
  // each by its rank or its role and index, and when it was last heard from.
  processTable(job) {
    const procs = Array.isArray(job.ranks) ? job.ranks : [];
    const label = (p) => (p.rank >= 0 ? `rank ${p.rank}` : `${p.role || 'process'}${p.index >= 0 ? ` ${p.index}` : ''}`);
    this.ranksBox.replaceChildren(el('table', { class: 'ranks-table' },
      el('thead', {}, el('tr', {}, ...['process', 'node', 'role', 'last heard from'].map((h) => el('th', {}, h)))),
      el('tbody', {}, ...procs.map((p) => el('tr', { 'data-process': label(p) },
        el('td', {}, label(p)),
        el('td', {}, p.node ? el('a', { href: href('nodes', p.node) }, p.node) : '–'),
        el('td', {}, p.role || '–'),
        el('td', {}, when(p.last_ns)))))));
  }

  nodeCharts() {
    const app = this.app;
    const nodes = this.job.nodes.length ? this.job.nodes : [app.localName];
    // Side by side up to NODES_SIDE_BY_SIDE nodes; a larger job's page shows
    // one node, at first the one of the rank the diagnosis names.
    const many = nodes.length > NODES_SIDE_BY_SIDE;
    const namedNode = ((Array.isArray(this.job.ranks) ? this.job.ranks : []).find((r) => r.rank === this.culprit) || {}).node;
    const first = many ? (nodes.includes(namedNode) ? namedNode : nodes[0]) : '';
    const opts = many ? nodes.map((n) => [n, n === namedNode ? `${n} (rank ${this.culprit}'s)` : n])
      : [['', `all ${nodes.length} node(s), side by side`], ...nodes.map((n) => [n, n])];
    if (this.nodeSel.options.length !== opts.length) this.nodeSel.replaceChildren(...opts.map(([v, t]) => el('option', { value: v }, t)));
    this.nodeSel.value = nodes.includes(this.params.node) ? this.params.node : first;
    for (const c of this.charts) c.destroy();
    this.charts = [];
    const shown = this.nodeSel.value ? [this.nodeSel.value] : nodes;
    const width = shown.length > 1 ? 420 : undefined;
    // On a standalone sonde every series is the local machine's, whatever the job calls its node.
    const key = (n) => (app.role === 'master' ? n : LOCAL);
    // The GPU chart only where some node has GPUs: an empty box on every CPU-only job says nothing.
    const gpus = app.feed.series((m) => m.name === 'hw.gpu.utilization').length > 0;
    const charts = NODE_CHARTS.filter((c) => gpus || !c.name.startsWith('hw.gpu.'));
    for (const n of shown) {
      for (const c of charts.slice(0, shown.length > 1 ? 2 : 3)) {
        this.charts.push(new TimeChart(this.nodeBox, app.feed, { title: `${c.title} · ${n}`, unit: c.unit, label: c.label, height: 150, width, match: (m) => nodeMatch(app, key(n), c.name)(m) }));
      }
    }
  }

  // Every loaded plugin is asked for its view of this job; one that has
  // none answers 404 and draws nothing (the page names no plugin itself).
  async panels() {
    // One round at a time: two overlapping rounds would both add a plugin's section.
    if (this.panelsBusy) return;
    this.panelsBusy = true;
    try { await this.panelRound(); } finally { this.panelsBusy = false; }
  }

  async panelRound() {
    const app = this.app;
    this.panelParams ||= {};
    let shown = 0;
    for (const name of app.plugins) {
      let p = this.pluginBox.querySelector(`[data-job-panel="${CSS.escape(name)}"]`);
      let spec;
      try {
        spec = await fetchPanel(name, { ...(this.panelParams[name] || {}), job: this.name });
      } catch (e) {
        spec = { title: name, controls: [], items: [{ kind: 'text', id: 'error', tone: 'error', text: `panel failed: ${e.message || e}` }] };
      }
      if (!spec) { p?.remove(); continue; }
      shown += 1;
      if (!p) {
        p = el('section', { class: 'panel', 'data-job-panel': name }, el('h4', {}, el('a', { href: href('plugins', name) }, spec.title || name)),
          el('div', { class: 'custom-panel' }), el('div', { class: 'decisions' }));
        this.pluginBox.append(p);
      }
      drawPanel(p.querySelector('.custom-panel'), spec, { name, hide: ['job'], onControl: (k, v) => { (this.panelParams[name] ||= {})[k] = v; this.panels(); } });
      // This job's decisions only: another job's findings never show here.
      const d = await get(`/api/decisions?plugin=${encodeURIComponent(name)}&job=${encodeURIComponent(this.name)}`);
      replaceDecisions(p.querySelector('.decisions'), decisionList((d.json && d.json.decisions) || [], 10));
    }
    this.pluginBox.querySelector(':scope > p.muted')?.remove();
    if (!shown) this.pluginBox.append(el('p', { class: 'muted' }, 'No loaded plugin has a view of this job.'));
  }
}
