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
    const row = page.locator('[data-custom-panel=clockwork] tr[data-model="7"]');
    await until('the model row', async () => (await row.count()) === 1 && (await row.locator('td').nth(1).textContent()) === '10');
    const attainment = await row.locator('.attainment').textContent();
    if (attainment !== '80.0%') throw new Error(`attainment ${attainment}`);
    const causes = await row.locator('.causes').textContent();
    if (!causes.includes('coldstart 1') || !causes.includes('queueing 1')) throw new Error(`causes ${causes}`);
    if ((await row.locator('.miss-bar [data-cause=coldstart]').count()) !== 1) throw new Error('no coldstart bar');
    await until('the window goodput', async () => (await row.locator('.goodput').textContent()) !== '–');
    const logs = await page.locator('[data-custom-panel=clockwork] .clockwork-logs').textContent();
    if (!logs.includes('not written (off')) throw new Error(`logs line: ${logs}`);
    await page.screenshot({ path: 'target/screenshots/panel-clockwork.png', fullPage: true }).catch(() => {});
  }],
]);
