// The clockwork plugin's panel: per model goodput and SLO attainment,
// latency percentiles, where the time went and why requests missed their SLO
// (GET /api/plugins/clockwork/summary), plus where the TSV logs go.
const CAUSES = ['coldstart', 'queueing', 'misprediction', 'late_send', 'error'];
const PARTS = ['queueing', 'network', 'execution', 'controller'];
const ms = (s) => (s * 1000).toFixed(s < 0.01 ? 2 : 1);
const pct = (x) => `${(x * 100).toFixed(1)}%`;

export async function render(box, { name, get, el }) {
  const r = await get(`/api/plugins/${name}/summary`);
  if (!r.ok) throw new Error(r.json?.error || `HTTP ${r.status}`);
  const s = r.json;
  if (!box.firstChild) {
    box.append(
      el('p', { class: 'clockwork-logs' }),
      el('table', { class: 'clockwork-models' },
        el('thead', {}, el('tr', {},
          ...['model', 'requests', 'goodput r/s', 'SLO attainment', 'p50 ms', 'p99 ms', 'max ms', 'cold starts', 'mean batch', 'time split (mean ms)', 'SLO misses by cause']
            .map((h) => el('th', {}, h)))),
        el('tbody')),
    );
  }
  box.querySelector('.clockwork-logs').textContent = s.logs
    .map((l) => `${l.name}: ${l.error ? `not written (${l.error})` : `${l.rows} rows`}`).join(' · ')
    + ` · window ${s.window_s} s`;
  const rows = s.models.map((m) => {
    const w = m.last_window;
    const missed = CAUSES.reduce((n, c) => n + (m.misses[c] || 0), 0);
    const bar = el('span', { class: 'miss-bar', title: CAUSES.map((c) => `${c}: ${m.misses[c]}`).join(', ') },
      ...CAUSES.filter((c) => m.misses[c] > 0).map((c) => el('span', {
        class: `miss miss-${c}`, 'data-cause': c,
        style: `display:inline-block;height:0.8em;width:${Math.max(2, (100 * m.misses[c]) / missed)}px`,
      })));
    const causes = CAUSES.filter((c) => m.misses[c] > 0).map((c) => `${c} ${m.misses[c]}`).join(', ') || 'none';
    return el('tr', { 'data-model': m.model_id },
      el('td', {}, String(m.model_id)),
      el('td', {}, String(m.requests)),
      el('td', { class: 'goodput' }, w ? w.goodput_rps.toFixed(1) : '–'),
      el('td', { class: 'attainment' }, pct(m.slo_attainment)),
      el('td', {}, ms(m.latency_s.p50)),
      el('td', {}, ms(m.latency_s.p99)),
      el('td', {}, ms(m.latency_s.max)),
      el('td', {}, pct(m.coldstart_share)),
      el('td', {}, m.mean_batch.toFixed(2)),
      el('td', { class: 'split' }, PARTS.map((p) => `${p} ${ms(m.time_split_mean_s[p])}`).join(' · ')),
      el('td', { class: 'causes' }, bar, ' ', causes),
    );
  });
  box.querySelector('tbody').replaceChildren(...rows);
}
