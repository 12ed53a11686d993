// Browser tests of the paramserver panel (see harness.mjs for how they run):
// a job reports over the JSON ingest (a checkpoint, clocks of three workers,
// heartbeats; worker 1 killed, detected by sonde, restarted, recovered, all
// recovered); the Plugins view shows the incident's timeline and the seed's
// phase table, and the clocks of all workers.
//
//   node web/tests/panel-paramserver.mjs    (after `cargo build -p sonde` and the plugins)
import { join } from 'node:path';
import { suite, until, shots } from './harness.mjs';
import { expectReadableDecisions } from './checks.mjs';

const JOB = 'ps-panel';
const ms = 1_000_000n;
const now = () => BigInt(Date.now()) * ms;
const sleep = (t) => new Promise((r) => setTimeout(r, t));

async function ingest(url, role, index, rows) {
  const r = await fetch(`${url}/api/ingest`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    // time_ns as JSON integers (BigInt is not JSON): written out by hand.
    body: JSON.stringify({ origin: { job: JOB, role, index }, ...rows }, (_, v) => (typeof v === 'bigint' ? `__${v}__` : v))
      .replace(/"__(\d+)__"/g, '$1'),
  });
  if (r.status !== 202) throw new Error(`ingest ${r.status}: ${await r.text()}`);
}

const incidents = async (url) => (await (await fetch(`${url}/api/plugins/paramserver/incidents?job=${JOB}`)).json()).incidents;

await suite({
  name: 'panel-paramserver',
  plugins: [['bundled/paramserver.wasm', 'paramserver']],
  // A timeout of 1 s leaves this page's own posts room on a loaded machine:
  // a restarted worker that sends no heartbeat for longer is declared dead again.
  args: ['--set', 'plugin.paramserver.settings={heartbeat_timeout_s=1.0, check_every_ms=50, consistency="ssp", staleness=1}'],
}, [
  ['the incident timeline and the phase table', async ({ page, url }) => {
    const t = now();
    await ingest(url, 'server', 0, {
      node_events: [
        { kind: 'checkpoint-begin', time_ns: t - 3000n * ms, attributes: { clock: 2 } },
        { kind: 'checkpoint-end', time_ns: t - 2200n * ms },
      ],
    });
    for (const [i, c] of [[0, 5], [1, 3], [2, 4]]) {
      await ingest(url, 'worker', i, { progress: [{ name: 'clock', value: c, time_ns: t - 1000n * ms }] });
    }
    await ingest(url, 'worker', 1, { heartbeats: [{ time_ns: t - 200n * ms }], node_events: [{ kind: 'killed', time_ns: t - 100n * ms }] });
    await until('the detection', async () => (await incidents(url))[0]?.stages[3].time_ns != null, 10000);
    await ingest(url, 'worker', 1, { node_events: [{ kind: 'restarted', time_ns: now() }] });
    await sleep(300);
    // Recovered, and then it finishes cleanly in the same report, so its
    // silence from now on is no second failure however slow the next post is.
    const recovered = now();
    await ingest(url, 'worker', 1, {
      node_events: [{ kind: 'recovered', time_ns: recovered }, { kind: 'exited', time_ns: recovered + ms }],
    });
    await sleep(100);
    await ingest(url, 'server', 0, { node_events: [{ kind: 'all-recovered', time_ns: now() }] });
    await until('the complete incident', async () => (await incidents(url))[0]?.complete === true, 10000);

    await page.goto(url);
    await page.click('#tabs a[data-view=plugins]');
    const panel = page.locator('[data-custom-panel=paramserver]');
    const incident = panel.locator('[data-item^=incident-]').first();
    const rows = incident.locator('tbody tr:not([data-key=all])');
    await until('five phase rows', async () => (await rows.count()) === 5);
    const header = await incident.locator('thead tr').textContent();
    if (header !== 'phasefromtotimeshare') throw new Error(`header ${header}`);
    const first = await rows.nth(0).textContent();
    if (!/Start CheckPoint.*End CheckPoint800\.0 ms\d+ %/.test(first)) throw new Error(`phase 1 row: ${first}`);
    const second = await rows.nth(1).textContent();
    if (!second.includes('Kill A Running Process') || !/ms\d+ %$/.test(second)) throw new Error(`phase 2 row: ${second}`);
    const segments = await incident.locator('tr[data-key=all] .spec-seg').count();
    if (segments !== 5) throw new Error(`${segments} timeline segments`);
    if (!(await incident.locator('h4').textContent()).includes('worker-1')) throw new Error('incident title');
    await page.screenshot({ path: join(shots, 'paramserver-incident.png'), fullPage: true });
  }],
  ['the clocks of all workers', async ({ page, url }) => {
    const panel = page.locator('[data-custom-panel=paramserver]');
    const clocks = panel.locator('[data-item="clocks-ps-panel"]');
    const row = (w) => clocks.locator(`tr[data-key="${w}"]`);
    await until('three workers', async () => (await clocks.locator('tbody tr[data-key^=worker]').count()) === 3);
    for (const [w, clock, stale] of [['worker-0', '5', '0'], ['worker-1', '3', '2'], ['worker-2', '4', '1']]) {
      const r = row(w);
      const got = [await r.locator('td').nth(1).getAttribute('data-value'), await r.locator('td').nth(2).getAttribute('data-value')];
      if (got[0] !== clock || got[1] !== stale) throw new Error(`${w} clock ${got[0]}, staleness ${got[1]}`);
    }
    // SSP(1): two clocks behind is a straggler.
    await until('worker-1 named a straggler', async () => (await row('worker-1').locator('td').nth(5).textContent()) === 'straggler');
    // A new clock shows without a reload.
    await ingest(url, 'worker', 1, { progress: [{ name: 'clock', value: 5, time_ns: now() }] });
    await until('worker-1 at clock 5', async () => (await row('worker-1').locator('td').nth(1).getAttribute('data-value')) === '5');
    await page.screenshot({ path: join(shots, 'paramserver-clocks.png'), fullPage: true });
  }],
  ['the job\'s own page is a parameter-server page: processes by role, its incidents, no steps', async ({ page, url }) => {
    await page.goto(`${url}/#/jobs/${JOB}`);
    const panel = page.locator('[data-job-panel=paramserver]');
    await until('the incident on the job page', async () => (await panel.locator('[data-item^=incident-]').count()) >= 1);
    const procs = await page.locator('.ranks-table tbody tr').allTextContents();
    for (const want of ['server 0', 'worker 0', 'worker 1', 'worker 2']) {
      if (!procs.some((p) => p.startsWith(want))) throw new Error(`no ${want} in ${procs}`);
    }
    const text = await page.locator('#view-jobs').innerText();
    if (text.includes('rank -1')) throw new Error('"rank -1" on a parameter-server page');
    if (await page.locator('.job-steps').isVisible()) throw new Error('a step chart on a job without steps');
    if (!(await page.locator('.job-summary').innerText()).includes('parameter-server')) throw new Error('kind not shown');
    await page.screenshot({ path: join(shots, 'job-parameter-server.png'), fullPage: true });
  }],
  ['its decisions read as sentences with their fields, the JSON only behind "details"', async ({ page }) => {
    await page.goto(page.url().split('#')[0]);
    await page.click('#tabs a[data-view=plugins]');
    await until('a decision', async () => (await page.locator('details[data-panel=paramserver] .decision').count()) > 0);
    await expectReadableDecisions(page, 'details[data-panel=paramserver] .decisions');
  }],
]);
