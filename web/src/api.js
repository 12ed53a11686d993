// Talking to sonde's API. Changes carry the bearer token when one is entered.
export function token() {
  return localStorage.getItem('sonde.token') || '';
}

export function setToken(t) {
  localStorage.setItem('sonde.token', t);
}

export async function call(method, path, body, contentType = 'application/json') {
  const headers = {};
  if (token()) headers.Authorization = `Bearer ${token()}`;
  if (body !== undefined) headers['Content-Type'] = contentType;
  const r = await fetch(path, { method, headers, body });
  const text = await r.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  return { status: r.status, ok: r.ok, json, text };
}

export const get = (path) => call('GET', path);

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

export function fmtBytes(v) {
  if (v == null || !isFinite(v)) return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let x = Math.abs(v);
  while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; }
  return `${(Math.sign(v) * x).toFixed(x < 10 && i ? 1 : 0)} ${u[i]}`;
}

// A value formatter for a series unit (OpenTelemetry units; rates end in /s).
export function formatter(unit) {
  if (unit === '1') return (v) => (v == null ? '' : `${(v * 100).toFixed(1)}%`);
  if (unit === 'By') return fmtBytes;
  if (unit === 'By/s') return (v) => (v == null ? '' : `${fmtBytes(v)}/s`);
  if (unit === 's') return (v) => (v == null ? '' : v < 1 ? `${(v * 1000).toFixed(1)} ms` : `${v.toFixed(2)} s`);
  return (v) => (v == null ? '' : `${+v.toPrecision(4)} ${unit.replace(/[{}]/g, '')}`);
}
