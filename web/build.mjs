// Bundles the dashboard into dist/: index.html and assets/app.{js,css}
// (uPlot included), which host/build.rs embeds into the sonde binary.
// No network at build or run time: everything comes from node_modules.
// Files are rewritten only when their content changes, so an unchanged
// dashboard does not make cargo rebuild sonde.
import * as esbuild from 'esbuild';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const result = await esbuild.build({
  entryPoints: { app: 'src/main.js' },
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['es2020'],
  outdir: 'dist/assets',
  write: false,
  logLevel: 'warning',
});
const files = new Map(result.outputFiles.map((f) => [relative('dist', f.path), Buffer.from(f.contents)]));
files.set('index.html', readFileSync('src/index.html'));

const walk = (dir) => (existsSync(dir) ? readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
  (e.isDirectory() ? walk(join(dir, e.name)) : [relative('dist', join(dir, e.name))])) : []);
for (const old of walk('dist')) if (!files.has(old)) rmSync(join('dist', old));
for (const [rel, bytes] of files) {
  const path = join('dist', rel);
  mkdirSync(join(path, '..'), { recursive: true });
  const same = existsSync(path) && readFileSync(path).equals(bytes);
  if (!same) writeFileSync(path, bytes);
  console.log(`web/dist/${rel}: ${bytes.length} bytes${same ? '' : ' (written)'}`);
}
