// Timings per batch index, from the determined plugin's routes. Shows a clear
// empty state when the plugin is not loaded or has no timings yet.
import { get, el } from './api.js';
import { barChart } from './live.js';

let plot = null;
let lastKey = '';

export async function showTimings() {
  const box = document.getElementById('timings-chart');
  const empty = document.getElementById('timings-empty');
  const r = await get('/api/plugins/determined/timings?limit=5000');
  if (!r.ok || !Array.isArray(r.json)) {
    if (plot) { plot.destroy(); plot = null; lastKey = ''; }
    empty.hidden = false;
    empty.replaceChildren(r.status === 404
      ? 'The determined plugin is not loaded: put determined.wasm in the plugins directory (or upload it under Plugins) to see timings per batch.'
      : `The determined plugin did not answer with timings (${r.status}): ${(r.json && (r.json.reason || r.json.error)) || r.text}`);
    return;
  }
  const rows = r.json;
  if (!rows.length) {
    empty.hidden = false;
    empty.textContent = 'The determined plugin has no timings yet (profiling starts at begin_on_batch).';
    return;
  }
  empty.hidden = true;
  // Mean duration per (timing name, batch index) over ranks and jobs.
  const names = [...new Set(rows.map((t) => t.name))].sort();
  const batches = [...new Set(rows.map((t) => t.batch_idx))].sort((a, b) => a - b);
  const key = `${names.join()}|${batches.length}|${rows.length}`;
  if (key === lastKey) return; // nothing new
  lastKey = key;
  const bi = new Map(batches.map((b, i) => [b, i]));
  const sum = names.map(() => batches.map(() => 0));
  const cnt = names.map(() => batches.map(() => 0));
  for (const t of rows) {
    const n = names.indexOf(t.name);
    const b = bi.get(t.batch_idx);
    sum[n][b] += t.duration_s;
    cnt[n][b] += 1;
  }
  const ys = sum.map((s, n) => s.map((v, b) => (cnt[n][b] ? v / cnt[n][b] : null)));
  if (plot) plot.destroy();
  box.replaceChildren();
  plot = barChart(box, { title: 'duration by batch index', xLabel: 'batch', names, x: batches, ys, unit: 's' });
  box.append(el('p', { class: 'muted' }, `${rows.length} timings, ${batches.length} batches, ${names.length} phases`));
}
