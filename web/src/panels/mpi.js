// The mpi plugin's panel: the statistical MPI state profile of one job (the
// one updated last, or the one picked): per rank a bar of time not in MPI /
// MPI work / MPI stall with the stall share, the imbalance across ranks, the
// call sites that took most MPI time (Work and Stall), a flame graph of stall
// time by call stack for one rank or all, and the profile to download as
// folded stacks (speedscope, flamegraph.pl, inferno), pprof and a Perfetto trace.
// Data: GET /api/plugins/mpi/jobs, /profile?job=, /flame?job=&state=stall&rank=.

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
.mpi-site { font-family: ui-monospace, monospace; font-size: 0.9em; }
.mpi-flame { position: relative; width: 100%; margin: 0.3em 0 1em; font: 12px ui-monospace, monospace; }
.mpi-frame { position: absolute; height: 17px; line-height: 17px; box-sizing: border-box; border: 1px solid #fff;
  padding: 0 3px; overflow: hidden; white-space: nowrap; text-overflow: ellipsis; color: #1b1b1b; border-radius: 2px; }`;

const FRAME_H = 18;

// Stall in reds, a stable shade per frame name, so one function reads the same everywhere.
function shade(name) {
  let h = 0;
  for (const c of name) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${(h % 30) + 0}, ${70 + (h % 20)}%, ${62 + (h % 12)}%)`;
}

// A flame graph (root at the bottom) of the tree {name, value, children} as boxes
// positioned in percent of the width; frames thinner than 0.3 % are left out.
function drawFlame(box, el, tree) {
  const nodes = [];
  let depth = 0;
  const walk = (n, x, d) => {
    depth = Math.max(depth, d + 1);
    nodes.push({ n, x, d });
    let cx = x;
    for (const c of n.children) {
      if (c.value / tree.value >= 0.003) walk(c, cx, d + 1);
      cx += c.value / tree.value;
    }
  };
  if (tree.value > 0) walk(tree, 0, 0);
  box.style.height = `${depth * FRAME_H}px`;
  box.replaceChildren(...nodes.map(({ n, x, d }) => el('div', {
    class: 'mpi-frame',
    'data-frame': n.name,
    title: `${n.name}: ${secs(n.value)} stalled (${pct(n.value / tree.value)})`,
    style: `left:${(100 * x).toFixed(3)}%;width:${(100 * n.value / tree.value).toFixed(3)}%;bottom:${d * FRAME_H}px;background:${d ? shade(n.name) : '#c9483f'};${d ? '' : 'color:#fff;'}`,
  }, d ? n.name : `all stall: ${secs(n.value)}`)));
}

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
    flameRank: el('select', { class: 'mpi-flame-rank', 'aria-label': 'rank of the flame graph' }),
    flame: el('div', { class: 'mpi-flame' }),
    flameNote: el('p', { class: 'muted mpi-flame-note' }),
    pprof: el('a', { class: 'mpi-pprof', download: '' }, 'pprof'),
    trace: el('a', { class: 'mpi-trace', download: '' }, 'Perfetto trace'),
    body: el('div', { class: 'mpi-body' }),
  };
  const legend = el('p', { class: 'mpi-legend muted' },
    ...STATES.map(([k, name]) => el('span', { class: `mpi-key mpi-${k}` }, name)));
  parts.body.append(el('div', { class: 'mpi-controls' }, 'job ', select, ' ', parts.link, ' · ', parts.pprof, ' · ', parts.trace),
    parts.head, legend, parts.ranks,
    el('h4', {}, 'MPI stall by call stack ', parts.flameRank), parts.flameNote, parts.flame,
    el('h4', {}, 'Call sites by MPI time'), parts.sites);
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
  ui.pprof.href = `/api/plugins/mpi/pprof?${q}`;
  ui.pprof.setAttribute('download', `mpi-${picked}.pb.gz`);
  ui.trace.href = `/api/plugins/mpi/trace?${q}`;
  ui.trace.setAttribute('download', `mpi-${picked}.trace.json`);
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
  // The flame graph's rank: all, or one the user picked (kept while the job has it).
  const rankNames = ['all', ...p.ranks.map((x) => String(x.rank))];
  if (ui.flameRank.options.length !== rankNames.length || [...ui.flameRank.options].some((o, i) => o.value !== rankNames[i])) {
    const keep = ui.flameRank.value;
    ui.flameRank.replaceChildren(...rankNames.map((n) => el('option', { value: n }, n === 'all' ? 'all ranks' : `rank ${n}`)));
    ui.flameRank.value = rankNames.includes(keep) ? keep : 'all';
    ui.flameRank.onchange = () => render(box, { get, el });
  }
  const f = await get(`/api/plugins/mpi/flame?${q}&state=stall&rank=${ui.flameRank.value}`);
  if (f.ok) {
    ui.flame.dataset.rank = ui.flameRank.value;
    ui.flameNote.textContent = f.json.tree.value > 0 ? 'root at the bottom, the MPI call on top; width is stall time'
      : 'no MPI stall sampled here';
    drawFlame(ui.flame, el, f.json.tree);
  }
  ui.sites.replaceChildren(
    el('tr', {}, ...['function', 'call site', 'MPI work', 'MPI stall', 'ranks', 'stalls most'].map((h) => el('th', {}, h))),
    ...p.callsites.slice(0, 12).map((s) => el('tr', { 'data-function': s.function },
      el('td', {}, s.function), el('td', { class: 'mpi-site' }, s.callsite || '(unknown)'),
      el('td', {}, secs(s.work_s)), el('td', {}, secs(s.stall_s)), el('td', {}, `${s.ranks}`),
      el('td', {}, s.max_stall_s > 0 ? `rank ${s.max_stall_rank} (${secs(s.max_stall_s)})` : ''))));
}
