// The paramserver plugin's panel: every incident's recovery timeline (the
// seed's five phases as one bar, then its table: Phase | From | To | Time Cost
// | Percentage) and the clocks of all workers per job (clock, staleness,
// blocked time, dead / left / straggler). Reads /api/plugins/<name>/incidents
// and /clocks; a section is rebuilt only when its data changed.

const COLORS = ['#4e79a7', '#e15759', '#f28e2b', '#76b7b2', '#59a14f'];
const last = new WeakMap(); // box -> {incidents, clocks} signatures

const ms = (v) => (v == null ? '-' : `${Math.round(v).toLocaleString('en-US')}ms`);
const pct = (v) => (v == null ? '-' : `${Math.round(v)}%`);
const secs = (v) => (v == null ? '-' : v < 1000 ? `${Math.round(v)} ms` : `${(v / 1000).toFixed(2)} s`);

function timeline(el, inc) {
  const phases = inc.phases;
  const total = phases.reduce((s, p) => s + (p.duration_ms || 0), 0);
  const bar = el('div', { class: 'ps-timeline', 'data-incident': inc.id, style: 'display:flex;height:22px;margin:4px 0;border:1px solid #ccc' });
  for (const p of phases) {
    if (!p.duration_ms || !total) continue;
    bar.append(el('div', {
      'data-phase': p.phase,
      title: `phase ${p.phase}: ${p.from} → ${p.to}, ${ms(p.duration_ms)}`,
      style: `flex:${p.duration_ms} 0 0;background:${COLORS[p.phase - 1]};color:#fff;font-size:11px;overflow:hidden;white-space:nowrap;padding-left:2px`,
    }, `${p.phase}`));
  }
  const table = el('table', { class: 'ps-phases', 'data-incident': inc.id },
    el('tr', {}, ...['Phase', 'From', 'To', 'Time Cost', 'Percentage'].map((h) => el('th', {}, h))),
    ...phases.map((p) => el('tr', { 'data-phase': p.phase },
      el('td', {}, el('span', { style: `display:inline-block;width:10px;height:10px;background:${COLORS[p.phase - 1]};margin-right:4px` }), `${p.phase}`),
      el('td', {}, p.from), el('td', {}, p.to), el('td', {}, ms(p.duration_ms)), el('td', {}, pct(p.percentage)))));
  const lat = inc.detection_latency_ms || {};
  const note = el('p', { class: 'muted' },
    `detection latency ${secs(lat.from_last_heartbeat)} after the last heartbeat` +
    (lat.from_kill != null ? `, ${secs(lat.from_kill)} after the kill` : '') +
    (inc.total_ms != null ? `; recovery total ${secs(inc.total_ms)}` : ''));
  return el('div', { class: 'ps-incident' },
    el('h4', {}, `Incident ${inc.id}: ${inc.job} / ${inc.process}${inc.complete ? '' : ' (in progress)'}`),
    bar, table, note);
}

function clockTable(el, job) {
  const max = Math.max(1, job.max_clock || 0);
  const state = (w) => (w.left ? 'left (no data)' : w.dead ? 'dead' : w.straggler ? 'straggler' : w.waiting_since_ns ? 'blocked' : 'running');
  return el('div', { class: 'ps-clocks', 'data-job': job.job },
    el('h4', {}, `Clocks: ${job.job} (${job.model.toUpperCase()}${job.staleness_bound != null ? `, staleness bound ${job.staleness_bound}` : ''}; min ${job.min_clock ?? '-'}, max ${job.max_clock ?? '-'})`),
    el('table', {},
      el('tr', {}, ...['worker', 'clock', '', 'staleness', 'blocked', 'caused others to wait', 'state'].map((h) => el('th', {}, h))),
      ...job.workers.map((w) => el('tr', { 'data-worker': w.worker, 'data-clock': w.clock, 'data-staleness': w.staleness ?? '' },
        el('td', {}, w.worker), el('td', {}, `${w.clock}`),
        el('td', { style: 'width:200px' }, el('div', { style: `height:10px;width:${Math.round((w.clock / max) * 100)}%;background:${w.dead ? '#e15759' : w.straggler ? '#f28e2b' : '#4e79a7'}` })),
        el('td', {}, w.staleness == null ? '-' : `${w.staleness}`), el('td', {}, secs(w.blocked_ms)),
        el('td', {}, secs(w.caused_blocked_ms)), el('td', { class: 'ps-state' }, state(w)))),
      ...job.servers.map((s) => el('tr', { 'data-server': s.server }, el('td', {}, s.server), el('td', {}, `${s.clock}`), el('td', { colspan: 5, class: 'muted' }, 'server clock')))));
}

export async function render(box, { name, get, el }) {
  const [inc, clk] = await Promise.all([get(`/api/plugins/${name}/incidents`), get(`/api/plugins/${name}/clocks`)]);
  if (!box.firstChild) {
    box.append(el('div', { class: 'ps-incidents' }), el('div', { class: 'ps-clock-jobs' }));
  }
  const seen = last.get(box) || {};
  const incidents = (inc.json && inc.json.incidents) || [];
  const sigI = JSON.stringify(incidents);
  if (sigI !== seen.incidents) {
    box.querySelector('.ps-incidents').replaceChildren(el('h3', {}, 'Recovery incidents'), ...(incidents.length
      ? incidents.slice(-5).reverse().map((i) => timeline(el, i))
      : [el('p', { class: 'muted' }, 'No incidents: no process has failed its heartbeats or been reported killed.')]));
    seen.incidents = sigI;
  }
  const jobs = (clk.json && clk.json.jobs) || [];
  // Blocked time of an open wait grows every refresh: compare without it.
  const sigC = JSON.stringify(jobs.map((j) => ({ ...j, workers: j.workers.map((w) => ({ ...w, blocked_ms: Math.round(w.blocked_ms / 100) })) })));
  if (sigC !== seen.clocks) {
    box.querySelector('.ps-clock-jobs').replaceChildren(...(jobs.length
      ? jobs.map((j) => clockTable(el, j))
      : [el('p', { class: 'muted' }, 'No clocks reported yet (progress named "clock").')]));
    seen.clocks = sigC;
  }
  last.set(box, seen);
}
