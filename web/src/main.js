// The sonde dashboard: live system metrics, timings per batch, plugins (status,
// management, a panel per plugin) and the config editor. Served by the sonde
// binary; everything it needs is bundled (no network beyond sonde itself).
import './style.css';
import { get, el, setToken, token } from './api.js';
import { Feed, TimeChart } from './live.js';
import { showTimings } from './timings.js';
import { showPlugins, initUpload } from './plugins.js';
import { initConfig, loadConfig } from './config.js';

const feed = new Feed();
window.sondeFeed = feed; // for the browser tests and the curious

const attr = (m, k) => (m.attributes[k] === undefined ? '' : String(m.attributes[k]));
const sys = (name) => (m) => m.plugin === 'sysmetrics' && m.name === name;

// System view: what the sysmetrics plugin emits (OpenTelemetry semantic-convention names).
const SYSTEM_CHARTS = [
  { title: 'CPU utilization per core', match: sys('system.cpu.utilization'), unit: '1',
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
  feed.listeners.add(() => {
    document.getElementById('system-empty').hidden = charts.some((c) => c.ids.length);
  });
}

let view = 'system';
function show(v) {
  view = v;
  for (const b of document.querySelectorAll('#tabs button')) b.classList.toggle('active', b.dataset.view === v);
  for (const s of document.querySelectorAll('.view')) s.classList.toggle('active', s.id === `view-${v}`);
  location.hash = v;
  refreshView();
}

function refreshView() {
  if (view === 'timings') showTimings();
  if (view === 'plugins') showPlugins(feed);
  if (view === 'config') loadConfig(false);
}

async function refreshSummary() {
  const s = document.getElementById('summary');
  try {
    const r = await get('/api/status');
    const st = r.json;
    const p = st.sampler ? st.sampler.period : null;
    s.className = '';
    s.replaceChildren(
      el('span', { id: 'period' }, `sampling every ${st.sampling_period_ms} ms`),
      p ? ` · period error p99 ${p.error_p99_us.toFixed(0)} µs` : '',
      ` · export ${st.export.endpoint || 'off'} (${st.export.stats.points_exported} points sent)`,
      ` · ${st.plugins.length} plugins`,
      ` · sonde ${st.version} · up ${Math.round(st.uptime_s)} s`,
      el('span', { id: 'stream-stats', class: 'muted' },
        ` · live: ${feed.meta.size} series, ${feed.events} events, ${feed.buckets} buckets`),
    );
  } catch (e) {
    s.className = 'error';
    s.textContent = `sonde is not answering: ${e}`;
  }
}

function init() {
  const tok = document.getElementById('token');
  tok.value = token();
  tok.addEventListener('change', () => setToken(tok.value.trim()));
  for (const b of document.querySelectorAll('#tabs button')) b.addEventListener('click', () => show(b.dataset.view));
  const win = document.getElementById('window');
  win.addEventListener('change', () => feed.start(+win.value));
  initSystem();
  initConfig();
  initUpload();
  feed.start(+win.value);
  const h = location.hash.slice(1);
  if (['system', 'timings', 'plugins', 'config'].includes(h)) show(h);
  refreshSummary();
  setInterval(refreshSummary, 1000);
  setInterval(() => { if (view === 'timings' || view === 'plugins') refreshView(); }, 2000);
}

init();
