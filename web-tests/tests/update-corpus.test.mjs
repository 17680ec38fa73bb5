// SPEC A3a, no false refusals: over 100,000 updates from real npm yjs
// clients — 2 to 5 editors at once on one plan, editing it as y-prosemirror
// does (lib/editing.mjs: blocks, nested lists, typing, deletions, marks,
// attributes, moves, splits, undo and redo), dropping off to edit offline
// and merging back through y-websocket's sync step 1 and 2 against a
// partial state vector — go through the real server, and every one is
// accepted: no editor is refused, and every replica and a fresh client end
// equal. Seeded, generated in the test.

import assert from 'node:assert/strict';
import { serverTest, waitFor } from '../lib/server.mjs';
import { connectClient } from '../lib/yclient.mjs';
import { Editor, shape, walk } from '../lib/editing.mjs';

const TARGET = 100_000;
const json = (doc) => JSON.stringify(shape(doc));

serverTest(
  'over 100,000 updates from concurrent real yjs editors are all accepted',
  { accounts: ['alice', 'bob', 'carol'], timeout: 1_500_000 },
  async ({ server }) => {
    const w = walk(2026);
    const accounts = ['alice', 'bob', 'carol'];
    let updates = 0;
    let documents = 0;
    const started = Date.now();
    while (updates < TARGET) {
      documents++;
      const doc = await server.createDocument('alice', `Corpus ${documents}`);
      for (const account of accounts.slice(1)) await server.addMember('alice', doc.id, account, 'editor');
      const count = 2 + w.below(4);
      const editors = [];
      for (let i = 0; i < count; i++) {
        const client = connectClient(server, doc.id, server.tokens[w.pick(accounts)]);
        await client.waitSynced(10000);
        client.doc.on('update', (_update, origin) => {
          if (origin !== client.provider) updates++;
        });
        editors.push({ client, editor: new Editor(client.doc, documents * 100 + i) });
      }
      try {
        // A document grows to a few thousand edits, then the next one starts.
        for (let step = 0; step < 2500 && updates < TARGET; step++) {
          const { client, editor } = w.pick(editors);
          if (w.chance(0.01)) {
            // Offline for a while: its edits merge back on reconnect.
            if (client.provider.wsconnected) client.provider.disconnect();
            else client.provider.connect();
          }
          editor.step();
          // Let the sockets carry what was written.
          if (step % 20 === 0) await new Promise((resolve) => setImmediate(resolve));
        }
        for (const { client } of editors) if (!client.provider.shouldConnect) client.provider.connect();
        const refusedNow = () => editors.flatMap(({ client }) => client.closes.filter((c) => [1007, 1011, 4400, 4403].includes(c.code)));
        await waitFor(
          () => refusedNow().length > 0 || editors.every(({ client }) => client.provider.synced),
          30000,
          `document ${documents}: every editor to sync again`,
        );
        assert.deepEqual(refusedNow(), [], `document ${documents}: an honest editor was refused`);
        const fresh = connectClient(server, doc.id, server.tokens.alice);
        try {
          await fresh.waitSynced(30000);
          await waitFor(
            () => editors.every(({ client }) => json(client.doc) === json(fresh.doc)),
            60000,
            `document ${documents}: every editor and a fresh client to agree`,
          );
        } finally {
          fresh.destroy();
        }
        const refused = editors.flatMap(({ client }) => client.closes.filter((c) => [1007, 1011, 4400, 4403].includes(c.code)));
        assert.deepEqual(refused, [], `document ${documents}: an honest editor was refused`);
      } finally {
        for (const { client } of editors) client.destroy();
      }
    }
    console.log(`${updates} updates in ${documents} documents, ${Math.round((Date.now() - started) / 1000)} s`);
    assert.ok(updates >= TARGET);
  },
);
