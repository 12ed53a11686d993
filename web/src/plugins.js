// Plugin management (status, traps, quarantine reason, enable/disable,
// reload, remove, upload) and a panel per plugin fed by its outputs: its own
// metric series (small live charts) and its decisions.
import { call, get, el, fmtBytes } from './api.js';
import { TimeChart } from './live.js';
import { fetchPanel, drawPanel } from './panel.js';
import { decisionList, replaceDecisions } from './decisions.js';
import { href } from './router.js';

const panels = new Map(); // plugin name -> {box, charts: Map(metric -> TimeChart)}
let feedRef = null;
let focus = ''; // a plugin's name when the route names one (#/plugins/<name>)

function cell(v, cls) {
  return el('td', cls ? { class: cls } : {}, v == null ? '' : String(v));
}

async function act(name, action) {
  const r = await call('POST', `/api/admin/plugins/${name}/${action}`);
  note(r.ok ? `${name}: ${action} done (${r.json.plugin.state})` : `${name}: ${action} failed (${r.status}): ${(r.json && (r.json.reason || r.json.error)) || r.text}`, !r.ok);
  showPlugins(feedRef);
}

async function removePlugin(name) {
  if (!confirm(`Remove ${name}.wasm from the plugins directory?`)) return;
  const r = await call('DELETE', `/api/admin/plugins/${name}`);
  note(r.ok ? `${name}: removed` : `${name}: remove failed (${r.status}): ${(r.json && r.json.error) || r.text}`, !r.ok);
  showPlugins(feedRef);
}

function note(text, bad) {
  const n = document.getElementById('upload-result');
  n.textContent = text;
  n.className = bad ? 'error' : 'ok';
}

export async function showPlugins(feed, only = '') {
  feedRef = feed;
  focus = only;
  const r = await get('/api/plugins');
  if (!r.ok) return;
  const body = document.querySelector('#plugins tbody');
  body.replaceChildren(...r.json.plugins.map((p) => {
    const why = p.reason || p.update_rejected || p.last_trap || p.last_error || '';
    const enabled = p.state !== 'disabled';
    return el('tr', { 'data-plugin': p.name, 'data-state': p.state },
      el('td', {}, el('a', { href: href('plugins', p.name) }, p.name)),
      cell(p.state, `state ${p.state}`),
      cell(p.version || ''),
      cell(p.metrics.calls),
      cell(p.traps),
      cell(p.restarts),
      cell(fmtBytes(p.metrics.memory_bytes)),
      cell(p.metrics.call_us_p99 ? `${p.metrics.call_us_p99.toFixed(0)} µs` : ''),
      el('td', { class: 'reason' }, why),
      el('td', { class: 'actions' },
        el('button', { onclick: () => act(p.name, 'reload') }, 'Reload'),
        el('button', { onclick: () => act(p.name, enabled ? 'disable' : 'enable') }, enabled ? 'Disable' : 'Enable'),
        el('button', { onclick: () => removePlugin(p.name) }, 'Remove')));
  }));
  updatePanels(r.json.plugins.map((p) => p.name));
}

// A series' legend: only the attributes that tell it apart from its metric's other series.
function shortLabel(m, siblings) {
  const varies = (k) => siblings.some((x) => x.attributes[k] !== m.attributes[k]);
  return Object.entries(m.attributes).filter(([k]) => varies(k)).map(([k, v]) => `${k.split('.').pop()}=${v}`).join(' ');
}

// The view the plugin serves (panel.js), with the controls the user picked.
async function showSpec(name, p) {
  p.params ||= {};
  try {
    const spec = await fetchPanel(name, p.params);
    if (!spec) { p.custom.replaceChildren(); return; }
    drawPanel(p.custom, spec, { name, onControl: (k, v) => { p.params[k] = v; showSpec(name, p); } });
  } catch (e) {
    p.custom.replaceChildren(el('p', { class: 'error' }, `panel failed: ${e.message || e}`));
  }
}

// One panel per plugin: its series as small charts (one per metric name) and its decisions.
async function updatePanels(names) {
  const box = document.getElementById('panels');
  for (const [name, p] of panels) {
    if (!names.includes(name)) { for (const c of p.charts.values()) c.destroy(); p.box.remove(); panels.delete(name); }
  }
  for (const name of names) {
    let p = panels.get(name);
    if (!p) {
      p = { box: el('details', { class: 'panel', open: '', 'data-panel': name, id: `panel-${name}` }, el('summary', {}, name)), charts: new Map() };
      p.custom = el('div', { class: 'custom-panel', 'data-custom-panel': name });
      p.body = el('div', { class: 'charts small' });
      p.decisions = el('div', { class: 'decisions' });
      p.box.append(p.custom, p.body, p.decisions);
      box.append(p.box);
      panels.set(name, p);
    }
    p.box.hidden = Boolean(focus) && focus !== name;
    if (p.box.hidden) continue;
    await showSpec(name, p);
    // What the plugin emitted, not what the dashboard derived from it.
    const series = feedRef.series((m) => m.plugin === name && !m.derived);
    const metrics = [...new Set(series.map((m) => m.name))];
    // A plugin sampling the machine (semantic-convention system.* names): the System view draws it.
    if (metrics.length && metrics.every((m) => m.startsWith('system.'))) {
      p.body.replaceChildren(el('p', { class: 'muted' },
        `${series.length} series (${metrics.length} metrics): see the System view for its charts.`));
    } else {
      for (const metric of metrics.slice(0, 12)) {
        if (p.charts.has(metric)) continue;
        const unit = series.find((m) => m.name === metric).unit;
        p.charts.set(metric, new TimeChart(p.body, feedRef, {
          title: metric, unit, height: 140,
          match: (m) => m.plugin === name && m.name === metric,
          label: (m) => shortLabel(m, feedRef.series((x) => x.plugin === name && x.name === metric)) || metric,
        }));
      }
      if (!metrics.length && !p.body.querySelector('.empty')) {
        p.body.replaceChildren(el('p', { class: 'empty' }, 'No metrics from this plugin yet.'));
      } else if (metrics.length) {
        p.body.querySelector('.empty')?.remove();
      }
    }
    const d = await get(`/api/decisions?plugin=${encodeURIComponent(name)}`);
    const list = (d.json && d.json.decisions) || [];
    replaceDecisions(p.decisions, el('h4', {}, 'Decisions'), decisionList(list, 20));
  }
}

export function initUpload() {
  const form = document.getElementById('upload');
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const file = document.getElementById('upload-file').files[0];
    if (!file) { note('choose a .wasm file first', true); return; }
    const name = document.getElementById('upload-name').value.trim() || file.name.replace(/\.wasm$/, '');
    note(`uploading ${name}…`, false);
    const r = await call('PUT', `/api/admin/plugins/${encodeURIComponent(name)}`, await file.arrayBuffer(), 'application/wasm');
    if (r.ok) note(`${name}: ${r.json.replaced ? 'replaced' : 'added'}, ${r.json.plugin.state}`, false);
    else note(`${name}: refused (${r.status}): ${(r.json && (r.json.plugin?.reason || r.json.plugin?.update_rejected || r.json.error)) || r.text}`, true);
    showPlugins(feedRef);
  });
}
