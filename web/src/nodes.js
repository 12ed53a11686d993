// Nodes: on a master, every node from /api/cluster/nodes (state, last seen,
// version, clock skew, duplicate names); on a standalone sonde the one local
// machine. A node's page adds its system metrics, its jobs and the cluster's
// decisions about it. Also the helpers the job page uses to find a node's series.
import { get, el } from './api.js';
import { TimeChart } from './live.js';
import { href } from './router.js';
import { decisionList } from './decisions.js';
import { isBusyShare } from './cpu.js';

export const LOCAL = ''; // the node of series without host.name: this sonde's own

export const nodeOf = (m) => (m.attributes && m.attributes['host.name'] != null ? String(m.attributes['host.name']) : LOCAL);

// Series of the system metric `name` on `node` (the local sonde's when `node` is its own name).
// For the CPU, only the busy share of each CPU (derived from its modes: cpu.js).
export function nodeMatch(app, node, name) {
  const local = node === app.localName || node === LOCAL;
  // Semantic-convention system.* names: the machine's, whichever plugin sampled it.
  return (m) => m.name === name
    && (name !== 'system.cpu.utilization' || isBusyShare(m))
    && (nodeOf(m) === node || (local && nodeOf(m) === LOCAL));
}

export const NODE_CHARTS = [
  { title: 'CPU', name: 'system.cpu.utilization', unit: '1', label: (m) => (m.attributes['cpu.logical_number'] == null ? 'all' : `cpu ${m.attributes['cpu.logical_number']}`) },
  { title: 'Memory', name: 'system.memory.usage', unit: 'By', label: (m) => String(m.attributes['system.memory.state'] ?? '') },
  { title: 'GPU', name: 'hw.gpu.utilization', unit: '1', label: (m) => String(m.attributes['hw.name'] ?? m.attributes['hw.id'] ?? '') },
];

const ago = (ms) => (ms == null ? '–' : ms < 1500 ? 'now' : ms < 90000 ? `${Math.round(ms / 1000)} s ago` : `${Math.round(ms / 60000)} min ago`);

export async function loadNodes(app) {
  const r = await get('/api/cluster/nodes');
  if (r.ok && r.json && Array.isArray(r.json.nodes)) return { master: true, nodes: r.json.nodes };
  // Standalone (or an agent): this machine is the only node.
  return {
    master: false,
    role: (r.json && r.json.role) || app.role,
    nodes: [{ node: app.localName, state: 'up', silent_ms: 0, last_seen_ns: Date.now() * 1e6, agent: true, version: app.version,
      plugins: app.plugins, unhealthy: [], health: 'ok', clock_skew_ms: 0, clock_skewed: false, duplicate_name: false, local: true }],
  };
}

function stateCell(n) {
  const up = n.state === 'up';
  // A glyph as well as a colour: readable in greyscale.
  return el('td', { class: `node-state ${up ? 'ok' : 'error'}` }, `${up ? '●' : '○'} ${n.state}`);
}

function flags(n) {
  const f = [];
  if (n.clock_skewed) f.push(`⚠ clock skew ${n.clock_skew_ms} ms`);
  if (n.duplicate_name) f.push(`⚠ duplicate name (${(n.instances || []).length} instances)`);
  if (n.unhealthy && n.unhealthy.length) f.push(`⚠ unhealthy: ${n.unhealthy.join(', ')}`);
  return f.join(' · ');
}

export async function showNodes(app, box, arg) {
  const [{ master, nodes, role }, dec] = await Promise.all([loadNodes(app), get('/api/decisions?plugin=sonde.cluster')]);
  const decisions = (dec.json && dec.json.decisions) || [];
  if (arg) return showNode(app, box, arg, nodes, decisions, master);
  box.replaceChildren(
    el('h2', {}, 'Nodes'),
    el('p', { class: 'muted' }, master
      ? `${nodes.length} node(s) known to this master · ${nodes.filter((n) => n.state === 'up').length} up · ${nodes.filter((n) => n.state !== 'up').length} lost`
      : `This sonde runs as ${role}: it is the only node. Start a master (--role master) and agents to see a cluster here.`),
    el('table', { class: 'nodes-table' },
      el('thead', {}, el('tr', {}, ...['node', 'state', 'last seen', 'agent', 'version', 'plugins', 'clock skew', 'flags', 'reports'].map((h) => el('th', {}, h)))),
      el('tbody', {}, ...nodes.map((n) => el('tr', { 'data-node': n.node, 'data-state': n.state, class: n.clock_skewed || n.duplicate_name || n.state !== 'up' ? 'warn' : '' },
        el('td', {}, el('a', { href: href('nodes', n.node) }, n.node || '(unnamed)')),
        stateCell(n),
        el('td', {}, ago(n.silent_ms)),
        el('td', {}, n.agent ? 'sonde agent' : 'named by a job'),
        el('td', {}, n.version || '–'),
        el('td', {}, String((n.plugins || []).length)),
        el('td', { class: n.clock_skewed ? 'error' : '' }, n.clock_skew_ms == null ? '–' : `${n.clock_skew_ms} ms`),
        el('td', { class: 'flags' }, flags(n)),
        el('td', {}, n.reports == null ? '–' : String(n.reports)))))),
    el('h3', {}, 'Cluster decisions'),
    decisionList(decisions, 20, master ? 'No cluster decisions: no node was lost, came back, clashed by name or drifted.' : 'None (standalone).'));
}

function showNode(app, box, name, nodes, decisions, master) {
  const n = nodes.find((x) => x.node === name);
  if (app.nodeCharts) { for (const c of app.nodeCharts) c.destroy(); }
  app.nodeCharts = [];
  if (!n) {
    box.replaceChildren(el('h2', {}, `Node ${name}`), el('p', { class: 'empty' },
      master ? `No node named ${name} has reported to this master.` : `This standalone sonde knows only its own machine (${app.localName}).`),
    el('p', {}, el('a', { href: href('nodes') }, 'all nodes')));
    return;
  }
  const jobs = (app.jobs || []).filter((j) => j.nodes.includes(name) || (n.local && !j.nodes.length));
  const charts = el('div', { class: 'charts' });
  box.replaceChildren(
    el('p', {}, el('a', { href: href('nodes') }, '← all nodes')),
    el('h2', {}, `Node ${name}`),
    el('dl', { class: 'facts' },
      ...[['state', `${n.state === 'up' ? '●' : '○'} ${n.state}`], ['last seen', ago(n.silent_ms)], ['version', n.version || '–'],
        ['agent', n.agent ? 'a sonde agent runs here' : 'named only by what jobs sent'], ['health', n.health || '–'],
        ['clock skew', n.clock_skew_ms == null ? '–' : `${n.clock_skew_ms} ms${n.clock_skewed ? ' (over the limit)' : ''}`],
        ['duplicate name', n.duplicate_name ? `yes: ${(n.instances || []).join(', ')}` : 'no'],
        ['plugins', (n.plugins || []).join(', ') || '–'], ['reports', n.reports == null ? '–' : `${n.reports} (${n.rows} rows)`]]
        .flatMap(([k, v]) => [el('dt', {}, k), el('dd', { 'data-fact': k }, v)])),
    el('h3', {}, 'System metrics'), charts,
    el('h3', {}, 'Jobs on this node'),
    jobs.length ? el('ul', {}, ...jobs.map((j) => el('li', {}, el('a', { href: href('jobs', j.job) }, j.job), ` (${j.kinds.join(', ')})`)))
      : el('p', { class: 'muted' }, 'No job has reported from this node.'),
    el('h3', {}, 'Decisions about this node'),
    decisionList(decisions.filter((d) => d.subject === name), 20, 'None.'));
  for (const c of NODE_CHARTS) {
    app.nodeCharts.push(new TimeChart(charts, app.feed, { title: `${c.title} · ${name}`, unit: c.unit, match: nodeMatch(app, n.local ? LOCAL : name, c.name), label: c.label, height: 160 }));
  }
}
