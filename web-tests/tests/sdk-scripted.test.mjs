// What the TypeScript connector SDK does that a real server cannot be made
// to show on demand, against a scripted link server (the `ws` package,
// loopback): a call the server could not decide (`retry`, SPEC L6) is tried
// again and a decision is not; the exact `resume` after a drop names the
// held session, its running turn and its call in flight, whose
// `interrupted` reaches the turn (L3, W1); a link gone silent counts as
// dropped. Plus the pure parts: backoff, addresses, features.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { waitFor, withTimeout } from '../lib/server.mjs';
import { scriptedServer, welcomeAndInvoke } from '../lib/scripted-link.mjs';
import { Connector, backoff, silentLogger, RESUMABLE_SESSIONS } from '../lib/sdk.mjs';

const PATIENCE = 10000;

/** Answers tool calls with `results` in order until the reply; resolves to [calls, reply]. */
async function answerCalls(link, results) {
  let calls = 0;
  for (;;) {
    const message = await link.next();
    if (message.type === 'reply') return [calls, message.text];
    if (message.type !== 'tool-call') continue;
    calls++;
    const result = results.shift();
    link.send({ type: 'tool-result', session: 's', turn: 't', call_id: message.call_id, ...result });
  }
}

const refusal = (code, retry) => ({ error: { code, message: `${code} happened`, read_again: false, retry } });

const reads = {
  async turn(turn) {
    try {
      const read = await turn.readDocument();
      return `${read.outline.length} blocks.`;
    } catch (e) {
      return `read: ${e.code ?? e.message}`;
    }
  },
};

/** Serves `handler` on one link of `server`; detaches when the test ends. */
async function serveOnce(t, server, handler) {
  const linked = await new Connector({ server: server.url, credential: 'mgm_x', logger: silentLogger }).connect();
  const detach = new AbortController();
  const served = linked.serve(handler, { signal: detach.signal });
  t.after(() => {
    detach.abort();
    return served;
  });
}

test('a call the server could not decide is tried again, and a decision is returned at once', { timeout: 30000 }, async (t) => {
  const undecided = await scriptedServer(t, async (link) => {
    await welcomeAndInvoke(link);
    return answerCalls(link, [refusal('internal', true), refusal('internal', true), { output: { revision: 1, outline: [] } }]);
  });
  await serveOnce(t, undecided, reads);
  assert.deepEqual(await undecided.done(1), [3, '0 blocks.']);

  const decided = await scriptedServer(t, async (link) => {
    await welcomeAndInvoke(link);
    return answerCalls(link, [refusal('stale_revision', false)]);
  });
  const failing = {
    turn: (turn) => turn.readDocument().then(() => 'read'),
  };
  await serveOnce(t, decided, failing);
  assert.deepEqual(await decided.done(1), [
    1,
    'The Planner could not finish this turn: refused (stale_revision): stale_revision happened',
  ]);
});

test('after a drop, resume names the held session, its running turn and its call in flight, whose interrupted reaches the turn', { timeout: 30000 }, async (t) => {
  let resume;
  const server = await scriptedServer(t, async (link, n) => {
    if (n === 1) {
      const hello = await welcomeAndInvoke(link);
      assert.deepEqual(hello, { type: 'hello', protocol_version: 1, features: [RESUMABLE_SESSIONS] });
      // Every link of run starts with resume; the first holds nothing yet.
      assert.deepEqual(await link.next(), { type: 'resume', sessions: [] });
      link.send({ type: 'resumed', sessions: [], ended: [] });
      const call = await link.next();
      assert.deepEqual([call.type, call.name, call.call_id], ['tool-call', 'read_document', 'c1']);
      // The result never comes: the connection goes.
      link.ws.terminate();
      return null;
    }
    await welcomeAndInvoke(link, { invoke: false });
    resume = await link.next();
    link.send({ type: 'resumed', sessions: [{ session: 's', document: 'd', withdrawn: [] }], ended: [] });
    link.send({
      type: 'tool-result',
      session: 's',
      turn: 't',
      call_id: 'c1',
      error: { code: 'interrupted', message: 'interrupted: verify state before retrying', read_again: false },
    });
    return (await link.next()).text;
  });
  const detach = new AbortController();
  const running = new Connector({ server: server.url, credential: 'mgm_x', logger: silentLogger }).run(reads, { signal: detach.signal });
  t.after(() => {
    detach.abort();
    return running;
  });
  assert.equal(await server.done(2), 'read: interrupted');
  assert.deepEqual(resume, { type: 'resume', sessions: [{ session: 's', questions: [], turn: 't', calls: ['c1'] }] });
  detach.abort();
  assert.deepEqual(await withTimeout(running, PATIENCE, 'run to end'), { kind: 'detached' });
});

test('a link that goes silent counts as dropped, and run links again', { timeout: 30000 }, async (t) => {
  const server = await scriptedServer(t, async (link) => {
    await welcomeAndInvoke(link, { invoke: false });
    // Then nothing: no heartbeat, no close.
  });
  const detach = new AbortController();
  const started = Date.now();
  const running = new Connector({ server: server.url, credential: 'mgm_x', logger: silentLogger, silenceTimeoutMs: 300 }).run(
    reads,
    { signal: detach.signal },
  );
  t.after(() => {
    detach.abort();
    return running;
  });
  await waitFor(() => server.connections() >= 2, PATIENCE, 'a second link');
  assert.ok(Date.now() - started >= 300, 'not before the silence ran out');
  detach.abort();
  assert.deepEqual(await withTimeout(running, PATIENCE, 'run to end'), { kind: 'detached' });
});

test('backoff doubles from 250 ms to its 30 s cap, with jitter of at most a quarter either way', () => {
  for (let failures = 0; failures < 20; failures++) {
    const base = Math.min(250 * 2 ** Math.min(failures, 8), 30000);
    for (const random of [0, 0.5, 0.999]) {
      const pause = backoff(failures, () => random);
      assert.ok(pause >= base * 0.75 && pause <= base * 1.25, `${failures} failures, random ${random}: ${pause}`);
    }
  }
  assert.equal(backoff(0, () => 0.5), 250);
  assert.equal(backoff(30, () => 0.5), 30000);
});

test('server addresses become the link url, and resumable sessions are asked for unless declined', () => {
  const url = (server) => {
    try {
      return new Connector({ server, credential: 'c' }).url();
    } catch (e) {
      return e.kind;
    }
  };
  assert.equal(url('http://127.0.0.1:7070'), 'ws://127.0.0.1:7070/machine');
  assert.equal(url('https://margin.example/'), 'wss://margin.example/machine');
  assert.equal(url('ws://h:1'), 'ws://h:1/machine');
  assert.equal(url('margin.example'), 'address');
  assert.deepEqual(new Connector({ server: 'http://h', credential: 'c' }).features(), [RESUMABLE_SESSIONS]);
  assert.deepEqual(new Connector({ server: 'http://h', credential: 'c', resumable: false }).features(), []);
});

test('a call named in resume that the server never recorded is sent again, and only such a call', { timeout: 30000 }, async (t) => {
  const unknown = (callId) => ({ type: 'refusal', code: 'unknown_call', message: 'never ran', call_id: callId });
  const server = await scriptedServer(t, async (link, n) => {
    if (n === 1) {
      await welcomeAndInvoke(link);
      await link.next();
      link.send({ type: 'resumed', sessions: [], ended: [] });
      await link.next();
      // The call dies with the link.
      link.ws.terminate();
      return null;
    }
    await welcomeAndInvoke(link, { invoke: false });
    const resume = await link.next();
    link.send({ type: 'resumed', sessions: [{ session: 's', document: 'd', withdrawn: [] }], ended: [] });
    link.send(unknown('c1'));
    const again = await link.next();
    link.send({ type: 'tool-result', session: 's', turn: 't', call_id: 'c1', output: { revision: 1, outline: [] } });
    // A second call, never named in a resume: unknown_call is its answer.
    const second = await link.next();
    link.send(unknown(second.call_id));
    return [resume.sessions, again, (await link.next()).text];
  });
  const handler = {
    async turn(turn) {
      const read = await turn.readDocument();
      const second = await turn.readDocument().then(() => 'read', (e) => e.code);
      return `${read.outline.length} blocks; then ${second}.`;
    },
  };
  const detach = new AbortController();
  const running = new Connector({ server: server.url, credential: 'mgm_x', logger: silentLogger }).run(handler, { signal: detach.signal });
  t.after(() => {
    detach.abort();
    return running;
  });
  assert.deepEqual(await server.done(2), [
    [{ session: 's', questions: [], turn: 't', calls: ['c1'] }],
    { type: 'tool-call', session: 's', turn: 't', call_id: 'c1', name: 'read_document', arguments: {} },
    '0 blocks; then unknown_call.',
  ]);
});
