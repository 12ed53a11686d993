// The GPU status line on the dashboard, with sonde on the fake NVML library
// (`./dev fake-nvml`): two GPUs, then GPU 1 falls off the bus; the header says
// so in words a person reads, marked as an error.
//
//   node web/tests/gpu.mjs            (after `cargo build -p sonde` and `./dev fake-nvml`)
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite, until, repo } from './harness.mjs';

const script = join(mkdtempSync(join(tmpdir(), 'sonde-gpu-')), 'gpus.script');
writeFileSync(script, 'gpus 2\nat 0 gpu * util 50\nat 2000 gpu 1 lost\n');
// read by the fake library in sonde's process (not a SONDE_ name: those are config)
process.env.FAKE_NVML_SCRIPT = script;

const uuid1 = 'GPU-fa6e0000-0000-4000-8000-000000000001';
const tests = [
  ['the header says how many GPUs NVML gave', async ({ page, url }) => {
    await page.goto(url);
    await until('the GPU status', async () => (await page.textContent('#summary')).includes('2 GPUs via NVML (driver 550.54.15-fake)'));
  }],
  ['a lost GPU shows in the header, marked', async ({ page }) => {
    await until('GPU 1 lost', async () => (await page.textContent('#gpu-status')).includes(`GPU 1 (${uuid1}) lost: GPU has fallen off the bus`), 30000);
    const cls = await page.getAttribute('#gpu-status', 'class');
    if (cls !== 'error') throw new Error(`class ${cls}`);
  }],
];

await suite({
  name: 'gpu',
  args: ['--set', `sampler.nvml_library="${join(repo, 'target/fake-nvml/libnvidia-ml.so.1')}"`],
}, tests);
