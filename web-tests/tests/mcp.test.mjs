// Margin as an MCP server for a member's own agent (SPEC O4), driven by the
// official TypeScript MCP client over Streamable HTTP against the real
// server: the tools it lists, a read, an edit, decisions opened and listed,
// a Chat line — and the refusals an agent must be able to read: a stale
// revision, a twin typed ahead, a viewer's write, a missing token. Then a
// document's outline and decisions as resources, and `margin mcp`, the same
// server over stdio, whose subscriptions tell a resource's change.

import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { serverTest, sleep, waitFor } from '../lib/server.mjs';
import { documentWith, tool } from '../lib/doc.mjs';

/** An MCP client of `server` signed in as `as` (or with no token). */
async function connect(server, as, onCleanup) {
  const headers = as ? { Authorization: `Bearer ${server.tokens[as]}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(`${server.baseUrl}/mcp`), { requestInit: { headers } });
  const client = new Client({ name: 'margin-web-tests', version: '0.1.0' });
  await client.connect(transport);
  onCleanup(() => client.close());
  return client;
}

/** Calls `name`; returns its structured result and whether it is an error. */
async function call(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  return { ok: !result.isError, body: result.structuredContent };
}

serverTest('an agent lists the tools, reads, edits, opens decisions and posts to Chat as its member', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'MCP plan', ['Launch plan', 'Pick a region']);
  const alice = await connect(server, 'alice', onCleanup);

  const { tools } = await alice.listTools();
  assert.deepEqual(
    tools.map((t) => t.name),
    ['list_documents', 'read_document', 'edit_plan', 'open_decisions', 'open_decision', 'list_decisions', 'post_chat'],
  );
  const editPlan = tools.find((t) => t.name === 'edit_plan');
  assert.ok(editPlan.inputSchema.required.includes('document'), JSON.stringify(editPlan.inputSchema));

  const listed = await call(alice, 'list_documents', {});
  assert.ok(listed.ok && listed.body.documents.some((d) => d.id === doc.id), JSON.stringify(listed));

  const read = await call(alice, 'read_document', { document: doc.id });
  assert.ok(read.ok, JSON.stringify(read));
  assert.deepEqual(read.body.outline.map((b) => b.text), ['Launch plan', 'Pick a region']);

  const edited = await call(alice, 'edit_plan', {
    document: doc.id,
    revision: read.body.revision,
    edits: [{ op: 'insert', after: { index: 1, digest: read.body.outline[1].digest }, kind: 'paragraph', text: 'Budget: open' }],
  });
  assert.ok(edited.ok, JSON.stringify(edited));

  const again = await call(alice, 'read_document', { document: doc.id });
  assert.deepEqual(again.body.outline.map((b) => b.text), ['Launch plan', 'Pick a region', 'Budget: open']);
  const opened = await call(alice, 'open_decisions', {
    document: doc.id,
    revision: again.body.revision,
    cards: [
      {
        key: 'region',
        question: 'Which region first?',
        response: 'single_choice',
        choices: ['EU', 'US'],
        passages: [{ index: 1, digest: again.body.outline[1].digest }],
      },
    ],
  });
  assert.ok(opened.ok && opened.body.captured === 1, JSON.stringify(opened));

  const listedCards = await call(alice, 'list_decisions', { document: doc.id });
  assert.deepEqual(listedCards.body.decisions.map((c) => c.key), ['region']);
  // The same card the HTTP surface shows: one door, one answer.
  const overHttp = await server.api('GET', `/documents/${doc.id}/decisions`, { as: 'alice' });
  assert.deepEqual(listedCards.body, overHttp.body);

  const posted = await call(alice, 'post_chat', { document: doc.id, text: 'Region question is open.' });
  assert.ok(posted.ok, JSON.stringify(posted));
  const chat = await server.api('GET', `/documents/${doc.id}/chat`, { as: 'alice' });
  const line = chat.body.messages.find((m) => m.text === 'Region question is open.');
  assert.equal(line?.author, 'alice', JSON.stringify(chat.body));
});

serverTest('refusals reach the agent as their codes and change nothing', {}, async ({ server, onCleanup }) => {
  const { doc, read } = await documentWith(server, 'Refusals', ['Launch plan', 'Pick a region'], { bob: 'viewer' });
  const alice = await connect(server, 'alice', onCleanup);
  const bob = await connect(server, 'bob', onCleanup);

  // A twin typed ahead of the paragraph read: the batch is refused.
  await tool(server, 'alice', doc.id, 'edit_plan', {
    revision: read.revision,
    edits: [{ op: 'insert', kind: 'paragraph', text: 'Pick a region' }],
  });
  const twin = await call(alice, 'open_decisions', {
    document: doc.id,
    revision: read.revision,
    cards: [{ key: 'region', question: 'Which region?', response: 'free_text', passages: [{ index: 1, digest: read.outline[1].digest }] }],
  });
  assert.equal(twin.ok, false);
  assert.equal(twin.body.error.code, 'twin_now', JSON.stringify(twin));

  // A revision the server no longer holds as read.
  const stale = await call(alice, 'edit_plan', {
    document: doc.id,
    revision: read.revision + 1000,
    edits: [{ op: 'insert', kind: 'paragraph', text: 'Late' }],
  });
  assert.equal(stale.ok, false);
  assert.equal(stale.body.error.code, 'stale_revision', JSON.stringify(stale));

  // A viewer lists the decisions, but cannot write, nor use the Planner's
  // tools (SPEC D10), as over HTTP.
  const viewerRead = await call(bob, 'list_decisions', { document: doc.id });
  assert.ok(viewerRead.ok, JSON.stringify(viewerRead));
  const viewerTool = await call(bob, 'read_document', { document: doc.id });
  assert.equal(viewerTool.body.error.code, 'no_access', JSON.stringify(viewerTool));
  const viewerWrite = await call(bob, 'post_chat', { document: doc.id, text: 'let me in' });
  assert.equal(viewerWrite.ok, false);
  assert.equal(viewerWrite.body.error.code, 'forbidden', JSON.stringify(viewerWrite));

  // A document id that cannot be one is refused before any call is made.
  const bad = await call(alice, 'read_document', { document: '../machines' });
  assert.equal(bad.body.error.code, 'invalid_input', JSON.stringify(bad));

  const cards = await server.api('GET', `/documents/${doc.id}/decisions`, { as: 'alice' });
  assert.deepEqual(cards.body.decisions, []);
  const chat = await server.api('GET', `/documents/${doc.id}/chat`, { as: 'alice' });
  assert.ok(!chat.body.messages.some((m) => m.text === 'let me in'));
});

serverTest('without a token the MCP endpoint answers 401 with a Bearer challenge', {}, async ({ server, onCleanup }) => {
  const res = await fetch(`${server.baseUrl}/mcp`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
  });
  assert.equal(res.status, 401);
  assert.equal(res.headers.get('www-authenticate'), 'Bearer');
  await assert.rejects(connect(server, null, onCleanup));
});

serverTest("an agent lists a document's outline and decisions as resources and reads them as its member", {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Resources', ['Launch plan', 'Pick a region']);
  const alice = await connect(server, 'alice', onCleanup);
  const bob = await connect(server, 'bob', onCleanup);

  const { resources } = await alice.listResources();
  const uris = resources.map((r) => r.uri);
  assert.ok(uris.includes(`margin://documents/${doc.id}/outline`), JSON.stringify(uris));
  assert.ok(uris.includes(`margin://documents/${doc.id}/decisions`), JSON.stringify(uris));
  const { resourceTemplates } = await alice.listResourceTemplates();
  assert.deepEqual(resourceTemplates.map((t) => t.uriTemplate), [
    'margin://documents/{document}/outline',
    'margin://documents/{document}/decisions',
  ]);

  const outline = await alice.readResource({ uri: `margin://documents/${doc.id}/outline` });
  assert.equal(outline.contents[0].mimeType, 'application/json');
  const overHttp = await server.api('GET', `/documents/${doc.id}/outline`, { as: 'alice' });
  assert.deepEqual(JSON.parse(outline.contents[0].text), overHttp.body);

  // bob is no member: the document is not found for him, as over HTTP.
  assert.deepEqual((await bob.listResources()).resources, []);
  await assert.rejects(bob.readResource({ uri: `margin://documents/${doc.id}/outline` }), /-32002: no document .* that you can see/);
  await assert.rejects(alice.readResource({ uri: `margin://documents/${doc.id}/chat` }), /no resource/);
});

serverTest('margin mcp serves the same tools over stdio, and a subscribed resource says when it changes', { timeout: 60000 }, async ({ server, onCleanup }) => {
  const { doc, read } = await documentWith(server, 'Stdio', ['Launch plan', 'Pick a region'], { bob: 'viewer' });
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-mcp-'));
  onCleanup(() => rm(dir, { recursive: true, force: true }));
  const stdio = async (as) => {
    const tokenFile = path.join(dir, `${as}.token`);
    await writeFile(tokenFile, `${server.tokens[as]}\n`, { mode: 0o600 });
    const transport = new StdioClientTransport({
      command: server.bin,
      args: ['mcp', '--server', server.baseUrl, '--token-file', tokenFile],
      stderr: 'pipe',
    });
    const client = new Client({ name: 'margin-web-tests', version: '0.1.0' });
    await client.connect(transport);
    onCleanup(() => client.close());
    return client;
  };
  const alice = await stdio('alice');
  const bob = await stdio('bob');

  assert.equal((await alice.listTools()).tools.length, 7);
  const reread = await call(alice, 'read_document', { document: doc.id });
  assert.deepEqual(reread.body.outline.map((b) => b.text), ['Launch plan', 'Pick a region']);
  const viewerWrite = await call(bob, 'post_chat', { document: doc.id, text: 'let me in' });
  assert.equal(viewerWrite.body.error.code, 'forbidden', JSON.stringify(viewerWrite));

  const uri = `margin://documents/${doc.id}/outline`;
  const updated = [];
  alice.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updated.push(n.params.uri));
  await alice.subscribeResource({ uri });
  // Let the first read settle, then change the document.
  await sleep(2500);
  assert.deepEqual(updated, [], 'nothing changed yet');
  await tool(server, 'alice', doc.id, 'edit_plan', {
    revision: reread.body.revision,
    edits: [{ op: 'insert', after: { index: 1, digest: read.outline[1].digest }, kind: 'paragraph', text: 'Budget: open' }],
  });
  await waitFor(async () => updated.length > 0, 10000, 'the resource to say it changed');
  assert.deepEqual(updated, [uri]);
  await alice.unsubscribeResource({ uri });
  await assert.rejects(alice.subscribeResource({ uri: 'margin://documents/x/chat' }), /no resource/);
});
