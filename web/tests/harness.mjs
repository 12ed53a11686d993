// Shared by the browser tests: starts a real sonde (the debug build, or
// $SONDE_BIN) with the plugins a suite asks for, drives Debian's chromium
// (/usr/bin/chromium; no browser download) with playwright-core, and prints
// one line per test plus a cargo-style summary line
// (`test result: ok. N passed; M failed; ...`) that `just test` adds to its
// total. Screenshots go to target/screenshots/ (or $SCREENSHOTS).
//
// A suite file (dashboard.mjs, panel-<plugin>.mjs) is:
//   import { suite } from './harness.mjs';
//   await suite({ plugins: [['bundled/x.wasm', 'x']], args: [...] }, [
//     ['what it shows', async ({ page, url, dir, sonde }) => { ... }],
//   ]);
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const bin = process.env.SONDE_BIN || join(repo, 'target/debug/sonde');
export const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
export const shots = resolve(process.env.SCREENSHOTS || join(repo, 'target/screenshots'));
export const plugin = (rel) => join(repo, 'target/plugins', rel);

export const freePort = () => new Promise((ok) => {
  const s = createServer();
  s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => ok(port)); });
});

// The environment minus SONDE_* (sonde reads those as config: SONDE_BIN would be a key `bin`) and OTLP export.
function childEnv() {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SONDE_')));
  delete env.OTEL_EXPORTER_OTLP_ENDPOINT;
  return env;
}

// plugins: [[path under target/plugins, name it is installed as], ...]; args: extra sonde arguments.
export async function startSonde({ plugins = [], args = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'sonde-browser-'));
  for (const d of ['plugins', 'sinks', 'data']) mkdirSync(join(dir, d));
  for (const [rel, name] of plugins) copyFileSync(plugin(rel), join(dir, `plugins/${name}.wasm`));
  const cache = join(repo, 'target/test-plugin-cache');
  mkdirSync(cache, { recursive: true });
  symlinkSync(cache, join(dir, 'data/cache'));
  // A free port can be taken by another suite's process between our probe and
  // sonde's bind; sonde then exits at once, and a new port is tried.
  for (let attempt = 1; ; attempt++) {
    const started = await spawnSonde(dir, await freePort(), args);
    if (started.child) return started;
    if (!started.portTaken || attempt === 3) throw new Error(`sonde did not become ready:\n${started.output}`);
  }
}

async function spawnSonde(dir, port, args) {
  const out = [];
  const child = spawn(bin, [
    '--data-dir', join(dir, 'data'), '--plugins-dir', join(dir, 'plugins'), '--sinks-dir', join(dir, 'sinks'),
    '--listen', `127.0.0.1:${port}`,
    // the browser tests never need the OTLP receivers; other suites may be running beside them
    '--set', 'ingest.otlp_grpc_listen=off', '--set', 'ingest.otlp_http_listen=off',
    ...args,
  ], { stdio: ['ignore', 'pipe', 'pipe'], env: childEnv() });
  child.stdout.on('data', (d) => out.push(d));
  child.stderr.on('data', (d) => out.push(d));
  let exited = false;
  child.on('exit', () => { exited = true; });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600 && !exited; i++) {
    try { if ((await fetch(`${url}/api/ready`)).ok) return { child, url, dir, out }; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill();
  const output = Buffer.concat(out).toString();
  return { output, portTaken: exited && /address already in use/i.test(output) };
}

export const until = async (what, f, ms = 20000) => {
  const t0 = Date.now();
  let last;
  while (Date.now() - t0 < ms) {
    try { last = await f(); if (last) return last; } catch (e) { last = e; }
    await new Promise((r) => setTimeout(r, 150));
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`);
};

export const status = async (url) => (await fetch(`${url}/api/status`)).json();

// WEB_DIST=web/dist: the browser gets the dashboard from that folder instead
// of the copy embedded in sonde, to test a change without rebuilding sonde.
export async function routeDist(context, url) {
  if (!process.env.WEB_DIST) return;
  const types = { js: 'text/javascript', css: 'text/css', html: 'text/html' };
  await context.route((u) => u.origin === url && (u.pathname === '/' || u.pathname.startsWith('/assets/')), (r) => {
    const rel = new URL(r.request().url()).pathname.replace(/^\/$/, '/index.html');
    r.fulfill({ contentType: types[rel.split('.').pop()] || 'application/octet-stream', body: readFileSync(join(process.env.WEB_DIST, rel)) });
  });
}

// Runs the tests in order on one page against one sonde, then exits with the summary.
export async function suite(options, tests) {
  const name = options.name || 'browser';
  try {
    const missing = [['sonde', bin], ['chromium', chromiumPath], ...(options.plugins || []).map(([rel]) => [rel, plugin(rel)])]
      .filter(([, p]) => !existsSync(p));
    if (missing.length) {
      for (const [what, p] of missing) console.error(`${what} is missing at ${p} (the test recipe builds and installs it: ./dev test)`);
      throw new Error('missing parts');
    }
    mkdirSync(shots, { recursive: true });
    const sonde = await startSonde(options);
    const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox', '--disable-gpu'] });
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 }, acceptDownloads: true });
    await routeDist(context, sonde.url);
    const page = await context.newPage();
    const pageErrors = [];
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    // Nothing may come from anywhere but sonde: the dashboard works offline.
    const foreign = [];
    page.on('request', (r) => { if (!r.url().startsWith(sonde.url)) foreign.push(r.url()); });
    const all = [...tests, ['no script errors and no requests beyond sonde', async () => {
      if (pageErrors.length) throw new Error(pageErrors.join('\n'));
      if (foreign.length) throw new Error(`requests to ${foreign.join(', ')}`);
    }]];
    let passed = 0;
    let failed = 0;
    for (const [i, [what, f]] of all.entries()) {
      const t0 = Date.now();
      try {
        await f({ page, url: sonde.url, dir: sonde.dir, sonde });
        passed++;
        console.log(`test ${name}::${what} ... ok (${Date.now() - t0} ms)`);
      } catch (e) {
        failed++;
        console.log(`test ${name}::${what} ... FAILED\n    ${String(e.stack || e).split('\n').join('\n    ')}`);
        await page.screenshot({ path: join(shots, `failed-${name}-${i}.png`), fullPage: true }).catch(() => {});
      }
    }
    await browser.close();
    sonde.child.kill('SIGTERM');
    if (failed) console.log(`sonde output:\n${Buffer.concat(sonde.out).toString().slice(-4000)}`);
    rmSync(sonde.dir, { recursive: true, force: true });
    console.log(`screenshots in ${shots}`);
    console.log(`\ntest result: ${failed ? 'FAILED' : 'ok'}. ${passed} passed; ${failed} failed; 0 ignored`);
    process.exit(failed ? 1 : 0);
  } catch (e) {
    // in the same form as a test's failure, so a summary that lists failed tests names this one too
    console.log(`test ${name}::(starting the suite) ... FAILED\n    ${String(e.stack || e).split('\n').join('\n    ')}`);
    console.log('test result: FAILED. 0 passed; 1 failed; 0 ignored');
    process.exit(1);
  }
}
