// The dlrover plugin's panel: the job's nodes and what they use, the training
// speed, the current resource plan and why (or why there is none), and shard
// progress per dataset. One GET of the plugin's /overview per refresh; each
// section keeps its element and only its content is replaced.

const fmt = (v, digits = 1) => (v == null || !isFinite(v) ? '–' : (+v).toFixed(digits));
const mib = (v) => (v == null || !isFinite(v) ? '–' : v >= 1024 ? `${(v / 1024).toFixed(1)} GiB` : `${v.toFixed(0)} MiB`);
const age = (s) => (s == null ? '–' : s < 1 ? 'now' : `${s.toFixed(0)} s ago`);

function section(box, el, key, title) {
  let s = box.querySelector(`[data-dlrover=${key}]`);
  if (!s) {
    s = el('div', { class: 'dlrover-section', 'data-dlrover': key }, el('h4', {}, title), el('div', { class: 'body' }));
    box.append(s);
  }
  return s.querySelector('.body');
}

function groups(plan) {
  if (!plan) return '';
  const parts = Object.entries(plan.groups || {}).map(([t, g]) => `${t}: ${g.count} × ${fmt(g.cpu)} CPU, ${mib(g.memory_mib)}`);
  parts.push(...Object.entries(plan.nodes || {}).map(([n, r]) =>
    `${n} → ${r.cpu ? `${fmt(r.cpu)} CPU` : ''}${r.cpu && r.memory_mib ? ', ' : ''}${r.memory_mib ? mib(r.memory_mib) : ''}`));
  return parts.join('; ');
}

// What a node was given; 0 means unknown.
const given = (n, k) => (n.config && n.config[k] > 0 ? n.config[k] : null);

function nodesTable(el, nodes) {
  const head = el('tr', {}, ...['node', 'type', 'status', 'CPU used / given', 'memory used / given', 'GPU', 'heartbeat', 'step', 'flags']
    .map((h) => el('th', {}, h)));
  const rows = nodes.map((n) => {
    const gpu = (n.gpus || []).map((g) => `${(g.utilization * 100).toFixed(0)}% ${mib(g.used_mib)}`).join(', ');
    const flags = [n.straggler ? 'straggler' : '', n.hung ? 'hung' : '', n.exit_reason || ''].filter(Boolean).join(' ');
    return el('tr', { 'data-node': n.name, 'data-status': n.status, 'data-type': n.type || '', class: n.straggler ? 'warn' : '' },
      el('td', {}, n.name),
      el('td', {}, n.type || '?'),
      el('td', { class: `state ${n.status}` }, n.status),
      el('td', {}, `${fmt(n.cpu, 2)} / ${fmt(given(n, 'cpu'), 0)}`),
      el('td', {}, `${mib(n.memory_mib)} / ${mib(given(n, 'memory_mib'))}`),
      el('td', {}, gpu || '–'),
      el('td', {}, age(n.last_heartbeat_age_s)),
      el('td', {}, n.median_step_s == null ? '–' : `${(n.median_step_s * 1000).toFixed(0)} ms`),
      el('td', { class: 'flags' }, flags));
  });
  return el('table', { class: 'dlrover-nodes' }, head, ...rows);
}

function datasetRow(el, d) {
  const pct = d.total_records ? (100 * d.done_records) / d.total_records : 0;
  const epoch = d.epoch ? `epoch ${d.epoch}/${d.params.num_epochs}` : 'not started';
  return el('div', { class: 'dlrover-dataset', 'data-dataset': d.dataset_name, 'data-done': d.done_records, 'data-total': d.total_records,
    'data-dead-letter': d.dead_letter, 'data-completed': String(d.completed) },
    el('div', {}, el('b', {}, d.dataset_name), ` ${epoch}${d.sub_epochs > 1 ? ` (sub-epoch ${d.sub_epoch}/${d.sub_epochs})` : ''} · `,
      `${d.done_records} of ${d.total_records} records (${pct.toFixed(1)}%) · TODO ${d.todo} · DOING ${d.doing} · done ${d.done_shards} shards`,
      d.requeued ? ` · re-queued ${d.requeued}` : '',
      d.dead_letter ? el('span', { class: 'error' }, ` · dead letters ${d.dead_letter}`) : '',
      d.completed ? el('span', { class: 'ok' }, ' · completed') : ''),
    el('div', { class: 'bar', style: 'background:#e6e6e6;height:8px;border-radius:4px;overflow:hidden;margin:2px 0 8px' },
      el('div', { class: 'fill', style: `background:#3a8f5c;height:100%;width:${pct.toFixed(1)}%` })));
}

export async function render(box, { name, get, el }) {
  const r = await get(`/api/plugins/${name}/overview`);
  if (!r.ok || !r.json) {
    box.replaceChildren(el('p', { class: 'error' }, `dlrover overview unavailable (${r.status})`));
    return;
  }
  const o = r.json;
  box.querySelector(':scope > p.error')?.remove();
  const summary = section(box, el, 'summary', 'Training');
  summary.replaceChildren(el('p', { 'data-speed': o.speed },
    `${o.workers} training node(s) running · global step ${o.global_step == null ? '–' : o.global_step} · `,
    `speed ${fmt(o.speed, 2)} steps/s · ${o.stats_records} runtime records · strategy ${o.strategy}`,
    o.stragglers.length ? el('span', { class: 'error' }, ` · stragglers: ${o.stragglers.join(', ')}`) : ''));

  section(box, el, 'nodes', 'Nodes').replaceChildren(o.nodes.length
    ? nodesTable(el, o.nodes) : el('p', { class: 'muted' }, 'No nodes yet: samples, heartbeats or shard requests create them.'));

  const plan = o.plan;
  const latest = plan.latest;
  section(box, el, 'plan', 'Resource plan').replaceChildren(
    el('p', { 'data-plan-kind': latest ? latest.kind : '' },
      latest ? el('b', {}, `#${latest.id} ${latest.kind}`) : 'no plan yet',
      latest ? `: ${groups(latest.plan)}` : ''),
    latest ? el('p', { class: 'reason' }, `why: ${latest.reason}`) : '',
    latest && latest.adjustments.length ? el('p', { class: 'muted' }, `adjusted: ${latest.adjustments.join('; ')}`) : '',
    el('p', { class: 'muted', 'data-stage': plan.stage },
      `stage ${plan.stage} · auto-scaling ${plan.started ? `started (${plan.started_reason})` : 'not started'}`,
      plan.target_workers != null ? ` · target ${plan.target_workers} workers` : '',
      plan.why_no_plan ? ` · no new plan: ${plan.why_no_plan}` : ''));

  section(box, el, 'shards', 'Shards').replaceChildren(...(o.datasets.length
    ? o.datasets.map((d) => datasetRow(el, d)) : [el('p', { class: 'muted' }, 'No dataset registered.')]));

  section(box, el, 'events', 'Failures and stragglers').replaceChildren(o.events.length
    ? el('ul', {}, ...o.events.map((e) => el('li', { 'data-event': e.kind }, `${e.kind} ${e.subject}: ${e.reason}`)))
    : el('p', { class: 'muted' }, 'None.'));
}
