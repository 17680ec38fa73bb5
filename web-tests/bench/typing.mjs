// Keystroke to screen in the editor, against a bare contenteditable holding
// the same paragraphs in the same Chromium (SPEC B1; issue 42's typing
// finding). For each size, a document of that many paragraphs is written
// through the real y-websocket client, opened in the editor, and typed
// into in the middle, one key at a time; then the same paragraphs in a
// bare `contenteditable` div. A key's time runs from its `keydown` to the
// first animation frame after the text changed on the page. Prints p50 and
// p99 per size and what the editor adds over the bare figure; no
// assertions. Bounded: KEYS keys per page, every wait has a deadline.
//
//   node bench/typing.mjs                          sizes 1000,3000,10000, 150 keys
//   node bench/typing.mjs --sizes=1000 --keys=50   a quick look
//   JSON=../server/benches/results/$(date +%F)-typing.jsonl node bench/typing.mjs
//
// Needs the margin binary (MARGIN_BIN, else target/debug/margin; with
// MARGIN_COMMIT naming the commit it was built from when not this one) and
// Debian's Chromium. What is measured is the browser's work; the server's
// build (debug or release) only serves the page and the document.

import { appendFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { chromium } from 'playwright-core';
import { startServer, waitFor } from '../lib/server.mjs';
import { appendBlock, connectClient } from '../lib/yclient.mjs';
import { CHROMIUM } from '../lib/browser.mjs';

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? fallback;
const SIZES = arg('sizes', '1000,3000,10000').split(',').map(Number);
const KEYS = Number(arg('keys', '150'));
const PATIENCE = 120000;
const TEXT = 'of a plan that people type into, long enough to wrap once at this width';

/** The p-th percentile of `xs`. */
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

/** Writes `size` paragraphs into a new document of alice's, through y-websocket. */
async function writeDocument(server, size) {
  const doc = await server.createDocument('alice', `Typing ${size}`);
  const client = connectClient(server, doc.id, server.tokens.alice);
  await client.waitSynced();
  // In slices: each transaction is one update, under the socket's frame bound.
  for (let from = 0; from < size; from += 500) {
    client.doc.transact(() => {
      for (let i = from; i < Math.min(size, from + 500); i++) appendBlock(client.doc, `Paragraph ${i} ${TEXT}.`);
    });
  }
  await waitFor(async () => (await server.outline('alice', doc.id)).blocks.length === size, PATIENCE, `${size} paragraphs stored`);
  client.destroy();
  return doc;
}

/** Times KEYS keystrokes typed at the end of the middle paragraph of `root`. */
async function typeInto(page, root, paragraphs) {
  await page.evaluate((selector) => {
    const el = document.querySelector(selector);
    window.__lat = [];
    let pressed = null;
    document.addEventListener('keydown', () => (pressed = performance.now()), true);
    new MutationObserver(() => {
      if (pressed === null) return;
      const start = pressed;
      pressed = null;
      requestAnimationFrame(() => window.__lat.push(performance.now() - start));
    }).observe(el, { subtree: true, childList: true, characterData: true });
  }, root);
  const middle = page.locator(`${root} > p`).nth(Math.floor(paragraphs / 2));
  await middle.click();
  await page.keyboard.press('End');
  for (let i = 0; i < KEYS; i++) {
    await page.keyboard.press(i % 8 === 7 ? 'Space' : 'x');
    await page.waitForFunction((n) => window.__lat.length >= n, i + 1, { timeout: 10000 });
  }
  // The first keys warm caches; they are typed, not counted.
  return (await page.evaluate(() => window.__lat)).slice(10);
}

async function main() {
  const server = await startServer({ accounts: ['alice'] });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  // The commit the binary (and the editor it embeds) was built from: this
  // checkout's, unless MARGIN_COMMIT names another (a binary built elsewhere).
  const commit = process.env.MARGIN_COMMIT ?? execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
  const run = {
    kind: 'run',
    bench: 'typing',
    commit,
    at: new Date().toISOString(),
    machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, memGiB: Math.round(os.totalmem() / 2 ** 30) },
    chromium: browser.version(),
    keys: KEYS,
    binary: server.bin,
  };
  if (process.env.JSON) appendFileSync(process.env.JSON, `${JSON.stringify(run)}\n`);
  console.log(`typing bench at ${commit}, ${KEYS} keys per page (the first 10 not counted), Chromium ${run.chromium}`);
  console.log('paragraphs  editor p50/p99 ms  bare p50/p99 ms  editor adds (p50)');
  try {
    for (const size of SIZES) {
      const doc = await writeDocument(server, size);
      const context = await browser.newContext({ viewport: { width: 1366, height: 900 } });
      await context.addInitScript((t) => localStorage.setItem('margin.token', t), server.tokens.alice);
      const page = await context.newPage();
      await page.goto(`${server.baseUrl}/#/d/${doc.id}`);
      await page.waitForFunction((n) => document.querySelectorAll('#editor .ProseMirror > p').length >= n, size, { timeout: PATIENCE });
      const editor = await typeInto(page, '#editor .ProseMirror', size);
      await context.close();

      const bare = await browser.newContext({ viewport: { width: 1366, height: 900 } });
      const plain = await bare.newPage();
      await plain.setContent(
        `<div id="bare" contenteditable style="max-width:760px;padding:28px 36px;font:16px/1.6 sans-serif">${Array.from(
          { length: size },
          (_, i) => `<p>Paragraph ${i} ${TEXT}.</p>`,
        ).join('')}</div>`,
      );
      const baseline = await typeInto(plain, '#bare', size);
      await bare.close();

      const row = {
        kind: 'result',
        paragraphs: size,
        editor: { p50: pct(editor, 50), p99: pct(editor, 99), n: editor.length },
        bare: { p50: pct(baseline, 50), p99: pct(baseline, 99), n: baseline.length },
      };
      if (process.env.JSON) appendFileSync(process.env.JSON, `${JSON.stringify(row)}\n`);
      const f = (x) => x.toFixed(1).padStart(5);
      console.log(
        `${String(size).padStart(10)}  ${f(row.editor.p50)} / ${f(row.editor.p99)}     ${f(row.bare.p50)} / ${f(row.bare.p99)}   ${f(row.editor.p50 - row.bare.p50)}`,
      );
    }
  } finally {
    await browser.close();
    await server.cleanup();
  }
}

await main();
