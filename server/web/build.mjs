// Bundles the editor into ../assets/, the files the margin binary embeds.
// The output must be byte-for-byte reproducible: no timestamps, hashes,
// absolute paths or source maps end up in it.
import { build } from 'esbuild';
import { copyFile, mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, '..', 'assets');

await mkdir(out, { recursive: true });
await build({
  absWorkingDir: here,
  entryPoints: ['src/main.ts'],
  outfile: join(out, 'app.js'),
  bundle: true,
  minify: true,
  sourcemap: false,
  format: 'iife',
  target: ['es2020'],
  platform: 'browser',
  charset: 'utf8',
  legalComments: 'eof',
  define: { 'process.env.NODE_ENV': '"production"' },
  logLevel: 'warning',
});
await copyFile(join(here, 'src', 'index.html'), join(out, 'index.html'));
await copyFile(join(here, 'src', 'app.css'), join(out, 'app.css'));
console.log('built ../assets/{app.js,app.css,index.html}');
