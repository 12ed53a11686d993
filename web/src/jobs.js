// Jobs: the list (/api/jobs) and a page per job (/api/jobs/{job}). A job's
// page opens with its diagnosis (the findings plugins published about it,
// headline first), then every rank's step time per batch stacked by phase
// with the named rank marked, the straggler strip, the ranks table, the job's
// nodes' system metrics, the plugin panels that apply to its kinds, and a
// Perfetto export. The page paints from the last 500 batches first, then
// loads the rest.
import { get, call, el } from './api.js';
import { TimeChart } from './live.js';
import { href, setParams } from './router.js';
import { model, markCulprit, BatchView, StepChart, StragglerStrip, PHASE_COLORS, ramp } from './steps.js';
import { diagnosis, culpritRank } from './findings.js';
import { chromeTrace, download } from './trace.js';
import { nodeMatch, NODE_CHARTS, LOCAL } from './nodes.js';
import { decisionList, replaceDecisions } from './decisions.js';
import { custom } from './panels/index.js';

// Which plugins' views apply to the host's own kinds of job; a kind that is
// an event table's name brings the panels of the plugins that declare or read
// it (`pluginsFor`).
const KIND_PLUGINS = { training: ['bottleneck', 'dlrover'], paramserver: ['paramserver'] };

function pluginsFor(app, kinds) {
  const byTable = Object.entries(app.pluginTables || {}).filter(([, tables]) => tables.some((t) => kinds.includes(t))).map(([p]) => p);
  return [...new Set([...kinds.flatMap((k) => KIND_PLUGINS[k] || []), ...byTable])];
}
const FIRST_BATCHES = 500;
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

// Position of batch number `b` in the model (the first at or after it).
function posOf(m, b) {
  let lo = 0;
  let hi = m.nB;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (m.batch[mid] < b) lo = mid + 1; else hi = mid; }
  return lo;
}

export class JobPage {
  constructor(app, box, name, params) {
    this.app = app;
    this.box = box;
    this.name = name;
    this.params = params;
    this.charts = [];
    this.sig = '';
  }

  destroy() {
    this.dead = true;
    for (const c of this.charts) c.destroy();
    this.charts = [];
  }

  allBatches() {
    const n = Math.floor(+this.params.batches);
    return n > 0 ? n : ALL_BATCHES;
  }

  async load(batches) {
    const r = await get(`/api/jobs/${encodeURIComponent(this.name)}?batches=${batches}`);
    return r;
  }

  async start() {
    performance.mark('job-page-start');
    const r = await this.load(FIRST_BATCHES);
    if (this.dead) return;
    if (!r.ok) { this.notFound(r); return; }
    this.render(r.json, true);
    performance.mark('job-page-first-paint');
    if (r.json.steps.length >= FIRST_BATCHES) {
      const all = await this.load(this.allBatches());
      if (!this.dead && all.ok) this.render(all.json, false);
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
        const r = await this.load(this.job.steps.length >= FIRST_BATCHES ? this.allBatches() : FIRST_BATCHES);
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
    const keepView = this.view && this.m ? [this.m.batch[this.view.lo], this.m.batch[this.view.hi - 1]] : null;
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
    this.ranksTable(job, m);
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
    this.view = new BatchView(m.nB, (lo, hi) => setParams({ from: m.batch[lo], to: m.batch[hi - 1] }));
    this.steps = new StepChart(this.stepBox, this.view, m, { rank: rankPos >= 0 ? rankPos : null });
    this.strip = new StragglerStrip(this.stripBox, this.view, m, { rank: rankPos >= 0 ? rankPos : null });
    this.strip.legend = this.stripLegend;
    this.legend.replaceChildren(...m.phases.map((p, i) => el('span', { class: 'key' }, el('i', { style: `background:${PHASE_COLORS[i % PHASE_COLORS.length]}` }), p)),
      this.culprit != null ? el('span', { class: 'key' }, el('i', { class: 'outline' }), `▼ rank ${this.culprit}, which the diagnosis names (zoomed out: black line, the slowest rank's time)`) : '');
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
    this.folded = job.kinds.includes('mpi_samples') && this.app.plugins.includes('mpi')
      ? el('a', { class: 'button', id: 'export-folded', href: `/api/plugins/mpi/folded?job=${encodeURIComponent(this.name)}`, download: `${this.name}.folded` }, 'Download MPI folded stacks')
      : null;
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
      el('div', { class: 'toolbar' }, el('label', {}, 'rank ', this.rankSel), zoom(0.5), zoom(2), pan(-0.25, 'earlier batches'), pan(0.25, 'later batches'), zoom(0), exportBtn, this.folded),
      el('h3', {}, 'Ranks'), this.ranksBox,
      el('h3', {}, 'Step time per batch, every rank, stacked by phase'),
      el('p', { class: 'muted' }, 'Each batch shows one bar per rank. Wheel or +/− to zoom, drag or arrow keys to pan, 0 for all batches; hover for the numbers.'),
      this.legend, this.stepBox,
      el('h3', {}, 'Straggler strip'), el('p', { class: 'muted' }, 'One row per rank, one column per batch: darker is slower. ', grad, ' ', this.stripLegend),
      this.stripBox,
      el('h3', {}, 'Nodes'), el('div', { class: 'toolbar' }, el('label', {}, 'node ', this.nodeSel)), this.nodeBox,
      el('h3', {}, 'Plugin views for this job'), this.pluginBox);
    this.nodeCharts();
    this.panels();
  }

  summary(job, m) {
    const ranks = Array.isArray(job.ranks) ? job.ranks : [];
    const dropped = ranks.reduce((s, r) => s + r.steps_dropped, 0);
    this.head.replaceChildren(
      ...job.kinds.map((k) => el('span', { class: `kind kind-${k}` }, k)),
      ` ${ranks.length} rank(s) on ${job.nodes.length || 1} node(s) · `,
      m.nB ? `batches ${m.batch[0]}–${m.batch[m.nB - 1]} (${m.nB} shown${dropped ? `, ${dropped} older steps dropped by the host` : ''}) · ` : '',
      `from ${when(job.first_ns)} to ${when(job.last_ns)} (${dur((job.last_ns - job.first_ns) / 1e9)}) · ${job.rows} rows`);
    const opts = [['', 'all ranks'], ...m.rankIds.map((r) => [String(r), `rank ${r}`])];
    if (this.rankSel.options.length !== opts.length) this.rankSel.replaceChildren(...opts.map(([v, t]) => el('option', { value: v }, t)));
    this.rankSel.value = this.params.rank || '';
  }

  // The ranks; the one the diagnosis names is marked (the page ranks nobody itself).
  ranksTable(job, m) {
    const ranks = Array.isArray(job.ranks) ? job.ranks : [];
    this.ranksBox.replaceChildren(el('table', { class: 'ranks-table' },
      el('thead', {}, el('tr', {}, ...['rank', 'node', 'local rank', 'role', 'last batch', 'mean step'].map((h) => el('th', {}, h)))),
      el('tbody', {}, ...m.rankIds.map((rank, i) => {
        const info = ranks.find((r) => r.rank === rank) || {};
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
      }))));
  }

  nodeCharts() {
    const app = this.app;
    const nodes = this.job.nodes.length ? this.job.nodes : [app.localName];
    const opts = [['', `all ${nodes.length} node(s), side by side`], ...nodes.map((n) => [n, n])];
    if (this.nodeSel.options.length !== opts.length) this.nodeSel.replaceChildren(...opts.map(([v, t]) => el('option', { value: v }, t)));
    this.nodeSel.value = nodes.includes(this.params.node) ? this.params.node : '';
    for (const c of this.charts) c.destroy();
    this.charts = [];
    const shown = this.nodeSel.value ? [this.nodeSel.value] : nodes;
    const width = shown.length > 1 ? 420 : undefined;
    // On a standalone sonde every series is the local machine's, whatever the job calls its node.
    const key = (n) => (app.role === 'master' ? n : LOCAL);
    for (const n of shown) {
      for (const c of NODE_CHARTS.slice(0, shown.length > 1 ? 2 : 3)) {
        this.charts.push(new TimeChart(this.nodeBox, app.feed, { title: `${c.title} · ${n}`, unit: c.unit, label: c.label, height: 150, width, match: (m) => nodeMatch(app, key(n), c.name)(m) }));
      }
    }
  }

  async panels() {
    const app = this.app;
    const want = pluginsFor(app, this.job.kinds).filter((p) => app.plugins.includes(p));
    if (!want.length) {
      if (!this.pluginBox.querySelector('.muted')) {
        const could = this.job.kinds.flatMap((k) => KIND_PLUGINS[k] || []);
        this.pluginBox.replaceChildren(el('p', { class: 'muted' }, `No plugin view applies: this job is ${this.job.kinds.join(', ')}; load ${[...new Set(could)].join(' or ') || 'a plugin that declares its tables'} to see one.`));
      }
      return;
    }
    for (const name of want) {
      let p = this.pluginBox.querySelector(`[data-job-panel="${name}"]`);
      if (!p) {
        p = el('section', { class: 'panel', 'data-job-panel': name }, el('h4', {}, el('a', { href: href('plugins', name) }, name)),
          el('div', { class: 'custom-panel' }), el('div', { class: 'decisions' }));
        this.pluginBox.append(p);
      }
      try {
        if (custom[name]) await custom[name].render(p.querySelector('.custom-panel'), { name, get, call, el, feed: app.feed, TimeChart, job: this.name });
      } catch (e) {
        p.querySelector('.custom-panel').replaceChildren(el('p', { class: 'error' }, `panel failed: ${e}`));
      }
      // This job's decisions only: another job's findings never show here.
      const d = await get(`/api/decisions?plugin=${encodeURIComponent(name)}&job=${encodeURIComponent(this.name)}`);
      replaceDecisions(p.querySelector('.decisions'), decisionList((d.json && d.json.decisions) || [], 10));
    }
  }
}
