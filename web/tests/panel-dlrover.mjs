// Browser tests of the dlrover plugin's panel (see harness.mjs for how they
// run): a job reports to a real sonde through its JSON ingest and pulls shards
// through the plugin's routes; the Plugins view shows the nodes with their
// status, the speed, the current plan and why, shard progress, and the
// failures, and follows new progress without a reload.
//
//   node web/tests/panel-dlrover.mjs      (after `cargo build -p sonde` and the plugins)
import { join } from 'node:path';
import { suite, until, shots } from './harness.mjs';
import { expectReadableDecisions } from './checks.mjs';

const plugin = (url, path, body) => fetch(`${url}/api/plugins/dlrover${path}`, body === undefined ? {} : {
  method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
}).then(async (r) => ({ status: r.status, json: await r.json() }));

const ingest = (url, node, index, extra) => fetch(`${url}/api/ingest`, {
  method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ origin: { job: 'train', node, role: 'worker', index }, heartbeats: [{}], ...extra }),
}).then((r) => { if (r.status !== 202) throw new Error(`ingest answered ${r.status}`); });

// Pulls and reports `n` shards as `node`; returns the last task.
async function work(url, node, n) {
  let t;
  for (let i = 0; i < n; i++) {
    t = (await plugin(url, '/tasks/next', { dataset_name: 'images', node })).json;
    if (t.type !== 'task') throw new Error(`expected a task, got ${JSON.stringify(t)}`);
    const r = await plugin(url, '/tasks/report', { dataset_name: 'images', node, task_id: t.task_id });
    if (!r.json.accepted) throw new Error(JSON.stringify(r.json));
  }
  return t;
}

const panel = '[data-custom-panel=dlrover]';
const tests = [];
const test = (name, f) => tests.push([name, f]);

test('the panel shows nodes, speed, the plan and shard progress', async ({ page, url }) => {
  const now = Date.now() * 1e6;
  for (let i = 0; i < 3; i++) {
    const progress = i === 0 ? [0, 1, 2, 3].map((k) => ({ name: 'global_step', value: k * 50, time_ns: now - (3 - k) * 1e9 })) : [];
    await ingest(url, `worker-${i}`, i, { progress });
  }
  const reg = await plugin(url, '/datasets', { dataset_name: 'images', batch_size: 10, dataset_size: 400, num_minibatches_per_shard: 2, num_epochs: 2 });
  if (!reg.json.registered) throw new Error(JSON.stringify(reg.json));
  await work(url, 'worker-0', 3);
  await work(url, 'worker-1', 2);
  // worker-2 takes a shard and is killed (exit 137): its shard goes back to TODO.
  await plugin(url, '/tasks/next', { dataset_name: 'images', node: 'worker-2' });
  await ingest(url, 'worker-2', 2, { heartbeats: [], node_events: [{ kind: 'exited', exit_code: 137, reason: 'SIGKILL' }] });

  await page.goto(`${url}/#plugins`);
  await page.click('#tabs a[data-view=plugins]');
  await until('the dlrover panel', async () => (await page.locator(`${panel} [data-item=nodes] tr[data-key=worker-0]`).count()) === 1);
  await until('worker-2 deleted', async () => (await page.locator(`${panel} [data-item=nodes] tr[data-key=worker-2] td`).nth(2).textContent()) === 'deleted');
  if ((await page.locator(`${panel} [data-item=nodes] tr[data-key=worker-0] td`).nth(2).textContent()) !== 'running') throw new Error('worker-0 is not running');
  await until('this host\'s usage', async () => (await page.textContent(`${panel} [data-item=nodes] tr[data-key=browser-host]`)).includes('GiB'));
  const speed = +(await page.textContent(`${panel} [data-item=training] [data-stat="speed, steps/s"] dd`));
  if (!(speed > 0)) throw new Error(`speed ${speed}`);
  const plan = (await page.locator(`${panel} [data-item^=plan]`).allTextContents()).join(' ');
  for (const want of ['initial', 'Why:', 'worker:', 'Stage worker_initial']) if (!plan.includes(want)) throw new Error(`${want} not in ${plan}`);
  const ds = page.locator(`${panel} [data-item=datasets] tr[data-key=images] td`);
  if (+(await ds.nth(2).getAttribute('data-value')) !== 100) throw new Error(`done ${await ds.nth(2).textContent()}`);
  if (!(await ds.nth(2).textContent()).includes('100 of 800')) throw new Error(`total ${await ds.nth(2).textContent()}`);
  const [requeued, doing] = [await ds.nth(6).textContent(), await ds.nth(4).textContent()];
  if (requeued !== '1' || doing !== '0') throw new Error(`re-queued ${requeued}, doing ${doing}`);
  await until('the failure', async () => (await page.locator(`${panel} [data-item=events] li`, { hasText: /^relaunch / }).count()) === 1);
  await page.locator(panel).screenshot({ path: join(shots, 'panel-dlrover.png') });
});

test('it follows new shard progress without a reload', async ({ page, url }) => {
  await work(url, 'worker-1', 5);
  const done = page.locator(`${panel} [data-item=datasets] tr[data-key=images] td`).nth(2);
  await until('the new progress', async () => +(await done.getAttribute('data-value')) === 200);
  await until('the bar to move', async () => (await done.locator('.spec-seg[data-label=done]').getAttribute('style')).includes('width:25.00%'));
});

test('its decisions read as sentences with their fields, the JSON only behind "details"', async ({ page }) => {
  await until('a decision', async () => (await page.locator('details[data-panel=dlrover] .decision').count()) > 0);
  await expectReadableDecisions(page, 'details[data-panel=dlrover] .decisions');
  await page.locator('details[data-panel=dlrover] .decisions').screenshot({ path: join(shots, 'panel-dlrover-decisions.png') });
});

await suite({
  name: 'panel-dlrover',
  plugins: [['bundled/dlrover.wasm', 'dlrover']],
  args: [
    '--set', 'plugin.dlrover.settings={node="browser-host", stats_interval_s=0.5, tick_ms=100, sample_period_ms=200, deliver_every_ms=500}',
    '--set', 'plugin.dlrover.call_timeout_ms=3000',
  ],
}, tests);
