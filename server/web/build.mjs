// Bundles the editor into ../assets/, the files the margin binary embeds
// (server/build.rs lists that directory, so no file is named by hand there).
//
// Every file but index.html is named by its content hash (app.<hash>.js), so
// the server can let browsers keep it for a year: a new build is a new name,
// which the never-cached index.html points to. Text files get .br and .gz
// siblings, compressed here once rather than by the server on every request.
// The build owns ../assets/: it deletes whatever an earlier build left there.
//
// The output must be byte-for-byte reproducible from a clean checkout: no
// timestamps, absolute paths or source maps, and compression at fixed
// settings (Node's gzip header carries mtime 0; its OS byte is pinned below).
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';
import { icoFromSvg } from './icon.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const src = join(here, 'src');
const out = join(here, '..', 'assets');

const bundle = await build({
  absWorkingDir: here,
  entryPoints: ['src/main.ts'],
  outfile: 'app.js',
  write: false,
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
if (bundle.outputFiles.length !== 1) {
  throw new Error(`esbuild wrote ${bundle.outputFiles.length} files; the editor is one app.js`);
}
const svg = await readFile(join(src, 'favicon.svg'));

// name → bytes, for everything this build writes.
const files = new Map();
// The path src/index.html refers to → the hashed file's path.
const hashedNames = new Map();

function addHashed(stem, ext, bytes, { text }) {
  const hash = createHash('sha256').update(bytes).digest('hex').slice(0, 10);
  const name = `${stem}.${hash}.${ext}`;
  hashedNames.set(`/assets/${stem}.${ext}`, `/assets/${name}`);
  add(name, bytes, { text });
}

function add(name, bytes, { text }) {
  files.set(name, bytes);
  if (!text) return; // the icon's PNG is deflated already
  files.set(`${name}.br`, brotli(bytes));
  files.set(`${name}.gz`, gzip(bytes));
}

function brotli(bytes) {
  return brotliCompressSync(bytes, {
    params: {
      [constants.BROTLI_PARAM_QUALITY]: constants.BROTLI_MAX_QUALITY,
      [constants.BROTLI_PARAM_MODE]: constants.BROTLI_MODE_TEXT,
      [constants.BROTLI_PARAM_SIZE_HINT]: bytes.length,
    },
  });
}

function gzip(bytes) {
  const gz = gzipSync(bytes, { level: 9 });
  // RFC 1952: bytes 4–7 are the mtime, 9 the OS. zlib writes mtime 0 but the
  // OS it was built for (3 on Unix, 19 on macOS…); pin 255, "unknown", so the
  // file is the same wherever it is built. No header CRC covers the byte.
  if (gz.readUInt32LE(4) !== 0) throw new Error('gzip wrote a timestamp; the build must not');
  gz[9] = 255;
  return gz;
}

addHashed('app', 'js', Buffer.from(bundle.outputFiles[0].contents), { text: true });
addHashed('app', 'css', await readFile(join(src, 'app.css')), { text: true });
addHashed('favicon', 'svg', svg, { text: true });
addHashed('favicon', 'ico', icoFromSvg(svg.toString('utf8')), { text: false });
add('index.html', rewriteReferences(await readFile(join(src, 'index.html'), 'utf8')), {
  text: true,
});

// Rewrites exactly the quoted references src/index.html makes to unhashed
// names, and nothing else of the page (its body is edited separately).
function rewriteReferences(html) {
  for (const [from, to] of hashedNames) {
    if (from.endsWith('.ico')) continue; // served at /favicon.ico, not linked
    const quoted = `"${from}"`;
    const count = html.split(quoted).length - 1;
    if (count !== 1) {
      throw new Error(`src/index.html must refer to ${quoted} exactly once (found ${count})`);
    }
    html = html.replace(quoted, `"${to}"`);
  }
  return Buffer.from(html, 'utf8');
}

await mkdir(out, { recursive: true });
for (const [name, bytes] of files) {
  // Unchanged files keep their mtime, so cargo does not re-embed them.
  const old = await readFile(join(out, name)).catch(() => null);
  if (!old || !old.equals(bytes)) await writeFile(join(out, name), bytes);
}
for (const name of await readdir(out)) {
  if (!files.has(name)) await rm(join(out, name), { recursive: true });
}
const written = [...files.keys()].filter((n) => !/\.(br|gz)$/.test(n));
console.log(`built ../assets/{${written.join(',')}} and their .br/.gz`);
