// The config editor: the running config as JSON, applied whole (PUT) or in
// part (PATCH from the quick form); a refusal shows each key and reason.
import { call, get, el } from './api.js';

let dirty = false;
// Edits so far: a load answered after the text was edited must not overwrite
// the edit (an apply's reload, slow on a busy host, landing on new typing).
let edits = 0;

export async function loadConfig(force) {
  const ta = document.getElementById('config-text');
  if (dirty && !force) return;
  const seen = edits;
  const r = await get('/api/config');
  if (!r.ok || edits !== seen) return;
  ta.value = JSON.stringify(r.json, null, 2);
  dirty = false;
  document.getElementById('quick-period').value = r.json.sampler.period_ms;
  document.getElementById('quick-endpoint').value = r.json.export.endpoint || '';
}

function showResult(r) {
  const box = document.getElementById('config-result');
  if (r.ok) {
    box.className = 'ok';
    const applied = r.json.applied.length ? r.json.applied : ['nothing changed'];
    const reloaded = Object.entries(r.json.reloaded || {}).map(([n, s]) => `plugin ${n} reloaded: ${s.state}${s.reason ? ` (${s.reason})` : ''}`);
    box.replaceChildren(el('strong', {}, 'Applied.'), el('ul', {}, ...[...applied, ...reloaded].map((a) => el('li', {}, a))));
    dirty = false;
    loadConfig(true);
    return;
  }
  box.className = 'error';
  const errs = (r.json && r.json.errors) || [];
  box.replaceChildren(
    el('strong', {}, `Refused (${r.status}): ${(r.json && r.json.error) || r.text}`),
    el('ul', {}, ...errs.map((e) => el('li', { class: 'config-error' }, el('code', {}, e.key), `: ${e.reason}`))),
  );
}

export function initConfig() {
  const ta = document.getElementById('config-text');
  ta.addEventListener('input', () => { dirty = true; edits += 1; });
  document.getElementById('config-reload').addEventListener('click', () => loadConfig(true));
  document.getElementById('config-apply').addEventListener('click', async () => {
    let body;
    try {
      JSON.parse(ta.value);
      body = ta.value;
    } catch (e) {
      showResult({ ok: false, status: 'not sent', json: { error: 'the text is not valid JSON', errors: [{ key: '<text>', reason: String(e.message) }] } });
      return;
    }
    showResult(await call('PUT', '/api/config', body));
  });
  document.getElementById('quick').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const endpoint = document.getElementById('quick-endpoint').value.trim();
    const patch = {
      sampler: { period_ms: Number(document.getElementById('quick-period').value) },
      export: { endpoint: endpoint && endpoint !== 'off' ? endpoint : null },
    };
    showResult(await call('PATCH', '/api/config', JSON.stringify(patch), 'application/merge-patch+json'));
  });
}
