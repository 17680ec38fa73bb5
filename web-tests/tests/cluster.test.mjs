// Several servers on one PostgreSQL (SPEC C1-C3) with the unmodified npm
// yjs + y-websocket client: three `margin serve --cluster` processes, one
// client on each, edits converge through whichever node owns the document,
// and after kill -9 of the owner the clients reconnect by themselves to the
// nodes they were on and converge with nothing acknowledged lost.
//
// Cluster mode needs PostgreSQL: each test makes a schema of its own in
// TEST_DATABASE_URL (with `psql`) and skips when either is missing.

import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { MarginServer, freePort, waitFor } from '../lib/server.mjs';
import { connectClient, appendBlock } from '../lib/yclient.mjs';

const BASE = process.env.TEST_DATABASE_URL;
// The schemas are made with PostgreSQL's own client.
const PSQL = spawnSync('psql', ['--version']).status === 0;
const SKIP = !BASE ? 'TEST_DATABASE_URL is not set' : !PSQL ? 'psql (PostgreSQL client) is not installed' : false;

function psql(url, sql) {
  return new Promise((resolve, reject) => {
    execFile('psql', [url, '-q', '-v', 'ON_ERROR_STOP=1', '-c', sql], { timeout: 10000 }, (err, _out, stderr) =>
      err ? reject(new Error(`psql failed: ${err.message}\n${stderr}`)) : resolve(),
    );
  });
}

/** `n` cluster nodes on a fresh schema, with account alice; torn down after `fn`. */
function clusterTest(name, n, fn) {
  test(name, { timeout: 90000, skip: SKIP }, async () => {
    const schema = `web_${Math.random().toString(36).slice(2, 10)}`;
    await psql(BASE, `CREATE SCHEMA ${schema}`);
    const url = `${BASE}${BASE.includes('?') ? '&' : '?'}options=-c%20search_path%3D${schema}`;
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'margin-cluster-test-'));
    const nodes = [];
    const cleanups = [];
    try {
      for (let i = 0; i < n; i += 1) {
        const node = new MarginServer({ dataDir, port: await freePort(), databaseUrl: url, serveArgs: ['--cluster'] });
        await node.start();
        nodes.push(node);
      }
      const token = await nodes[0].addAccount('alice');
      for (const node of nodes) node.tokens.alice = token;
      await fn({ nodes, token, onCleanup: (f) => cleanups.push(f) });
    } catch (e) {
      for (const [i, node] of nodes.entries()) {
        process.stderr.write(`\n----- node ${i} output for failed test "${name}" -----\n${node.logs}\n`);
      }
      throw e;
    } finally {
      for (const f of cleanups.reverse()) await Promise.resolve().then(f).catch(() => {});
      for (const node of nodes) if (node.child) await node.kill().catch(() => {});
      await rm(dataDir, { recursive: true, force: true });
      await psql(BASE, `DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => {});
    }
  });
}

function waitForTexts(client, expected, timeoutMs, who) {
  return waitFor(
    () => JSON.stringify(client.texts()) === JSON.stringify(expected),
    timeoutMs,
    `${who} to hold ${JSON.stringify(expected)} (has ${JSON.stringify(client.texts())})`,
  );
}

clusterTest('y-websocket clients on three nodes converge through the document owner', 3, async ({ nodes, token, onCleanup }) => {
  const doc = await nodes[0].createDocument('alice', 'Spread');
  const clients = nodes.map((node) => connectClient(node, doc.id, token));
  for (const c of clients) onCleanup(() => c.destroy());
  for (const c of clients) await c.waitSynced(10000);
  for (let round = 0; round < 3; round += 1) {
    clients.forEach((c, at) => appendBlock(c.doc, `node ${at} round ${round}`));
  }
  await waitFor(() => clients.every((c) => c.texts().length === 9), 10000, 'every client to hold 9 blocks');
  const expected = clients[0].texts();
  for (const c of clients) assert.deepEqual(c.texts(), expected);
  for (const c of clients) assert.deepEqual(c.closes, [], 'nobody was disconnected');
  // Whatever node is asked, it answers with what was committed.
  for (const node of nodes) {
    const outline = await node.outline('alice', doc.id);
    assert.deepEqual(outline.blocks.map((b) => b.text), expected);
  }
});

clusterTest('after kill -9 of the owner, y-websocket clients reconnect by themselves and lose nothing', 3, async ({ nodes, token, onCleanup }) => {
  const doc = await nodes[0].createDocument('alice', 'Failover');
  // The first client makes node 0 the owner; the others reach it through
  // nodes 1 and 2.
  const onOwner = connectClient(nodes[0], doc.id, token);
  onCleanup(() => onOwner.destroy());
  await onOwner.waitSynced(10000);
  const writer = connectClient(nodes[1], doc.id, token);
  const reader = connectClient(nodes[2], doc.id, token);
  onCleanup(() => writer.destroy());
  onCleanup(() => reader.destroy());
  await writer.waitSynced(10000);
  await reader.waitSynced(10000);
  const before = Array.from({ length: 10 }, (_, i) => `line ${i}`);
  for (const text of before) appendBlock(writer.doc, text);
  await waitForTexts(reader, before, 10000, 'the reader');

  onOwner.destroy();
  const exit = await nodes[0].kill();
  assert.equal(exit.signal, 'SIGKILL');
  // Both are told the document went away, reconnect on their own, and a
  // node that took the document over serves them.
  await waitFor(() => writer.closes.length > 0 && reader.closes.length > 0, 10000, 'both clients to see the close');
  assert.ok(reader.closes.every((c) => c.code === 1001 || c.code === 1006), JSON.stringify(reader.closes));
  appendBlock(writer.doc, 'after failover');
  const after = [...before, 'after failover'];
  await waitForTexts(reader, after, 15000, 'the reader after failover');
  await waitForTexts(writer, after, 15000, 'the writer after failover');
  const outline = await nodes[1].outline('alice', doc.id);
  assert.deepEqual(outline.blocks.map((b) => b.text), after);
});
