// Plugin decisions as a person reads them: one sentence (who decided what
// about whom, and why), the body's fields laid out as a definition list, and
// the raw JSON only behind a closed "details" toggle.
import { el } from './api.js';

const ago = (ns) => {
  const s = (Date.now() - ns / 1e6) / 1000;
  if (!isFinite(s)) return '';
  if (s < 1) return 'just now';
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
};

// Sentences for the kinds whose meaning is known; others read "<kind> <subject>".
const SENTENCES = {
  'node-lost': (d) => `Node ${d.subject} was lost`,
  'node-back': (d) => `Node ${d.subject} is back`,
  'duplicate-node-name': (d) => `Two or more processes report as node ${d.subject}`,
  'clock-skew': (d) => {
    const ms = d.body && (d.body.clock_skew_ms ?? d.body.skew_ms);
    return `Node ${d.subject}'s clock is off${ms != null ? ` by ${ms} ms` : ''}`;
  },
};

const words = (k) => String(k).replace(/[_-]+/g, ' ');

export function sentence(d) {
  // A finding's reason is already a whole sentence about its job and subject:
  // prefixing "<kind> <subject>:" would say the subject twice.
  if (d.finding && d.reason) return d.reason.charAt(0).toUpperCase() + d.reason.slice(1);
  const known = SENTENCES[d.kind];
  let s = known ? known(d) : `${words(d.kind || 'decision')}${d.subject ? ` ${d.subject}` : ''}`;
  s = s.charAt(0).toUpperCase() + s.slice(1);
  return d.reason ? `${s}: ${d.reason}` : s;
}

function scalar(v, key = '') {
  if (v === null || v === undefined) return '–';
  if (typeof v === 'number' && /(^|_)ns$/.test(key) && v > 1e15) return new Date(v / 1e6).toLocaleString('en-GB');
  if (typeof v === 'number' && /(^|_)ms$/.test(key)) return `${v.toLocaleString('en-US')} ms`;
  if (typeof v === 'number' && /(^|_)s$/.test(key)) return `${+v.toPrecision(4)} s`;
  if (typeof v === 'number') return Number.isInteger(v) ? v.toLocaleString('en-US') : String(+v.toPrecision(4));
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  return String(v);
}

// A small object on one line: "count 4, cpu 8"; deeper parts only counted.
function compact(o) {
  return Object.entries(o).map(([k, x]) => (x && typeof x === 'object'
    ? `${words(k)} (${Array.isArray(x) ? x.length : Object.keys(x).length})` : `${words(k)} ${scalar(x, k)}`)).join(', ');
}

// Flattens a body into [label, text] pairs: nested objects by dotted keys (two
// levels), lists of plain values joined, lists of objects counted.
export function fields(body, prefix = '', depth = 0, out = []) {
  if (body === null || typeof body !== 'object') {
    if (body !== undefined && body !== null && body !== '') out.push([prefix || 'value', scalar(body)]);
    return out;
  }
  for (const [k, v] of Object.entries(body)) {
    const key = prefix ? `${prefix} ${words(k)}` : words(k);
    if (Array.isArray(v)) {
      if (v.every((x) => x === null || typeof x !== 'object')) out.push([key, v.length ? v.map((x) => scalar(x, k)).join(', ') : 'none']);
      else if (v.length <= 6 && v.every((x) => x && typeof x === 'object' && !Array.isArray(x))) out.push([key, v.map(compact).join('; ')]);
      else out.push([key, `${v.length} item${v.length === 1 ? '' : 's'} (see details)`]);
    } else if (v && typeof v === 'object') {
      if (depth < 1) fields(v, key, depth + 1, out);
      else if (!Object.keys(v).length) out.push([key, 'none']);
      else out.push([key, Object.entries(v).map(([k2, x]) => (x && typeof x === 'object' ? `${words(k2)}: ${compact(x)}` : `${words(k2)} ${scalar(x, k2)}`)).join('; ')]);
    } else {
      out.push([key, scalar(v, k)]);
    }
  }
  return out;
}

export function decisionItem(d) {
  // The reason is already in the sentence.
  const f = fields(d.body).filter(([, v]) => v !== d.reason).slice(0, 16);
  return el('li', { class: 'decision', 'data-kind': d.kind, 'data-plugin': d.plugin, 'data-key': `${d.plugin}/${d.kind}/${d.subject}` },
    el('p', { class: 'decision-sentence' },
      el('span', { class: 'decision-kind' }, words(d.kind)), ' ', sentence(d),
      el('span', { class: 'muted' }, ` · ${d.plugin} · ${ago(d.time_ns)}`)),
    f.length ? el('dl', { class: 'decision-fields' }, ...f.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)])) : null,
    d.body !== undefined && d.body !== null
      ? el('details', { class: 'decision-raw' }, el('summary', {}, 'details'), el('pre', {}, JSON.stringify(d.body, null, 2)))
      : null);
}

// Replaces `box`'s children with `children` (a list of decisions among
// them), keeping open the "details" the reader had opened: the views refresh
// every 2 s, and a rebuilt list would close them again.
export function replaceDecisions(box, ...children) {
  const open = new Set([...box.querySelectorAll('.decision')]
    .filter((li) => li.querySelector('details.decision-raw')?.open)
    .map((li) => li.dataset.key));
  box.replaceChildren(...children);
  for (const li of box.querySelectorAll('.decision')) {
    if (open.has(li.dataset.key)) li.querySelector('details.decision-raw').open = true;
  }
}

// The newest first, at most `limit`.
export function decisionList(list, limit = 20, emptyText = 'No decisions.') {
  if (!list.length) return el('p', { class: 'muted' }, emptyText);
  return el('ul', { class: 'decision-list' }, ...list.slice(-limit).reverse().map(decisionItem));
}
