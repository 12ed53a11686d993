// Bundles the dashboard into dist/: index.html and assets/app.{js,css}
// (uPlot included), which host/build.rs embeds into the sonde binary.
// No network at build or run time: everything comes from node_modules.
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, rmSync, statSync } from 'node:fs';

rmSync('dist', { recursive: true, force: true });
mkdirSync('dist/assets', { recursive: true });
await esbuild.build({
  entryPoints: { app: 'src/main.js' },
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['es2020'],
  outdir: 'dist/assets',
  logLevel: 'warning',
});
copyFileSync('src/index.html', 'dist/index.html');
for (const f of ['index.html', 'assets/app.js', 'assets/app.css']) {
  console.log(`dist/${f}: ${statSync(`dist/${f}`).size} bytes`);
}
