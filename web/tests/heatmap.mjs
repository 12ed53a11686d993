// Browser tests of the job page at 1 024 ranks (see harness.mjs for how they
// run): a synthetic job view (the bench's fixture, web/bench/job-page.mjs)
// fed by page.route, whose rank 745 takes 1.6× the median step in batches
// 150–179 and which the diagnosis names. What a person sees: the heatmap's
// rows are groups of ranks, no more than fit; the group holding rank 745 is
// the darkest in those batches (read from the canvas); a click opens it into
// its ranks; the keyboard walks to rank 745 and the readout names it with
// its slowdown; the step chart draws the ranks' mean, not 1 024 bars; and at
// 600 px the page does not scroll sideways.
//
//   WEB_DIST=web/dist node web/tests/heatmap.mjs   (after `cargo build -p sonde`)
import { join } from 'node:path';
import { suite, until, shots } from './harness.mjs';
import { fixture, finding, serve } from '../bench/job-page.mjs';

const RANKS = 1024;
const BATCHES = 200;
const SLOW = 745;
const [FROM, TO] = [150, 179];
const named = fixture({ job: 'wide', ranks: RANKS, batches: BATCHES, every: 1e9, base: 0.8, realistic: true,
  slow: (r, b) => (r === SLOW && b >= FROM && b <= TO ? 0.48 : 0), findings: finding(SLOW, FROM, TO, 1e9) });
// The fed slowdown of rank 745 in batch 165: its step over the median step of the batch.
const fed = (() => {
  const s = JSON.parse(named.view(BATCHES - 165)).steps[0];
  const t = s.ranks.map((r) => r.total_s).sort((x, y) => x - y);
  return s.ranks[SLOW].total_s / ((t[t.length / 2 - 1] + t[t.length / 2]) / 2);
})();

const tests = [];
const test = (name, f) => tests.push([name, f]);
const shot = (page, name) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
const heat = (page) => page.locator('.heatmap');
const data = async (page) => page.locator('.heatmap').evaluate((c) => ({ ...c.dataset, bbox: JSON.parse(c.dataset.bbox), labels: JSON.parse(c.dataset.labels) }));

// Luma of each shown row's cell at batch number `batch` (the heatmap's centre of that cell).
async function lumas(page, batch) {
  return page.locator('.heatmap').evaluate((c, b) => {
    const d = c.dataset;
    const box = JSON.parse(d.bbox);
    const span = +d.hi - +d.lo + 1;
    const dpr = window.devicePixelRatio || 1;
    const g = c.querySelector('canvas').getContext('2d');
    const x = Math.round(box.left + ((b - +d.lo + 0.5) / span) * box.width);
    const out = [];
    for (let i = 0; i < +d.rows; i++) {
      const y = Math.round(box.top + (i + 0.5) * +d.rowHeight * dpr);
      const [R, G, B] = g.getImageData(x, y, 1, 1).data;
      out.push(0.2126 * R + 0.7152 * G + 0.0722 * B);
    }
    return out;
  }, batch);
}

const darkest = (xs) => xs.indexOf(Math.min(...xs));

test('a 1 024-rank job: grouped heatmap rows, the slow rank\'s group darkest in its slow batches', async ({ page, url }) => {
  const asked = [];
  page.on('request', (r) => { const m = /\/api\/jobs\/wide\?batches=(\d+)/.exec(r.url()); if (m) asked.push(+m[1]); });
  await serve(page, named, 8);
  await page.goto(`${url}/#/jobs/wide`);
  await until('the page loaded', async () => (await page.locator('#view-jobs').getAttribute('data-loaded')) === 'true', 60000);
  await until('the heatmap', async () => (await heat(page).count()) === 1);
  // The first load asks for a few batches (10 000 rank-steps at most), then 292 (300 000 rank-steps).
  if (!(asked[0] <= 20) || asked.at(-1) !== 292) throw new Error(`loads asked for ${asked.join(', ')} batches`);
  const d = await data(page);
  const fit = Math.floor((await page.evaluate(() => window.innerHeight)) / 12);
  if (+d.rows > 64 || +d.rows > fit || +d.groups !== +d.rows) throw new Error(`${d.rows} rows drawn (${d.groups} groups), want ≤ 64 groups`);
  if (d.labels[0] !== 'ranks 0–31' || d.labels[23] !== 'ranks 736–767') throw new Error(`labels ${d.labels.slice(0, 3)} … ${d.labels[23]}`);
  if (+d.lo !== 0 || +d.hi !== BATCHES - 1) throw new Error(`window ${d.lo}–${d.hi}`);
  const slow = await lumas(page, 165);
  const calm = await lumas(page, 60);
  if (darkest(slow) !== 23) throw new Error(`in batch 165 the darkest row is ${d.labels[darkest(slow)]} (lumas ${slow.map((l) => l.toFixed(0))})`);
  const others = slow.filter((_, i) => i !== 23);
  if (!(Math.min(...others) - slow[23] > 60)) throw new Error(`the slow group is not clearly darker: ${slow[23].toFixed(0)} against ${Math.min(...others).toFixed(0)}`);
  if (!(calm[23] - slow[23] > 60)) throw new Error(`the slow group in a calm batch: ${calm[23].toFixed(0)}, in a slow one ${slow[23].toFixed(0)}`);
  // The step chart: the ranks' mean with rank 745's bar, or binned; never a bar per rank.
  const mode = await page.locator('.step-chart').getAttribute('data-mode');
  if (mode === 'per-rank') throw new Error('the step chart draws a bar per rank');
  const title = await page.locator('.job-steps h3').first().innerText();
  if (!title.includes('1024 ranks') || !title.includes('rank 745')) throw new Error(`step chart title: ${title}`);
  // 128 nodes: one node's charts (rank 745's), not 256 side by side.
  const node = await page.locator('#job-node').inputValue();
  if (node !== 'node-93') throw new Error(`node shown: ${node}`);
  await shot(page, 'job-1024-ranks');
  await page.locator('.job-steps').screenshot({ path: join(shots, 'job-1024-ranks-steps.png') });
});

test('a click opens the group into its ranks; the keyboard reaches rank 745 and reads out its slowdown', async ({ page }) => {
  const d = await data(page);
  const canvas = page.locator('.heatmap canvas');
  await canvas.scrollIntoViewIfNeeded();
  const cb = await canvas.boundingBox();
  const span = +d.hi - +d.lo + 1;
  const dpr = await page.evaluate(() => window.devicePixelRatio || 1);
  const x = cb.x + (d.bbox.left + ((165 - +d.lo + 0.5) / span) * d.bbox.width) / dpr;
  const y = cb.y + (d.bbox.top / dpr) + 23.5 * +d.rowHeight;
  await page.mouse.click(x, y);
  await until('the group open', async () => +(await heat(page).getAttribute('data-rows')) === 64);
  const open = await data(page);
  if (open.labels[24] !== 'rank 736' || open.labels[33] !== `rank ${SLOW}` || open.labels[56] !== 'ranks 768–799') throw new Error(`rows ${open.labels.slice(22, 36)}`);
  const ranks = await lumas(page, 165);
  if (darkest(ranks) !== 23 && darkest(ranks) !== 33) throw new Error(`darkest row ${open.labels[darkest(ranks)]}`);
  if (!(ranks[32] - ranks[33] > 60 && ranks[34] - ranks[33] > 60)) throw new Error(`rank 745's row is not darker than its neighbours: ${ranks.slice(32, 35).map((l) => l.toFixed(0))}`);
  // The keyboard: the selection is on the group's cell in batch 165; ten rows down is rank 745.
  await canvas.focus();
  if ((await heat(page).getAttribute('data-selected')) !== 'ranks 736–767:165') throw new Error(`selected ${await heat(page).getAttribute('data-selected')}`);
  for (let i = 0; i < 10; i++) await page.keyboard.press('ArrowDown');
  await until('rank 745 selected', async () => (await heat(page).getAttribute('data-selected')) === `rank ${SLOW}:165`);
  const said = await page.locator('.heat-readout').innerText();
  const m = /^rank 745, batch 165: step [\d.]+ (?:ms|s), ([\d.]+)× the batch's median step/.exec(said);
  if (!m) throw new Error(`readout: ${said}`);
  if (Math.abs(+m[1] - fed) > fed * 0.05) throw new Error(`readout says ${m[1]}×, fed ${fed.toFixed(2)}×`);
  if (!said.includes('the diagnosis names')) throw new Error(`readout does not say the diagnosis names it: ${said}`);
  if ((await page.locator('.heat-readout').getAttribute('aria-live')) !== 'polite') throw new Error('the readout is not aria-live');
  await page.keyboard.press('ArrowLeft');
  await until('batch 164', async () => (await heat(page).getAttribute('data-selected')) === `rank ${SLOW}:164`);
  await page.locator('.job-steps').screenshot({ path: join(shots, 'job-1024-ranks-open.png') });
  // Enter on a rank closes its group and selects the group.
  await page.keyboard.press('Enter');
  await until('the group closed', async () => +(await heat(page).getAttribute('data-rows')) === 32);
  if ((await heat(page).getAttribute('data-selected')) !== 'ranks 736–767:164') throw new Error(`selected ${await heat(page).getAttribute('data-selected')}`);
  await page.keyboard.press('Enter');
  await until('opened by Enter', async () => +(await heat(page).getAttribute('data-rows')) === 64);
});

test('picking rank 745 shows its own bars and opens its group', async ({ page, url }) => {
  await page.goto(`${url}/#/jobs/wide?rank=${SLOW}`);
  await page.reload();
  await until('the page loaded', async () => (await page.locator('#view-jobs').getAttribute('data-loaded')) === 'true', 60000);
  const mode = await page.locator('.step-chart').getAttribute('data-mode');
  if (mode !== 'per-rank' && mode !== 'binned') throw new Error(`mode ${mode}`);
  const d = await data(page);
  if (!d.labels.includes(`rank ${SLOW}`)) throw new Error('rank 745\'s row is not shown');
});

test('at 600 px wide the 1 024-rank page does not scroll sideways', async ({ page, url }) => {
  await page.setViewportSize({ width: 600, height: 900 });
  await page.goto(`${url}/#/jobs/wide`);
  await page.reload();
  await until('the page loaded', async () => (await page.locator('#view-jobs').getAttribute('data-loaded')) === 'true', 60000);
  await page.waitForTimeout(500);
  const w = await page.evaluate(() => document.documentElement.scrollWidth);
  await shot(page, 'job-1024-ranks-600px');
  if (w > 600) {
    const wide = await page.evaluate(() => [...document.querySelectorAll('body *')]
      .filter((e) => e.getBoundingClientRect().right > 601 && e.parentElement.getBoundingClientRect().right <= 601)
      .slice(0, 4).map((e) => `${e.tagName.toLowerCase()}.${e.className} (${Math.round(e.getBoundingClientRect().right)} px)`));
    throw new Error(`${w} px wide: ${wide.join(', ')}`);
  }
  await page.setViewportSize({ width: 1400, height: 1000 });
});

await suite({ name: 'heatmap' }, tests);
