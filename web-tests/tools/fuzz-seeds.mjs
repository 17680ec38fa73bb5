// Writes the document_update fuzz targets' history and seeds from real
// npm yjs clients (server/fuzz/README.md): three editors on one plan, the
// third going offline while the other two go on, so its updates are
// concurrent with what the server holds and reach yrs' conflict
// resolution. Deterministic (seeded); run from web-tests/ after `npm ci`:
//
//   node tools/fuzz-seeds.mjs
//
// It writes server/fuzz/history/concurrent.updates (the server's history:
// every update it received, each a u32 little-endian length and the
// bytes) and server/fuzz/corpus/document_update/history-* (a selector
// byte, then one update; see fuzz_targets/document_update.rs).

import fs from 'node:fs';
import path from 'node:path';
import * as Y from 'yjs';
import { Editor } from '../lib/editing.mjs';
import { repoRoot } from '../lib/server.mjs';

const fuzz = path.join(repoRoot, 'server', 'fuzz');

function replica(client) {
  const doc = new Y.Doc();
  doc.clientID = client;
  return doc;
}

const [a, b, c] = [replica(1001), replica(1002), replica(1003)];
const history = [];
const online = new Set([a, b, c]);
for (const doc of [a, b, c]) {
  doc.on('update', (update, origin) => {
    if (origin === 'relay') return;
    // What the server receives: every online editor's update, relayed on.
    if (!online.has(doc)) return;
    history.push(update);
    for (const other of online) if (other !== doc) Y.applyUpdate(other, update, 'relay');
  });
}
const editors = new Map([a, b, c].map((doc, i) => [doc, new Editor(doc, 17 + i)]));

for (let i = 0; i < 120; i++) editors.get([a, b, c][i % 3]).step();
// The third editor goes offline and keeps editing; the others go on.
online.delete(c);
const offline = [];
c.on('update', (update, origin) => {
  if (origin !== 'relay') offline.push(update);
});
for (let i = 0; i < 60; i++) editors.get([a, b][i % 2]).step();
for (let i = 0; i < 40; i++) editors.get(c).step();

const server = new Y.Doc();
for (const update of history) Y.applyUpdate(server, update);
const held = Y.encodeStateVector(server);

const seeds = {
  // Its sync step 2 on reconnecting: everything it made offline.
  'history-offline-step2': Y.encodeStateAsUpdate(c, held),
  'history-offline-first': offline[0],
  'history-offline-merged': Y.mergeUpdates(offline),
};
// The next few edits of an online editor, one update each.
const next = [];
a.on('update', (update, origin) => {
  if (origin !== 'relay') next.push(update);
});
for (let i = 0; i < 5; i++) editors.get(a).step();
seeds['history-online-next'] = next[0];
// A new editor that joined, synced and typed.
const d = replica(1004);
Y.applyUpdate(d, Y.encodeStateAsUpdate(server));
const fresh = [];
d.on('update', (update) => fresh.push(update));
const editor = new Editor(d, 99);
for (let i = 0; i < 8; i++) editor.step();
seeds['history-new-editor'] = Y.mergeUpdates(fresh);

fs.mkdirSync(path.join(fuzz, 'history'), { recursive: true });
const framed = Buffer.concat(
  history.flatMap((update) => {
    const len = Buffer.alloc(4);
    len.writeUInt32LE(update.length);
    return [len, Buffer.from(update)];
  }),
);
fs.writeFileSync(path.join(fuzz, 'history', 'concurrent.updates'), framed);
for (const [name, update] of Object.entries(seeds)) {
  // Selector 1: against the history, its clients owned by another member.
  // Selector 3: against the history, nobody owning them.
  for (const selector of [1, 3]) {
    const file = path.join(fuzz, 'corpus', 'document_update', `${name}-${selector}`);
    fs.writeFileSync(file, Buffer.concat([Buffer.from([selector]), Buffer.from(update)]));
  }
}
console.log(`history: ${history.length} updates, ${framed.length} bytes; ${Object.keys(seeds).length * 2} seeds`);
