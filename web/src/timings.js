// Timings per batch index, from the host's own job view (`/api/jobs`,
// `/api/jobs/{job}`: every rank's steps with their timed phases), whatever
// plugins run. One job at a time, the most recently seen training job by
// default; the mean over ranks of each phase per batch index. Shows a clear
// empty state when no job has reported timings.
import { get, el } from './api.js';
import { barChart } from './live.js';

const BATCHES = 2000;
let plot = null;
let lastKey = '';
let chosen = '';

/// The jobs that reported timings or progress, most recently seen first.
async function trainingJobs() {
  const r = await get('/api/jobs');
  if (!r.ok || !r.json || !Array.isArray(r.json.jobs)) return { error: r };
  const jobs = r.json.jobs.filter((j) => j.kinds.includes('training')).sort((a, b) => b.last_ns - a.last_ns);
  return { jobs };
}

function picker(jobs) {
  let select = document.getElementById('timings-job');
  if (!select) {
    select = el('select', { id: 'timings-job', 'aria-label': 'job' });
    select.addEventListener('change', () => { chosen = select.value; lastKey = ''; showTimings(); });
    document.getElementById('timings-chart').before(el('label', { class: 'timings-pick' }, 'job ', select));
  }
  const names = jobs.map((j) => j.job);
  if (select.dataset.names !== names.join('\n')) {
    select.replaceChildren(...names.map((n) => el('option', { value: n }, n)));
    select.dataset.names = names.join('\n');
  }
  select.value = chosen;
}

function emptyState(text) {
  if (plot) { plot.destroy(); plot = null; lastKey = ''; }
  document.getElementById('timings-chart').replaceChildren();
  const empty = document.getElementById('timings-empty');
  empty.hidden = false;
  empty.textContent = text;
}

export async function showTimings() {
  const { jobs, error } = await trainingJobs();
  if (error) {
    emptyState(`The job list did not load (${error.status}): ${(error.json && error.json.error) || error.text}`);
    return;
  }
  if (!jobs.length) {
    emptyState('No job has reported timings yet: a training loop reports them with the Python client, the Rust agent, any OpenTelemetry SDK (spans) or POST /api/ingest.');
    return;
  }
  if (!jobs.some((j) => j.job === chosen)) chosen = jobs[0].job;
  picker(jobs);
  const r = await get(`/api/jobs/${encodeURIComponent(chosen)}?batches=${BATCHES}`);
  if (!r.ok || !r.json) {
    emptyState(`Job ${chosen} did not load (${r.status}): ${(r.json && r.json.error) || r.text}`);
    return;
  }
  const steps = r.json.steps || [];
  if (!steps.length) {
    emptyState(`Job ${chosen} has no timed steps yet (timings need a batch index).`);
    return;
  }
  document.getElementById('timings-empty').hidden = true;
  // Every timing, the step span that encloses the phases (listed apart in
  // the API) among them: mean duration per (timing, batch index) over ranks.
  for (const s of steps) for (const k of s.ranks) k.phases = { ...k.phases, ...(k.span || {}) };
  const seen = new Set(steps.flatMap((s) => s.ranks.flatMap((k) => Object.keys(k.phases))));
  const names = (r.json.phase_order || []).filter((p) => seen.has(p));
  for (const p of [...seen].sort()) if (!names.includes(p)) names.push(p);
  const batches = steps.map((s) => s.batch);
  const timed = steps.reduce((n, s) => n + s.ranks.reduce((m, k) => m + Object.keys(k.phases).length, 0), 0);
  const key = `${chosen}|${names.join()}|${batches.length}|${batches[batches.length - 1]}|${timed}`;
  if (key === lastKey) return; // nothing new
  lastKey = key;
  const ys = names.map((p) => steps.map((s) => {
    const vals = s.ranks.map((k) => k.phases[p]).filter((v) => v !== undefined);
    return vals.length ? vals.reduce((a, b) => a + b, 0) / vals.length : null;
  }));
  if (plot) plot.destroy();
  const box = document.getElementById('timings-chart');
  box.replaceChildren();
  plot = barChart(box, { title: `${chosen}: duration by batch index`, xLabel: 'batch', names, x: batches, ys, unit: 's' });
  const ranks = new Set(steps.flatMap((s) => s.ranks.map((k) => k.rank))).size;
  box.append(el('p', { class: 'muted' }, `${timed} timings, ${batches.length} batches, ${names.length} phases, ${ranks} rank${ranks === 1 ? '' : 's'}`));
}
