// The mpi plugin's panel: the statistical MPI state profile of one job (the
// one updated last, or the one picked): per rank a bar of time not in MPI /
// MPI work / MPI stall with the stall share, the imbalance across ranks, the
// call sites that took most MPI time (Work and Stall), and the profile as
// folded stacks to download (speedscope, flamegraph.pl, inferno).
// Data: GET /api/plugins/mpi/jobs and /api/plugins/mpi/profile?job=.

const STATES = [['not_in_mpi_s', 'not in MPI'], ['work_s', 'MPI work'], ['stall_s', 'MPI stall']];
const pct = (x) => `${(x * 100).toFixed(1)}%`;
const secs = (s) => (s < 1 ? `${(s * 1000).toFixed(0)} ms` : `${s.toFixed(2)} s`);

let ui = null; // the panel's parts, built once per container

// The panel's own styles (kept here so the shared stylesheet stays the dashboard's).
const CSS = `
.mpi-controls { margin: 0.5em 0; }
.mpi-ranks, .mpi-sites { font-size: 0.9em; margin: 0.3em 0 0.8em; }
.mpi-bar-cell { width: 40%; min-width: 16em; }
.mpi-bar { display: flex; height: 14px; border-radius: 3px; overflow: hidden; background: #eee; }
.mpi-seg { display: block; height: 100%; }
.mpi-not_in_mpi_s { background: #9ab8d8; } .mpi-work_s { background: #e8b04a; } .mpi-stall_s { background: #d0554b; }
.mpi-key { padding: 0 0.5em; margin-right: 0.8em; border-radius: 3px; color: #fff; }
.mpi-site { font-family: ui-monospace, monospace; font-size: 0.9em; }`;

function build(box, el) {
  if (!document.getElementById('mpi-panel-style')) document.head.append(el('style', { id: 'mpi-panel-style' }, CSS));
  const select = el('select', { class: 'mpi-job', 'aria-label': 'MPI job' });
  const parts = {
    box,
    select,
    empty: el('p', { class: 'empty mpi-empty' }, 'No MPI samples yet: run an MPI job with the probe (LD_PRELOAD=target/probes/libsonde_mpi.so, see probes/mpi/README.md).'),
    head: el('div', { class: 'mpi-head' }),
    link: el('a', { class: 'mpi-folded', download: '' }, 'folded stacks'),
    ranks: el('table', { class: 'mpi-ranks' }),
    sites: el('table', { class: 'mpi-sites' }),
    body: el('div', { class: 'mpi-body' }),
  };
  const legend = el('p', { class: 'mpi-legend muted' },
    ...STATES.map(([k, name]) => el('span', { class: `mpi-key mpi-${k}` }, name)));
  parts.body.append(el('div', { class: 'mpi-controls' }, 'job ', select, ' ', parts.link), parts.head, legend,
    parts.ranks, el('h4', {}, 'Call sites by MPI time'), parts.sites);
  box.replaceChildren(parts.empty, parts.body);
  return parts;
}

function rankRow(el, r) {
  const total = r.not_in_mpi_s + r.work_s + r.stall_s || 1;
  const bar = el('div', { class: 'mpi-bar' },
    ...STATES.map(([k, name]) => el('span', {
      class: `mpi-seg mpi-${k}`, style: `width:${(100 * r[k] / total).toFixed(2)}%`, title: `${name}: ${secs(r[k])}`,
    })));
  return el('tr', { 'data-rank': r.rank, 'data-stall-share': r.stall_share.toFixed(4) },
    el('td', {}, `rank ${r.rank}`), el('td', { class: 'mpi-bar-cell' }, bar),
    el('td', {}, secs(r.not_in_mpi_s)), el('td', {}, secs(r.work_s)), el('td', {}, secs(r.stall_s)),
    el('td', { class: 'mpi-share' }, pct(r.stall_share)), el('td', { class: 'muted' }, `${r.threads.length}`));
}

export async function render(box, { get, el, job }) {
  if (!ui || ui.box !== box) ui = build(box, el);
  const jobs = await get('/api/plugins/mpi/jobs');
  const list = (jobs.ok && jobs.json.jobs) || [];
  ui.empty.hidden = list.length > 0;
  ui.body.hidden = list.length === 0;
  if (!list.length) return;
  // Keep the user's pick; default to the job updated last.
  const names = list.map((j) => j.job);
  const latest = [...list].sort((a, b) => b.last_ns - a.last_ns)[0].job;
  const picked = job && names.includes(job) && !ui.select.dataset.userPicked ? job
    : names.includes(ui.select.value) && ui.select.dataset.userPicked ? ui.select.value : latest;
  if (ui.select.options.length !== names.length || [...ui.select.options].some((o, i) => o.value !== names[i])) {
    ui.select.replaceChildren(...names.map((n) => el('option', { value: n }, n)));
    ui.select.onchange = () => { ui.select.dataset.userPicked = '1'; render(box, { get, el }); };
  }
  ui.select.value = picked;
  const q = `job=${encodeURIComponent(picked)}`;
  ui.link.href = `/api/plugins/mpi/folded?${q}`;
  ui.link.setAttribute('download', `mpi-${picked}.folded`);
  const r = await get(`/api/plugins/mpi/profile?${q}`);
  if (!r.ok) { ui.head.replaceChildren(el('p', { class: 'error' }, `profile: ${(r.json && r.json.error) || r.status}`)); return; }
  const p = r.json;
  const imb = p.imbalance;
  ui.box.dataset.job = p.job;
  ui.head.replaceChildren(el('p', { class: 'mpi-summary' },
    `${p.ranks.length} rank(s) sampled${p.world_size ? ` of ${p.world_size}` : ''}; `,
    `stall ${pct(p.stall_s / ((p.not_in_mpi_s + p.work_s + p.stall_s) || 1))} of sampled time; `,
    el('span', { class: 'mpi-imbalance' }, `stall max/mean ${imb.stall_max_over_mean.toFixed(2)} (rank ${imb.stall_max_rank} waits most)`),
    `; load balance ${pct(imb.load_balance)}`,
    p.dropped_samples ? el('span', { class: 'error' }, `; ${p.dropped_samples} samples dropped (max_bins)`) : null));
  ui.ranks.replaceChildren(
    el('tr', {}, ...['rank', 'time by state', 'not in MPI', 'MPI work', 'MPI stall', 'stall share', 'threads'].map((h) => el('th', {}, h))),
    ...p.ranks.map((x) => rankRow(el, x)));
  ui.sites.replaceChildren(
    el('tr', {}, ...['function', 'call site', 'MPI work', 'MPI stall', 'ranks', 'stalls most'].map((h) => el('th', {}, h))),
    ...p.callsites.slice(0, 12).map((s) => el('tr', { 'data-function': s.function },
      el('td', {}, s.function), el('td', { class: 'mpi-site' }, s.callsite || '(unknown)'),
      el('td', {}, secs(s.work_s)), el('td', {}, secs(s.stall_s)), el('td', {}, `${s.ranks}`),
      el('td', {}, s.max_stall_s > 0 ? `rank ${s.max_stall_rank} (${secs(s.max_stall_s)})` : ''))));
}
