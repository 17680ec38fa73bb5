// The TypeScript connector SDK's kept replies and run reports (SPEC L10)
// against a real margin server, through the loopback proxy (lib/proxy.mjs)
// that loses what one side sends: a reply and a run report lost on their
// way are posted once after the next resume; a reply whose acknowledgement
// was lost is sent again, refused `unknown_turn`, and never posted twice.

import assert from 'node:assert/strict';
import { serverTest, waitFor, withTimeout } from '../lib/server.mjs';
import { documentWith } from '../lib/doc.mjs';
import { Proxy } from '../lib/proxy.mjs';
import { Connector, silentLogger } from '../lib/sdk.mjs';

const PATIENCE = 10000;

/** Pairs a machine to alice, starts `handler` linked through a proxy; `{ proxy, doc, planner, replies }`. */
async function linkedThroughProxy(server, onCleanup, handler, logger = silentLogger) {
  const { doc } = await documentWith(server, 'Plan', ['Intro.']);
  const paired = await server.api('POST', '/machines', { as: 'alice', body: { name: 'laptop' } });
  assert.equal(paired.status, 201, JSON.stringify(paired.body));
  const proxy = await Proxy.start(server.port);
  onCleanup(() => proxy.close());
  const detach = new AbortController();
  let links = 0;
  const connector = new Connector({ server: proxy.url, credential: paired.body.credential, logger, onLink: () => links++ });
  const ended = connector.run(handler, { signal: detach.signal });
  onCleanup(async () => {
    detach.abort();
    await withTimeout(ended, PATIENCE, 'the connector to detach');
  });
  await waitFor(() => links >= 1, PATIENCE, 'the first link');
  const get = async (what) => {
    const res = await server.api('GET', `/documents/${doc.id}/${what}`, { as: 'alice' });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body;
  };
  return {
    proxy,
    doc,
    links: () => links,
    planner: () => get('planner'),
    replies: async () => (await get('chat')).messages.filter((m) => m.kind === 'planner').map((m) => m.text),
    say: async (text) => {
      const res = await server.api('POST', `/documents/${doc.id}/chat`, { as: 'alice', body: { text } });
      assert.equal(res.status, 201, JSON.stringify(res.body));
    },
  };
}

serverTest('a reply and a run report lost on their way to the server are posted once after the next resume', {}, async ({ server, onCleanup }) => {
  let proxy;
  const turns = [];
  const linked = await linkedThroughProxy(server, onCleanup, {
    async turn(turn) {
      turns.push(turn.id);
      const read = await turn.readDocument();
      await turn.run('review', 'Review', 'running');
      // From here, nothing the machine sends on this link reaches the server.
      if (turns.length === 1) proxy.hold('up');
      await turn.run('review', 'Review', 'completed');
      return `Reviewed: ${read.outline.length} blocks.`;
    },
  });
  proxy = linked.proxy;
  await linked.say('@planner review it');
  await waitFor(() => proxy.dropped.up > 0, PATIENCE, 'the report and reply to be lost');
  assert.deepEqual(await linked.replies(), [], 'the lost reply was not posted');
  proxy.cut();
  await waitFor(async () => (await linked.replies()).length >= 1, PATIENCE, 'the reply after resume');
  await waitFor(
    async () => (await linked.planner()).runs.find((r) => r.run === 'review')?.status === 'completed',
    PATIENCE,
    'the run completed after resume',
  );
  // Acknowledged: a further drop and resume sends neither again.
  const links = linked.links();
  proxy.cut();
  await waitFor(() => linked.links() > links, PATIENCE, 'the next link');
  await linked.say('@planner review it again');
  await waitFor(async () => (await linked.replies()).length >= 2, PATIENCE, 'the second reply');
  assert.deepEqual(await linked.replies(), ['Reviewed: 1 blocks.', 'Reviewed: 1 blocks.']);
  assert.deepEqual(turns, ['t1', 't2'], 'the handler saw each turn once');
});

serverTest('a reply whose acknowledgement was lost is sent again after resume and never posted twice', {}, async ({ server, onCleanup }) => {
  let proxy;
  const warnings = [];
  const logger = { warn: (what, fields) => warnings.push({ ...fields, what }) };
  const linked = await linkedThroughProxy(
    server,
    onCleanup,
    {
      async turn(turn) {
        // The reply arrives; what the server answers does not.
        proxy.hold('down');
        return `Done ${turn.id}.`;
      },
    },
    logger,
  );
  proxy = linked.proxy;
  await linked.say('@planner go');
  await waitFor(async () => (await linked.replies()).length >= 1, PATIENCE, 'the reply');
  await waitFor(() => proxy.dropped.down > 0, PATIENCE, 'the acknowledgement to be lost');
  const links = linked.links();
  proxy.cut();
  await waitFor(() => linked.links() > links, PATIENCE, 'the next link');
  await waitFor(async () => (await linked.planner()).connected, PATIENCE, 'the Planner connected again');
  // The kept reply goes again after `resumed`; the server refuses it,
  // naming the turn, and the SDK drops it.
  const refused = await waitFor(
    () => warnings.find((w) => w.what.includes('refused a reply')),
    PATIENCE,
    'the reply sent again to be refused',
  );
  assert.deepEqual([refused.session, refused.turn, refused.code], [(await linked.planner()).session, 't1', 'unknown_turn']);
  assert.deepEqual(await linked.replies(), ['Done t1.']);
});
