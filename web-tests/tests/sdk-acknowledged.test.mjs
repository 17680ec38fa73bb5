// What the TypeScript connector SDK keeps until the server acknowledges it
// (SPEC L10), against a scripted link server (lib/scripted-link.mjs) that
// cuts the link exactly between a message and its acknowledgement: a
// turn's reply and each run's latest report are named in the next
// `resume` and sent again after `resumed` until `reply-received` /
// `run-received` or a refusal naming them settles them; `session_busy`
// sends them again shortly; a later turn settles an earlier reply; the
// held file keeps them across a machine restart, in the kept-sessions
// format, and the older questions-only format still reads; the handler
// sees each turn once.

import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { waitFor, withTimeout } from '../lib/server.mjs';
import { resumeWith, scriptedServer, welcomeAndInvoke } from '../lib/scripted-link.mjs';
import { Connector, silentLogger } from '../lib/sdk.mjs';

const PATIENCE = 10000;

/** Turn `t` reports run `review` running then completed; every turn replies `Done <turn>.` */
function reporting(turns) {
  return {
    async turn(turn) {
      turns.push(turn.id);
      if (turn.id === 't') {
        await turn.run('review', 'Review', 'running');
        await turn.run('review', 'Review', 'completed');
      }
      return `Done ${turn.id}.`;
    },
  };
}

const reply = (turn) => ({ type: 'reply', session: 's', turn, text: `Done ${turn}.` });
const report = (status, attempt) => ({
  type: 'run',
  session: 's',
  run: 'review',
  name: 'Review',
  status,
  ...(attempt === undefined ? {} : { attempt }),
});
const received = (status) => ({ type: 'run-received', session: 's', run: 'review', attempt: 1, status });

/** Runs `handler` resumably against `server` (with `options`) until the test ends. */
function keepLinked(t, server, handler, options = {}) {
  const detach = new AbortController();
  const running = new Connector({ server: server.url, credential: 'mgm_x', logger: silentLogger, ...options }).run(handler, {
    signal: detach.signal,
  });
  t.after(() => {
    detach.abort();
    return running;
  });
  return { running, detach };
}

test('a reply whose link was cut before reply-received is named in the next resume and sent again after resumed, until acknowledged', { timeout: 30000 }, async (t) => {
  const turns = [];
  const server = await scriptedServer(t, async (link, n) => {
    if (n === 1) {
      await welcomeAndInvoke(link, { turn: 't2' });
      await resumeWith(link);
      assert.deepEqual(await link.next(), reply('t2'));
      link.ws.terminate();
      return null;
    }
    await welcomeAndInvoke(link, { invoke: false });
    const resume = await resumeWith(link, ['s']);
    if (n === 2) {
      const again = await link.next();
      link.send({ type: 'reply-received', session: 's', turn: 't2' });
      // Nothing further is owed: the next message is the next turn's reply.
      link.send({ type: 'invoke', session: 's', turn: 't3', document: 'd', messages: [] });
      const next = await link.next();
      link.ws.terminate();
      return [resume, again, next];
    }
    return resume;
  });
  keepLinked(t, server, reporting(turns));
  assert.deepEqual(await server.done(2), [
    { type: 'resume', sessions: [{ session: 's', questions: [], turn: 't2' }] },
    reply('t2'),
    reply('t3'),
  ]);
  // t3's reply went unacknowledged, t2's did not: only t3 is named.
  assert.deepEqual(await server.done(3), { type: 'resume', sessions: [{ session: 's', questions: [], turn: 't3' }] });
  assert.deepEqual(turns, ['t2', 't3'], 'the handler saw each turn once');
});

test('a run report is sent again after each resume until run-received answers its attempt and status', { timeout: 30000 }, async (t) => {
  const turns = [];
  const server = await scriptedServer(t, async (link, n) => {
    if (n === 1) {
      await welcomeAndInvoke(link);
      await resumeWith(link);
      assert.deepEqual(await link.next(), report('running'));
      link.send(received('running'));
      assert.deepEqual(await link.next(), report('completed'));
      assert.deepEqual(await link.next(), reply('t'));
      // An acknowledgement of another status settles nothing.
      link.send(received('running'));
      link.send({ type: 'reply-received', session: 's', turn: 't' });
      link.ws.terminate();
      return null;
    }
    await welcomeAndInvoke(link, { invoke: false });
    const resume = await resumeWith(link, ['s']);
    const sent = [await link.next()];
    if (n === 2) {
      // The link is cut again before run-received: sent again next time.
      link.ws.terminate();
      return [resume, sent];
    }
    link.send(received('completed'));
    link.send({ type: 'invoke', session: 's', turn: 't2', document: 'd', messages: [] });
    sent.push(await link.next());
    return [resume, sent];
  });
  keepLinked(t, server, reporting(turns));
  const kept = { type: 'resume', sessions: [{ session: 's', questions: [] }] };
  assert.deepEqual(await server.done(2), [kept, [report('completed', 1)]]);
  assert.deepEqual(await server.done(3), [kept, [report('completed', 1), reply('t2')]]);
  assert.deepEqual(turns, ['t', 't2']);
});

test('session_busy sends the reply or report again after a pause, and any other refusal naming it settles it', { timeout: 30000 }, async (t) => {
  const turns = [];
  const server = await scriptedServer(t, async (link, n) => {
    if (n === 1) {
      await welcomeAndInvoke(link);
      await resumeWith(link);
      const busy = (named) => link.send({ type: 'refusal', code: 'session_busy', message: 'busy', session: 's', ...named });
      const refused = (named) => link.send({ type: 'refusal', code: 'unknown_turn', message: 'gone', session: 's', ...named });
      assert.deepEqual(await link.next(), report('running'));
      assert.deepEqual(await link.next(), report('completed'));
      assert.deepEqual(await link.next(), reply('t'));
      const refusedAt = Date.now();
      busy({ turn: 't' });
      busy({ run: 'review' });
      const again = [await link.next(), await link.next()];
      const waited = Date.now() - refusedAt;
      refused({ turn: 't' });
      refused({ run: 'review' });
      link.ws.terminate();
      return [again, waited];
    }
    await welcomeAndInvoke(link, { invoke: false });
    const resume = await resumeWith(link, ['s']);
    link.send({ type: 'invoke', session: 's', turn: 't2', document: 'd', messages: [] });
    return [resume, await link.next()];
  });
  keepLinked(t, server, reporting(turns));
  const [again, waited] = await server.done(1);
  assert.deepEqual(again, [reply('t'), report('completed', 1)]);
  assert.ok(waited >= 900, `sent again after ${waited} ms, not after a pause`);
  assert.deepEqual(await server.done(2), [{ type: 'resume', sessions: [{ session: 's', questions: [] }] }, reply('t2')]);
});

test('an invoke sent again for a turn the machine still runs does not start it twice', { timeout: 30000 }, async (t) => {
  const turns = [];
  const handler = {
    async turn(turn) {
      turns.push(turn.id);
      const read = await turn.readDocument();
      return `${read.outline.length} blocks.`;
    },
  };
  const server = await scriptedServer(t, async (link) => {
    await welcomeAndInvoke(link);
    await resumeWith(link);
    const call = await link.next();
    link.send({ type: 'invoke', session: 's', turn: 't', document: 'd', messages: [] });
    link.send({ type: 'tool-result', session: 's', turn: 't', call_id: call.call_id, output: { revision: 1, outline: [] } });
    return link.next();
  });
  keepLinked(t, server, handler);
  assert.deepEqual(await server.done(1), { type: 'reply', session: 's', turn: 't', text: '0 blocks.' });
  assert.deepEqual(turns, ['t']);
});

test('the held file keeps the unacknowledged reply and run report, and a restarted machine names the turn and sends them again', { timeout: 30000 }, async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-sdk-kept-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const held = path.join(dir, 'laptop.sessions.json');
  const first = await scriptedServer(t, async (link) => {
    await welcomeAndInvoke(link);
    await resumeWith(link);
    for (let i = 0; i < 3; i++) await link.next();
    // Never acknowledged: the machine stops with them kept.
  });
  const before = [];
  const { detach, running } = keepLinked(t, first, reporting(before), { heldFile: held });
  const expected = {
    s: {
      questions: [],
      reply: { turn: 't', text: 'Done t.' },
      runs: [{ run: 'review', name: 'Review', status: 'completed', attempt: 1 }],
    },
  };
  let kept;
  await waitFor(
    async () => {
      kept = await readFile(held, 'utf8').catch(() => '');
      return kept === JSON.stringify(expected);
    },
    PATIENCE,
    'the held file to keep the reply and the report',
  );
  assert.equal((await stat(held)).mode & 0o777, 0o600, 'the held file is private');
  // The machine dies (a detach would leave on purpose): a new one starts
  // from what the file held.
  const restartedFile = path.join(dir, 'restarted.sessions.json');
  await writeFile(restartedFile, kept);
  detach.abort();
  await withTimeout(running, PATIENCE, 'the first machine to stop');

  const second = await scriptedServer(t, async (link) => {
    await welcomeAndInvoke(link, { invoke: false });
    const resume = await resumeWith(link, ['s']);
    const sent = [await link.next(), await link.next()];
    link.send(received('completed'));
    link.send({ type: 'reply-received', session: 's', turn: 't' });
    return [resume, sent];
  });
  const after = [];
  keepLinked(t, second, reporting(after), { heldFile: restartedFile });
  assert.deepEqual(await second.done(1), [
    { type: 'resume', sessions: [{ session: 's', questions: [], turn: 't' }] },
    [report('completed', 1), reply('t')],
  ]);
  await waitFor(
    async () => (await readFile(restartedFile, 'utf8')) === JSON.stringify({ s: { questions: [] } }),
    PATIENCE,
    'the held file to settle them',
  );
  assert.deepEqual(after, [], 'the restarted machine ran no turn');
});

test('a held file in the older questions-only format still names its sessions and questions', { timeout: 30000 }, async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-sdk-kept-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const held = path.join(dir, 'old.sessions.json');
  await writeFile(held, JSON.stringify({ s: ['c9', 'c1'] }), { mode: 0o600 });
  const server = await scriptedServer(t, async (link) => {
    await welcomeAndInvoke(link, { invoke: false });
    return resumeWith(link, ['s']);
  });
  keepLinked(t, server, reporting([]), { heldFile: held });
  assert.deepEqual(await server.done(1), { type: 'resume', sessions: [{ session: 's', questions: ['c1', 'c9'] }] });
});

test('an invoke of a turn whose reply is kept sends the reply again and starts nothing', { timeout: 30000 }, async (t) => {
  const turns = [];
  const server = await scriptedServer(t, async (link) => {
    await welcomeAndInvoke(link, { turn: 't2' });
    await resumeWith(link);
    const first = await link.next();
    link.send({ type: 'invoke', session: 's', turn: 't2', document: 'd', messages: [] });
    return [first, await link.next()];
  });
  keepLinked(t, server, reporting(turns));
  assert.deepEqual(await server.done(1), [reply('t2'), reply('t2')]);
  assert.deepEqual(turns, ['t2']);
});

test('a machine that detaches keeps in its held file only the sessions that still owe a reply or report', { timeout: 30000 }, async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-sdk-kept-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const held = path.join(dir, 'laptop.sessions.json');
  const server = await scriptedServer(t, async (link) => {
    await welcomeAndInvoke(link, { turn: 't2' });
    await resumeWith(link);
    await link.next();
    link.send({ type: 'invoke', session: 'settled', turn: 't1', document: 'd', messages: [] });
    assert.deepEqual(await link.next(), { type: 'reply', session: 'settled', turn: 't1', text: 'Done t1.' });
    link.send({ type: 'reply-received', session: 'settled', turn: 't1' });
    link.send({ type: 'heartbeat', seq: 1 });
  });
  const { detach, running } = keepLinked(t, server, reporting([]), { heldFile: held });
  const owing = { s: { questions: [], reply: { turn: 't2', text: 'Done t2.' } } };
  await waitFor(
    async () => (await readFile(held, 'utf8').catch(() => '')) === JSON.stringify({ ...owing, settled: { questions: [] } }),
    PATIENCE,
    'both sessions held, one owing its reply',
  );
  detach.abort();
  assert.deepEqual(await withTimeout(running, PATIENCE, 'the machine to detach'), { kind: 'detached' });
  assert.deepEqual(JSON.parse(await readFile(held, 'utf8')), owing);
});
