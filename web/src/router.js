// Hash routes: `#/<view>/<arg>?k=v&...`. Every view has one (`#/jobs/mnist`,
// `#/plugins/mpi`, `#/nodes/worker-3`), and the state a person would want to
// share rides in the query part (time window, node, rank, zoomed batches).
// Old `#plugins`-style links still open their view.

export const VIEWS = ['system', 'jobs', 'nodes', 'timings', 'plugins', 'config'];

export function parse(hash = location.hash) {
  let h = hash.replace(/^#\/?/, '');
  let query = '';
  const q = h.indexOf('?');
  if (q >= 0) { query = h.slice(q + 1); h = h.slice(0, q); }
  const [view, ...rest] = h.split('/');
  const params = Object.fromEntries(new URLSearchParams(query));
  return {
    view: VIEWS.includes(view) ? view : 'system',
    arg: rest.length ? decodeURIComponent(rest.join('/')) : '',
    params,
  };
}

export function format({ view, arg = '', params = {} }) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== ''));
  const qs = q.toString();
  return `#/${view}${arg ? `/${encodeURIComponent(arg)}` : ''}${qs ? `?${qs}` : ''}`;
}

export const href = (view, arg, params) => format({ view, arg, params });

// Changes query parameters of the current route without re-rendering the view
// (the view already shows them); the URL stays shareable and survives reload.
export function setParams(changes) {
  const r = parse();
  const next = format({ ...r, params: { ...r.params, ...changes } });
  if (next !== location.hash) history.replaceState(null, '', next);
}
