// The sonde dashboard: live system metrics, jobs (every rank's steps,
// stragglers, the job's nodes and plugin views), nodes, timings per batch,
// plugins (status, management, a panel per plugin) and the config editor.
// Every view has a URL (#/jobs/mnist?rank=1, #/nodes/node-1, #/plugins/mpi);
// the time window, node, rank and zoomed batches ride in its query.
// Served by the sonde binary; everything it needs is bundled.
import './style.css';
import { get, el, setToken, token } from './api.js';
import { Feed, TimeChart } from './live.js';
import { showTimings } from './timings.js';
import { showPlugins, initUpload } from './plugins.js';
import { initConfig, loadConfig } from './config.js';
import { parse, setParams, href } from './router.js';
import { showJobs, JobPage } from './jobs.js';
import { showNodes } from './nodes.js';
import { isBusyShare } from './cpu.js';

const feed = new Feed();
window.sondeFeed = feed; // for the browser tests and the curious

// What every view may need: the feed, this sonde's role and name, its plugins.
const app = { feed, role: 'standalone', localName: 'local', version: '', plugins: [], jobs: [] };
window.sondeApp = app;

const attr = (m, k) => (m.attributes[k] === undefined ? '' : String(m.attributes[k]));
// The System view is this sonde's own machine: a plugin's series of the
// semantic-convention system.* names, without a host.name.
const sys = (name) => (m) => Boolean(m.plugin) && m.name === name && m.attributes['host.name'] === undefined;

// System view: the machine's series by their OpenTelemetry semantic-convention names.
const SYSTEM_CHARTS = [
  // The busy share of all CPUs and of each core, derived from the modes (cpu.js).
  { title: 'CPU utilization per core', match: (m) => sys('system.cpu.utilization')(m) && isBusyShare(m), unit: '1',
    label: (m) => (m.attributes['cpu.logical_number'] === undefined ? 'all' : `cpu ${attr(m, 'cpu.logical_number')}`) },
  { title: 'Memory', match: sys('system.memory.usage'), unit: 'By', label: (m) => attr(m, 'system.memory.state') },
  { title: 'Network', match: sys('system.network.io'), unit: 'By/s',
    label: (m) => `${attr(m, 'network.interface.name')} ${attr(m, 'network.io.direction')}` },
  { title: 'Disk', match: sys('system.disk.io'), unit: 'By/s',
    label: (m) => `${attr(m, 'system.device')} ${attr(m, 'disk.io.direction')}` },
  { title: 'GPU utilization', match: sys('hw.gpu.utilization'), unit: '1', label: (m) => attr(m, 'hw.name') || attr(m, 'hw.id') },
  { title: 'GPU memory', match: sys('hw.gpu.memory.usage'), unit: 'By', label: (m) => attr(m, 'hw.name') || attr(m, 'hw.id') },
  { title: 'GPU power', match: sys('hw.power'), unit: 'W', label: (m) => attr(m, 'hw.name') || attr(m, 'hw.id') },
];

function initSystem() {
  const box = document.getElementById('system-charts');
  const charts = SYSTEM_CHARTS.map((c) => new TimeChart(box, feed, c));
  const update = () => {
    const any = charts.some((c) => c.ids.length);
    document.getElementById('system-empty').hidden = any;
    // A machine without GPUs: its GPU charts would only ever say "no data yet".
    for (const c of charts) c.box.hidden = any && !c.ids.length && c.title.startsWith('GPU');
  };
  feed.listeners.add(update);
  update();
}

let route = parse();
let jobPage = null;

function show() {
  route = parse();
  const v = route.view;
  for (const a of document.querySelectorAll('#tabs a')) {
    a.classList.toggle('active', a.dataset.view === v);
    if (a.dataset.view === v) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  for (const s of document.querySelectorAll('.view')) s.classList.toggle('active', s.id === `view-${v}`);
  const win = document.getElementById('window');
  const w = route.params.window;
  if (w && [...win.options].some((o) => o.value === w) && win.value !== w) { win.value = w; feed.start(+w); }
  document.title = `sonde · ${v}${route.arg ? ` · ${route.arg}` : ''}`;
  if (jobPage && (v !== 'jobs' || jobPage.name !== route.arg)) { jobPage.destroy(); jobPage = null; }
  refreshView(true);
}

async function refreshView(navigated) {
  const v = route.view;
  const box = document.getElementById(`view-${v}`);
  if (v === 'timings') showTimings();
  if (v === 'plugins') {
    const focus = document.getElementById('plugin-focus');
    focus.hidden = !route.arg;
    if (route.arg) {
      focus.replaceChildren(`Showing the ${route.arg} plugin${app.plugins.includes(route.arg) ? '' : ' (not loaded on this sonde)'}. `, el('a', { href: href('plugins') }, 'all plugins'));
    }
    showPlugins(feed, route.arg);
  }
  if (v === 'config') loadConfig(false);
  if (v === 'jobs') {
    if (!route.arg) await showJobs(app, box);
    else if (!jobPage) { jobPage = new JobPage(app, box, route.arg, { ...route.params }); app.jobPage = jobPage; box.replaceChildren(el('p', { class: 'muted' }, 'loading…')); jobPage.start(); }
    else if (!navigated) jobPage.refresh();
  }
  if (v === 'nodes' && (navigated || !route.arg)) {
    if (route.arg && !app.jobs.length) app.jobs = ((await get('/api/jobs')).json || {}).jobs || [];
    await showNodes(app, box, route.arg);
  }
  box.dataset.rendered = String(Date.now());
}

async function refreshSummary() {
  const s = document.getElementById('summary');
  try {
    const r = await get('/api/status');
    const st = r.json;
    app.role = (st.cluster && st.cluster.role) || 'standalone';
    if (st.cluster && st.cluster.node) app.localName = st.cluster.node;
    app.version = st.version;
    app.plugins = st.plugins.map((p) => p.name);
    // The event tables each plugin declares or reads: a job that sent rows of
    // one shows that plugin's panel (jobs.js).
    app.pluginTables = Object.fromEntries(st.plugins.map((p) => [p.name, [...(p.tables || []), ...(p.reads || [])]]));
    const p = st.sampler ? st.sampler.period : null;
    s.className = '';
    s.replaceChildren(
      el('span', { id: 'period' }, `sampling every ${st.sampling_period_ms} ms`),
      p ? ` · period error p99 ${p.error_p99_us.toFixed(0)} µs` : '',
      ` · ${app.role}`,
      st.cluster && st.cluster.nodes ? ` · ${st.cluster.nodes.up} of ${st.cluster.nodes.nodes} nodes up` : '',
      st.cluster && st.cluster.jobs ? ` · ${st.cluster.jobs.jobs} jobs` : '',
      ` · export ${st.export.endpoint || 'off'} (${st.export.stats.points_exported} points sent)`,
      ` · ${st.plugins.length} plugins`,
      // GPU sampling in words, marked when a GPU is lost or a reading fails
      st.sampler ? ' · ' : '',
      st.sampler ? el('span', { id: 'gpu-status', class: /lost|failing|not in this NVML/.test(st.sampler.gpu) ? 'error' : '' }, st.sampler.gpu) : '',
      ` · sonde ${st.version} · up ${Math.round(st.uptime_s)} s`,
      el('span', { id: 'stream-stats', class: 'muted' },
        ` · live: ${feed.meta.size} series, ${feed.events} events, ${feed.buckets} buckets`),
    );
  } catch (e) {
    s.className = 'error';
    s.textContent = `sonde is not answering: ${e}`;
  }
}

async function init() {
  const tok = document.getElementById('token');
  tok.value = token();
  tok.addEventListener('change', () => setToken(tok.value.trim()));
  const win = document.getElementById('window');
  if (route.params.window && [...win.options].some((o) => o.value === route.params.window)) win.value = route.params.window;
  win.addEventListener('change', () => { setParams({ window: win.value }); feed.start(+win.value); });
  // Old links (#plugins) keep working.
  if (/^#[a-z]+$/.test(location.hash)) history.replaceState(null, '', `#/${location.hash.slice(1)}`);
  initConfig();
  initUpload();
  // A job's page opened by its link paints first: the live feed's first
  // snapshot (every series of the window) and the System view's charts
  // would take the same main thread. They start once its steps are drawn.
  const jobFirst = route.view === 'jobs' && route.arg;
  const live = () => { initSystem(); feed.start(+win.value); };
  if (!jobFirst) live();
  // The view first; the status and this sonde's name follow (the views read
  // them through `app` when they draw, so nothing waits on them).
  const cfg = get('/api/config').then((r) => {
    if (r.ok && r.json && r.json.host && r.json.host.name) app.localName = r.json.host.name;
  });
  const status = refreshSummary();
  window.addEventListener('hashchange', show);
  if (jobFirst) {
    show();
    jobPage.painted.then(live);
  }
  await Promise.all([cfg, status]);
  if (!jobFirst) show();
  setInterval(refreshSummary, 1000);
  setInterval(() => { if (['timings', 'plugins', 'jobs', 'nodes'].includes(route.view)) refreshView(false); }, 2000);
}

init();
