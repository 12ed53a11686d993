// The clockwork plugin's dashboard panel against a real sonde: serving rows
// posted to the JSON ingest show up per model with goodput, SLO attainment,
// latency percentiles and miss causes.
//   node web/tests/panel-clockwork.mjs    (after `cargo build -p sonde`, the plugins and `./dev web`)
import { suite, until } from './harness.mjs';

const MS = 1_000_000;

await suite({ name: 'panel-clockwork', plugins: [['bundled/clockwork.wasm', 'clockwork']],
  args: ['--set', 'plugin.clockwork.settings={window_s=1.0, lag_ms=100, emit_every_ms=100, tsv=false}'] }, [
  ['per model goodput, attainment, latency and miss causes', async ({ page, url }) => {
    const t0 = (BigInt(Date.now()) - 5000n) * 1_000_000n;
    const requests = [];
    // model 7: 8 in time, 1 cold start that missed, 1 that queued too long (timeout).
    for (let i = 0; i < 8; i++) {
      const a = t0 + BigInt(i * 10 * MS);
      requests.push({ request_id: i, model_id: 7, arrival_ns: a, departure_ns: a + BigInt(5 * MS), deadline_ns: a + BigInt(100 * MS), arrival_copies: 1, departure_copies: 1 });
    }
    requests.push({ request_id: 8, model_id: 7, arrival_ns: t0, departure_ns: t0 + BigInt(150 * MS), deadline_ns: t0 + BigInt(100 * MS), arrival_copies: 0, departure_copies: 1 });
    requests.push({ request_id: 9, model_id: 7, arrival_ns: t0, departure_ns: t0 + BigInt(95 * MS), deadline_ns: t0 + BigInt(100 * MS), result: 4, arrival_copies: 1, departure_copies: 1 });
    const body = JSON.stringify({ requests }, (_, v) => (typeof v === 'bigint' ? `@${v}@` : v)).replace(/"@(\d+)@"/g, '$1');
    const r = await fetch(`${url}/api/ingest`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    if (r.status !== 202) throw new Error(`ingest ${r.status}: ${await r.text()}`);
    await page.goto(url);
    await page.click('#tabs a[data-view=plugins]');
    const row = page.locator('[data-custom-panel=clockwork] [data-item=models] tr[data-key="7"]');
    await until('the model row', async () => (await row.count()) === 1 && (await row.locator('td').nth(1).textContent()) === '10');
    const attainment = await row.locator('td').nth(3);
    if (+(await attainment.getAttribute('data-value')) !== 0.8 || (await attainment.textContent()) !== '80.0 %') throw new Error(`attainment ${await attainment.textContent()}`);
    const causes = await row.locator('td').nth(10).textContent();
    if (!causes.includes('coldstart 1') || !causes.includes('queueing 1')) throw new Error(`causes ${causes}`);
    const seg = row.locator('td').nth(10).locator('.spec-seg[data-label=coldstart]');
    if ((await seg.count()) !== 1) throw new Error('no coldstart bar');
    // 1 of 2 misses: half the bar
    const [w, all] = [await seg.evaluate((e) => e.getBoundingClientRect().width), await seg.evaluate((e) => e.parentElement.getBoundingClientRect().width)];
    if (Math.abs(w / all - 0.5) > 0.02) throw new Error(`coldstart segment ${w} of ${all}`);
    await until('the window goodput', async () => (await row.locator('td').nth(2).textContent()) !== '–');
    const logs = await page.locator('[data-custom-panel=clockwork] [data-item=logs]').textContent();
    if (!logs.includes('not written: off')) throw new Error(`logs line: ${logs}`);
    await page.screenshot({ path: 'target/screenshots/panel-clockwork.png', fullPage: true }).catch(() => {});
  }],
  ['a serving job\'s page shows its models, and no steps', async ({ page, url }) => {
    const t0 = (BigInt(Date.now()) - 3000n) * 1_000_000n;
    const requests = [...Array(6).keys()].map((i) => {
      const a = t0 + BigInt(i * 20 * MS);
      return { request_id: 100 + i, model_id: 9, arrival_ns: a, departure_ns: a + BigInt(8 * MS), deadline_ns: a + BigInt(50 * MS), arrival_copies: 1, departure_copies: 1 };
    });
    const body = JSON.stringify({ origin: { job: 'serve-9', role: 'controller', node: 'gw-1' }, requests }, (_, v) => (typeof v === 'bigint' ? `@${v}@` : v)).replace(/"@(\d+)@"/g, '$1');
    const r = await fetch(`${url}/api/ingest`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    if (r.status !== 202) throw new Error(`ingest ${r.status}: ${await r.text()}`);
    await page.goto(`${url}/#/jobs/serve-9`);
    const row = page.locator('[data-job-panel=clockwork] [data-item=models] tr[data-key="9"]');
    await until('the serving panel on the job page', async () => (await row.count()) === 1);
    if ((await row.locator('td').nth(1).textContent()) !== '6') throw new Error(`requests ${await row.locator('td').nth(1).textContent()}`);
    if (await page.locator('.job-steps').isVisible()) throw new Error('a step chart on a serving job');
    const models = await page.locator('[data-job-panel=clockwork] [data-item=models] tbody tr').count();
    if (models !== 1) throw new Error(`${models} models on the page of a job that served one`);
    if ((await page.locator('#diagnosis').innerText()).includes('steps of every rank')) throw new Error('a training job\'s note on a serving job');
    if (!(await page.locator('.job-summary').innerText()).includes('requests')) throw new Error('the job\'s kind is not shown');
    await page.screenshot({ path: 'target/screenshots/job-serving.png', fullPage: true });
  }],
]);
