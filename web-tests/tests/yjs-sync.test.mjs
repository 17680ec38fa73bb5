// SPEC S1–S4, W2, A1: the unmodified npm `yjs` + `y-websocket` client against a real margin server.

import assert from 'node:assert/strict';
import { serverTest, waitFor, sleep, withTimeout } from '../lib/server.mjs';
import { connectClient, appendBlock, blockTexts, probeWebSocket, Y } from '../lib/yclient.mjs';
import WebSocket from 'ws';

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** Waits until `client` holds exactly `expected` block texts. */
function waitForTexts(client, expected, timeoutMs = 5000, who = 'client') {
  return waitFor(() => same(client.texts(), expected), timeoutMs, `${who} to hold ${JSON.stringify(expected)} (has ${JSON.stringify(client.texts())})`);
}

/** Waits until the outline's block texts are exactly `expected`; returns the outline. */
function waitForOutline(server, as, docId, expected, timeoutMs = 5000) {
  let last;
  return waitFor(
    async () => {
      last = await server.outline(as, docId);
      return same(last.blocks.map((b) => b.text), expected) && last;
    },
    timeoutMs,
    `outline texts ${JSON.stringify(expected)} (last: ${JSON.stringify(last?.blocks?.map((b) => b.text))})`,
  );
}

serverTest('two y-websocket clients converge through the server', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Converge');
  await server.addMember('alice', doc.id, 'bob', 'editor');

  const a = connectClient(server, doc.id, server.tokens.alice);
  onCleanup(() => a.destroy());
  const b = connectClient(server, doc.id, server.tokens.bob);
  onCleanup(() => b.destroy());
  await a.waitSynced();
  await b.waitSynced();
  assert.deepEqual(a.texts(), []);
  assert.deepEqual(b.texts(), []);

  appendBlock(a.doc, 'Hello from A');
  await waitForTexts(b, ['Hello from A'], 5000, 'B');

  appendBlock(b.doc, 'Reply from B');
  await waitForTexts(a, ['Hello from A', 'Reply from B'], 5000, 'A');

  // Concurrent edits on both sides, then an edit inside an existing block.
  appendBlock(a.doc, 'A concurrent');
  appendBlock(b.doc, 'B concurrent');
  const firstText = a.fragment.get(0).get(0);
  assert.ok(firstText instanceof Y.XmlText);
  firstText.insert('Hello'.length, ', world');

  await waitFor(
    () => a.texts().length === 4 && same(a.texts(), b.texts()) && a.texts()[0] === 'Hello, world from A',
    5000,
    `A and B to converge (A: ${JSON.stringify(a.texts())}, B: ${JSON.stringify(b.texts())})`,
  );
  assert.deepEqual(a.texts().slice(0, 2), ['Hello, world from A', 'Reply from B']);
  assert.deepEqual([...a.texts().slice(2)].sort(), ['A concurrent', 'B concurrent']);
  assert.deepEqual(Y.encodeStateVector(a.doc), Y.encodeStateVector(b.doc));

  // The server holds the same text as both clients.
  await waitForOutline(server, 'alice', doc.id, a.texts());
});

serverTest('a client that connects later receives the full state from the server', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Late joiner');
  const a = connectClient(server, doc.id, server.tokens.alice);
  onCleanup(() => a.destroy());
  await a.waitSynced();
  appendBlock(a.doc, 'Plan', 'heading', { level: 1 });
  appendBlock(a.doc, 'one');
  appendBlock(a.doc, 'two');
  const expected = ['Plan', 'one', 'two'];
  await waitForOutline(server, 'alice', doc.id, expected);

  // The writer leaves: the late client can only get the text from the server.
  a.destroy();
  const late = connectClient(server, doc.id, server.tokens.alice);
  onCleanup(() => late.destroy());
  await late.waitSynced();
  await waitForTexts(late, expected, 5000, 'late client');
  const heading = late.fragment.get(0);
  assert.equal(heading.nodeName, 'heading');
  assert.equal(String(heading.getAttribute('level')), '1');
  assert.equal(late.fragment.get(1).nodeName, 'paragraph');
});

serverTest('document text survives a graceful restart (SIGTERM)', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Durable');
  await server.addMember('alice', doc.id, 'bob', 'editor');
  const a = connectClient(server, doc.id, server.tokens.alice);
  const b = connectClient(server, doc.id, server.tokens.bob);
  onCleanup(() => a.destroy());
  onCleanup(() => b.destroy());
  await a.waitSynced();
  await b.waitSynced();
  appendBlock(a.doc, 'written before SIGTERM');
  // A broadcast update has been persisted (S3).
  await waitForTexts(b, ['written before SIGTERM'], 5000, 'B');
  // Old clients must not re-supply the text after the restart.
  a.destroy();
  b.destroy();

  const exit = await server.stop();
  assert.equal(exit.signal === 'SIGTERM' || exit.code === 0, true, `unexpected exit ${JSON.stringify(exit)}`);
  await server.start();

  const c = connectClient(server, doc.id, server.tokens.bob);
  onCleanup(() => c.destroy());
  await c.waitSynced();
  await waitForTexts(c, ['written before SIGTERM'], 5000, 'client after restart');
  await waitForOutline(server, 'alice', doc.id, ['written before SIGTERM']);

  // The document still accepts edits after the restart, and they persist again.
  appendBlock(c.doc, 'written after restart');
  await waitForOutline(server, 'alice', doc.id, ['written before SIGTERM', 'written after restart']);
});

serverTest('a broadcast update survives kill -9 of the server (SIGKILL)', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Crash');
  await server.addMember('alice', doc.id, 'bob', 'editor');
  const a = connectClient(server, doc.id, server.tokens.alice);
  const b = connectClient(server, doc.id, server.tokens.bob);
  onCleanup(() => a.destroy());
  onCleanup(() => b.destroy());
  await a.waitSynced();
  await b.waitSynced();
  appendBlock(a.doc, 'first');
  appendBlock(a.doc, 'second, seen by B before the crash');
  await waitForTexts(b, ['first', 'second, seen by B before the crash'], 5000, 'B');
  a.destroy();
  b.destroy();

  const exit = await server.kill();
  assert.equal(exit.signal, 'SIGKILL');
  await server.start();

  const c = connectClient(server, doc.id, server.tokens.alice);
  onCleanup(() => c.destroy());
  await c.waitSynced();
  await waitForTexts(c, ['first', 'second, seen by B before the crash'], 5000, 'client after kill -9');
  const res = await server.api('GET', `/documents/${doc.id}`, { as: 'alice' });
  assert.equal(res.status, 200);
  assert.equal(res.body.title, 'Crash');
  assert.ok(res.body.revision >= 1, `revision after restart: ${res.body.revision}`);
});

serverTest('a viewer receives updates but its edits are refused with close code 4403', {
  accounts: ['alice', 'carol'],
}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Read only for carol');
  await server.addMember('alice', doc.id, 'carol', 'viewer');
  const viewerDoc = await server.api('GET', `/documents/${doc.id}`, { as: 'carol' });
  assert.equal(viewerDoc.status, 200);
  assert.equal(viewerDoc.body.role, 'viewer');

  const owner = connectClient(server, doc.id, server.tokens.alice);
  onCleanup(() => owner.destroy());
  const viewer = connectClient(server, doc.id, server.tokens.carol);
  onCleanup(() => viewer.destroy());
  await owner.waitSynced();
  await viewer.waitSynced();

  appendBlock(owner.doc, 'from the owner');
  await waitForTexts(viewer, ['from the owner'], 5000, 'viewer');
  assert.deepEqual(viewer.closes, [], 'viewer was disconnected before it edited');

  appendBlock(viewer.doc, 'from the viewer');
  await waitFor(() => viewer.closes.some((c) => c.code === 4403), 5000, `a 4403 close for the viewer (closes: ${JSON.stringify(viewer.closes)})`);
  viewer.destroy();

  // Give a wrongly-accepted edit time to arrive, then check it did not.
  await sleep(500);
  appendBlock(owner.doc, 'owner again');
  await waitForOutline(server, 'alice', doc.id, ['from the owner', 'owner again']);
  assert.deepEqual(owner.texts(), ['from the owner', 'owner again']);

  // A new client sees only the owner's text.
  const fresh = connectClient(server, doc.id, server.tokens.alice);
  onCleanup(() => fresh.destroy());
  await fresh.waitSynced();
  await waitForTexts(fresh, ['from the owner', 'owner again'], 5000, 'fresh client');
  await sleep(300);
  assert.deepEqual(fresh.texts(), ['from the owner', 'owner again']);
});

serverTest('a bad or missing token is refused with HTTP 401', { accounts: ['alice', 'dave'] }, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Private');
  const syncUrl = (token) => `${server.wsBase}/documents/${doc.id}/sync${token === undefined ? '' : `?token=${encodeURIComponent(token)}`}`;

  const bad = await probeWebSocket(syncUrl('not-a-real-token'));
  assert.equal(bad.opened, false, 'a bad token opened the sync socket');
  assert.equal(bad.status, 401);

  const missing = await probeWebSocket(syncUrl(undefined));
  assert.equal(missing.opened, false, 'no token opened the sync socket');
  assert.equal(missing.status, 401);

  // An authenticated account that is not a member cannot open the document either.
  const stranger = await probeWebSocket(syncUrl(server.tokens.dave));
  assert.equal(stranger.opened, false, 'a non-member opened the sync socket');
  const strangerHttp = await server.api('GET', `/documents/${doc.id}`, { as: 'dave' });
  assert.ok([403, 404].includes(strangerHttp.status), `non-member GET /documents/{id}: HTTP ${strangerHttp.status}`);
  assert.equal(stranger.status, strangerHttp.status, 'sync refuses a non-member like GET /documents/{id} does');

  const me = await server.api('GET', '/me', { token: 'not-a-real-token' });
  assert.equal(me.status, 401);
  assert.equal(typeof me.body?.error?.code, 'string');
  assert.equal(typeof me.body?.error?.message, 'string');
  const meOk = await server.api('GET', '/me', { as: 'alice' });
  assert.deepEqual(meOk.body, { account: 'alice' });

  // The real client with a bad token never syncs, and its edits reach nobody.
  const intruder = connectClient(server, doc.id, 'not-a-real-token');
  onCleanup(() => intruder.destroy());
  appendBlock(intruder.doc, 'intruder text');
  await sleep(1000);
  assert.equal(intruder.provider.synced, false);
  assert.equal(intruder.provider.wsconnected, false);
  const outline = await server.outline('alice', doc.id);
  assert.deepEqual(outline.blocks, []);
});

serverTest('the outline reflects text typed through y-websocket', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Outline');
  assert.equal(typeof doc.revision, 'number');
  const a = connectClient(server, doc.id, server.tokens.alice);
  onCleanup(() => a.destroy());
  await a.waitSynced();

  appendBlock(a.doc, 'The plan', 'heading', { level: 1 });
  appendBlock(a.doc, 'First step');
  appendBlock(a.doc, 'Second step');
  const o1 = await waitForOutline(server, 'alice', doc.id, ['The plan', 'First step', 'Second step']);
  assert.equal(o1.document, doc.id);
  assert.deepEqual(o1.blocks.map((b) => b.index), [0, 1, 2]);
  assert.deepEqual(o1.blocks.map((b) => b.kind), ['heading', 'paragraph', 'paragraph']);
  for (const b of o1.blocks) {
    assert.match(b.digest, /^[0-9a-f]{64}$/, `digest ${b.digest} is not a blake3 hex digest`);
    assert.ok(b.identity !== null && b.identity !== undefined && b.identity !== '', 'block without identity');
  }
  assert.equal(new Set(o1.blocks.map((b) => JSON.stringify(b.identity))).size, 3, 'block identities are not distinct');
  assert.equal(new Set(o1.blocks.map((b) => b.digest)).size, 3, 'different blocks share a digest');
  assert.ok(o1.revision > doc.revision, `revision did not advance: ${doc.revision} -> ${o1.revision}`);
  const meta = await server.api('GET', `/documents/${doc.id}`, { as: 'alice' });
  assert.equal(meta.body.revision, o1.revision);

  // Editing a block's text changes its digest but keeps its identity (S4).
  a.fragment.get(2).get(0).insert('Second step'.length, ' (revised)');
  const o2 = await waitForOutline(server, 'alice', doc.id, ['The plan', 'First step', 'Second step (revised)']);
  assert.ok(o2.revision > o1.revision, `revision did not advance: ${o1.revision} -> ${o2.revision}`);
  assert.deepEqual(o2.blocks[2].identity, o1.blocks[2].identity);
  assert.notEqual(o2.blocks[2].digest, o1.blocks[2].digest);
  assert.deepEqual(o2.blocks[0], o1.blocks[0]);
  assert.deepEqual(o2.blocks[1], o1.blocks[1]);

  // Same kind and text: same digest; deleted and re-created: a new identity.
  a.fragment.delete(1, 1);
  appendBlock(a.doc, 'First step');
  const o3 = await waitForOutline(server, 'alice', doc.id, ['The plan', 'Second step (revised)', 'First step']);
  assert.equal(o3.blocks[2].digest, o1.blocks[1].digest);
  assert.notDeepEqual(o3.blocks[2].identity, o1.blocks[1].identity);
  assert.deepEqual(o3.blocks[1].identity, o1.blocks[2].identity);

  // The client's own view matches what the server reports.
  assert.deepEqual(blockTexts(a.doc), o3.blocks.map((b) => b.text));
});

/** lib0's unsigned varint. */
function varUint(n) {
  const out = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return out;
}

/** lib0's length-prefixed bytes (a string is its UTF-8). */
const varBytes = (bytes) => [...varUint(bytes.length), ...bytes];

serverTest('an awareness state that is not JSON closes its sender, and y-websocket clients keep syncing', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Awareness');
  await server.addMember('alice', doc.id, 'bob', 'viewer');
  const a = connectClient(server, doc.id, server.tokens.alice);
  onCleanup(() => a.destroy());
  await a.waitSynced();
  appendBlock(a.doc, 'before');

  // A viewer's raw socket announces a state y-protocols cannot parse.
  const ws = new WebSocket(`${server.wsBase}/documents/${doc.id}/sync?token=${encodeURIComponent(server.tokens.bob)}`);
  onCleanup(() => ws.terminate());
  await withTimeout(new Promise((resolve, reject) => { ws.on('open', resolve); ws.on('error', reject); }), 5000, 'raw socket to open');
  const entry = [...varUint(1), ...varUint(987654), ...varUint(1), ...varBytes([...Buffer.from('<not json>')])];
  const closed = new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: String(reason) })));
  ws.send(Uint8Array.from([1, ...varBytes(entry)]));
  const { code, reason } = await withTimeout(closed, 5000, 'the server to close the raw socket');
  assert.equal(code, 1007, reason);
  assert.match(reason, /not a JSON object/);

  // Clients already there and clients joining later keep syncing.
  const late = connectClient(server, doc.id, server.tokens.bob);
  onCleanup(() => late.destroy());
  await late.waitSynced();
  appendBlock(a.doc, 'after');
  await waitForTexts(late, ['before', 'after'], 5000, 'the late joiner');
  assert.ok(!late.provider.awareness.getStates().has(987654), 'the bad state was relayed');
  assert.deepEqual([...a.errors, ...late.errors], []);
  assert.ok(a.provider.wsconnected && late.provider.wsconnected, 'a y-websocket client was disconnected');
});
