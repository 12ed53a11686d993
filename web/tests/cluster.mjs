// Browser tests of the dashboard on a cluster master (see harness.mjs): two
// sonde agents report to the master this suite starts; the Nodes view lists
// them with state, version and clock skew, a job whose ranks report to
// different agents gets one page with both nodes' metrics side by side, and
// an agent that stops turns "lost" with a readable decision.
//
//   node web/tests/cluster.mjs      (after `cargo build -p sonde` and the plugins)
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { suite, until, shots, startSonde, freePort } from './harness.mjs';
import { expectCharts, steps, post } from './checks.mjs';

const grpc = await freePort();
const agents = {};
const dirs = [];
process.on('exit', () => {
  for (const a of Object.values(agents)) a.child.kill('SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const shot = (page, name) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });

const agent = async (name) => {
  const a = await start(name);
  dirs.push(a.dir);
  return a;
};
const start = (name) => startSonde({
  plugins: [['bundled/sysmetrics.wasm', 'sysmetrics']],
  args: ['--role', 'agent', '--master', `http://127.0.0.1:${grpc}`, '--set', `host.name="${name}"`,
    '--set', 'export.interval_ms=300', '--set', 'cluster.heartbeat_ms=300', '--set', 'sampler.period_ms=200'],
});

await suite({
  name: 'cluster',
  // The diagnosis plugin runs on the master, where it sees every rank.
  plugins: [['bundled/bottleneck.wasm', 'bottleneck']],
  args: ['--role', 'master', '--set', `ingest.otlp_grpc_listen="127.0.0.1:${grpc}"`, '--set', 'cluster.node_timeout_ms=2500', '--set', 'host.name="the-master"',
    '--set', 'plugin.bottleneck.settings={lag_ms=300}'],
}, [
  ['the Nodes view lists every agent as up, with its version and clock skew', async ({ page, url }) => {
    agents['node-1'] = await agent('node-1');
    agents['node-2'] = await agent('node-2');
    await page.goto(`${url}/#/nodes`);
    for (const n of ['node-1', 'node-2']) {
      await until(`${n} up`, async () => (await page.getAttribute(`.nodes-table tr[data-node="${n}"]`, 'data-state').catch(() => null)) === 'up', 30000);
    }
    const row = await page.locator('.nodes-table tr[data-node="node-1"]').innerText();
    if (!/sonde agent/.test(row) || !/\d+\.\d+\.\d+/.test(row) || !/-?\d+ ms/.test(row)) throw new Error(row);
    await shot(page, 'nodes');
  }],
  ['a job on two nodes: one page, every rank with its node, both nodes\' metrics side by side', async ({ page, url }) => {
    await post(agents['node-1'].url, steps('dist', 0, { node: 'node-1' }));
    await post(agents['node-2'].url, steps('dist', 1, { node: 'node-2' }));
    await until('the job on the master', async () => {
      const j = await (await fetch(`${url}/api/jobs/dist`)).json();
      return Array.isArray(j.ranks) && j.ranks.length === 2 && j.steps.length === 30;
    }, 20000);
    await page.goto(`${url}/#/jobs/dist`);
    await until('the step chart', async () => (await page.locator('.step-chart canvas').count()) === 1);
    for (const [r, n] of [[0, 'node-1'], [1, 'node-2']]) {
      const t = await page.locator(`.ranks-table tr[data-rank="${r}"]`).innerText();
      if (!t.includes(n)) throw new Error(`rank ${r}: ${t}`);
    }
    for (const n of ['node-1', 'node-2']) {
      await until(`CPU of ${n}`, async () => (await page.locator(`.chart[data-title="CPU · ${n}"] canvas`).count()) === 1, 20000);
    }
    // The master's diagnosis names rank 1 on node-2, the rank fed 15 ms longer in 24 of 30 batches.
    const said = page.locator('#diagnosis .diagnosis-sentence');
    await until('the diagnosis', async () => (await said.count()) === 1, 30000);
    const text = await said.innerText();
    if (!/^Rank 1 \(node node-2\) holds the job back/.test(text)) throw new Error(`diagnosis: ${text}`);
    await page.waitForTimeout(1000);
    await expectCharts(page, { min: 6 });
    await shot(page, 'job-cluster');
  }],
  ['a node page shows its metrics and its jobs', async ({ page, url }) => {
    await page.goto(`${url}/#/nodes/node-1`);
    await until('its CPU chart', async () => (await page.locator('.chart[data-title="CPU · node-1"] canvas').count()) === 1, 20000);
    await page.waitForTimeout(800);
    await expectCharts(page, { min: 2 });
    if (!(await page.locator('#view-nodes a[href="#/jobs/dist"]').count())) throw new Error('the job is not listed');
    await shot(page, 'node');
  }],
  ['a stopped agent turns lost, and the decision reads as a sentence', async ({ page, url }) => {
    agents['node-2'].child.kill('SIGKILL');
    delete agents['node-2'];
    await page.goto(`${url}/#/nodes`);
    await until('node-2 lost', async () => (await page.getAttribute('.nodes-table tr[data-node="node-2"]', 'data-state')) === 'lost', 30000);
    await until('the decision', async () => (await page.locator('.decision[data-kind="node-lost"]').count()) > 0, 10000);
    const text = await page.locator('.decision[data-kind="node-lost"]').first().innerText();
    // One sentence, the reason not repeating it: "Node node-2 was lost: nothing heard for 9.0 s".
    if (!/Node node-2 was lost: nothing heard for [\d.]+ s/.test(text)) throw new Error(text);
    if (/lost: node node-2/.test(text)) throw new Error(`the reason repeats the sentence: ${text}`);
    if (/[{[]\s*"|"\s*:/.test(await page.locator('#view-nodes').innerText())) throw new Error('raw JSON on the Nodes view');
    await shot(page, 'nodes-lost');
  }],
]);
