// A job's findings as the job page opens with them: the headline finding's
// sentence (why this job is slow) with its culprit linked and its evidence a
// click away as a table, then the other findings that still hold, then the
// ones that ended. Findings are whatever plugins published about this job
// (GET /api/jobs/{job} .findings): the page names no plugin.
import { el } from './api.js';
import { fields } from './decisions.js';
import { href } from './router.js';

const open = (f) => f.finding && !f.finding.ended;

// Where a finding's subject lives in the dashboard, if anywhere.
function culpritHref(job, f) {
  const about = f.finding && f.finding.about;
  const id = f.finding && f.finding.id;
  if (about === 'rank' && id !== '') return href('jobs', job, { rank: id });
  if ((about === 'node' || about === 'link') && id) return href('nodes', id);
  return null;
}

// The sentence with the first mention of its subject ("rank 2", the node's
// name) made a link to it.
function sentence(job, f) {
  const text = f.reason || f.kind;
  const link = culpritHref(job, f);
  const about = f.finding && f.finding.about;
  const id = f.finding && f.finding.id;
  const words = about === 'rank' ? `rank ${id}` : id;
  const at = link && words ? text.indexOf(words) : -1;
  const first = text.charAt(0).toUpperCase() + text.slice(1);
  if (at < 0) return [first];
  const before = first.slice(0, at);
  return [before, el('a', { href: link, class: 'culprit' }, first.slice(at, at + words.length)), first.slice(at + words.length)];
}

function evidence(f) {
  // What is unknown is left out, not shown as a dash.
  const rows = fields(f.body).filter(([, v]) => v !== f.reason && v !== '–');
  if (!rows.length) return null;
  return el('details', { class: 'evidence' }, el('summary', {}, 'evidence'),
    el('table', { class: 'evidence-table' }, el('tbody', {}, ...rows.map(([k, v]) => el('tr', {}, el('th', { scope: 'row' }, k), el('td', {}, v))))));
}

function item(job, f) {
  return el('li', { class: 'finding', 'data-kind': f.kind, 'data-about': f.finding ? `${f.finding.about}:${f.finding.id}` : '' },
    el('span', {}, ...sentence(job, f)), evidence(f));
}

// The rank a headline finding names as the job's culprit, or null.
export function culpritRank(findings) {
  const h = (findings || []).find((f) => open(f) && f.finding.headline && f.finding.about === 'rank');
  return h ? +h.finding.id : null;
}

// The diagnosis section: headline first, then what else holds, then history.
export function diagnosis(job) {
  const all = Array.isArray(job.findings) ? job.findings : [];
  const headline = all.find((f) => open(f) && f.finding.headline);
  const others = all.filter((f) => f !== headline && (open(f) || !f.finding));
  const ended = all.filter((f) => f.finding && f.finding.ended && f !== headline);
  const box = el('section', { class: 'diagnosis', id: 'diagnosis', 'aria-label': 'diagnosis' });
  box.append(headline
    ? el('p', { class: 'diagnosis-sentence', 'data-about': `${headline.finding.about}:${headline.finding.id}` }, ...sentence(job.job, headline))
    : el('p', { class: 'diagnosis-none muted' }, all.length
      ? 'Nothing holds this job back now.'
      : (job.kinds || []).includes('training') || (job.steps || []).length
        ? 'No diagnosis yet: it comes once a diagnosis plugin has judged enough steps of every rank.'
        : 'No findings about this job.'));
  if (headline) { const e = evidence(headline); if (e) box.append(e); }
  if (others.length) box.append(el('ul', { class: 'finding-list' }, ...others.slice(0, 12).map((f) => item(job.job, f))));
  if (ended.length) {
    box.append(el('details', { class: 'findings-ended' }, el('summary', {}, `${ended.length} earlier finding${ended.length === 1 ? '' : 's'}`),
      el('ul', { class: 'finding-list' }, ...ended.slice(0, 20).map((f) => item(job.job, f)))));
  }
  return box;
}
