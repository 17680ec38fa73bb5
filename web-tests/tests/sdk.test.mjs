// The TypeScript connector SDK (sdk/typescript, SPEC O3) against a real
// margin server over real sockets, through a loopback proxy that breaks the
// link as a network does (lib/proxy.mjs): a turn end to end, calls cut mid
// flight that get their stored result or `unknown_call` after `resume` and
// never run twice (W1), across a server kill too; an answer given while
// the machine was away delivered once (L3, L5); a Stop held while away and
// delivered after `resumed` (L4); a held-sessions file that carries a
// question across a machine restart; credential renewal written 0600 (L8);
// and the non-resumable opt-out (L1). The same cases as the Rust SDK's
// (server/tests/it/connector.rs).

import assert from 'node:assert/strict';
import { chmod, copyFile, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { serverTest, waitFor, withTimeout } from '../lib/server.mjs';
import { documentWith, decisions } from '../lib/doc.mjs';
import { Proxy } from '../lib/proxy.mjs';
import { say } from '../lib/chat.mjs';
import { Connector, ConnectError, ToolError, isRefusal, silentLogger, RESUMABLE_SESSIONS } from '../lib/sdk.mjs';

const PATIENCE = 10000;

/** Pairs a machine to alice over HTTP; its first credential. */
async function pair(server, name = 'laptop') {
  const paired = await server.api('POST', '/machines', { as: 'alice', body: { name } });
  assert.equal(paired.status, 201, JSON.stringify(paired.body));
  return paired.body;
}

async function chat(server, docId) {
  const res = await server.api('GET', `/documents/${docId}/chat`, { as: 'alice' });
  assert.equal(res.status, 200);
  return res.body.messages;
}

/** Waits for the `count`th Chat line of `kind` (and containing `part`); returns their texts. */
async function lines(server, docId, { kind, part = '', count = 1 }) {
  return waitFor(
    async () => {
      const texts = (await chat(server, docId)).filter((m) => m.kind === kind && m.text.includes(part)).map((m) => m.text);
      return texts.length >= count && texts;
    },
    PATIENCE,
    `${count} ${kind} line(s) in Chat${part ? ` containing ${JSON.stringify(part)}` : ''}`,
  );
}

async function plannerView(server, docId) {
  const res = await server.api('GET', `/documents/${docId}/planner`, { as: 'alice' });
  assert.equal(res.status, 200);
  return res.body;
}

async function outlineTexts(server, docId) {
  return (await server.outline('alice', docId)).blocks.map((b) => b.text);
}

/**
 * Runs `handler` on `connector` with Connector.run until the test ends;
 * counts its links. Returns { links, ended }.
 */
function keepLinked(onCleanup, options, handler) {
  const detach = new AbortController();
  const state = { links: 0, welcomes: [] };
  const connector = new Connector({
    logger: silentLogger,
    ...options,
    onLink: (welcome) => {
      state.links++;
      state.welcomes.push(welcome);
    },
  });
  state.ended = connector.run(handler, { signal: detach.signal });
  onCleanup(async () => {
    detach.abort();
    await withTimeout(state.ended, PATIENCE, 'the connector to detach');
  });
  state.detach = async () => {
    detach.abort();
    return withTimeout(state.ended, PATIENCE, 'the connector to detach');
  };
  return state;
}

/** The address of a read's last block, to insert after it. */
function last(read) {
  const block = read.outline[read.outline.length - 1];
  return { index: block.index, digest: block.digest };
}

/** A promise and its resolve, for a handler to tell the test where it is. */
function signal() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
}

/** A handler that asks one yes/no question about the first block and passes answers on. */
function asks(answers) {
  return {
    async turn(turn) {
      // A probe: its invoke comes after whatever the server sent before
      // on the link, so an answer sent again would have come first.
      if (turn.messages.some((m) => m.text.includes('probe'))) return 'Probed.';
      const read = await turn.readDocument();
      const block = read.outline[0];
      const asked = await turn.ask({
        revision: read.revision,
        card: {
          key: 'region',
          question: 'Should we launch in one region first?',
          response: 'yes_no',
          passages: [{ index: block.index, digest: block.digest }],
        },
      });
      return `I asked about the region: ${asked.summary}.`;
    },
    answered(answer) {
      answers.push({ session: answer.session.id, request: answer.request, answer: answer.answer, by: answer.answeredBy });
    },
  };
}

serverTest('a turn reads the document, opens a decision for the paragraph that asks, and replies in Chat', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Plan', ['We launch in March.', 'Which region first?']);
  const { credential } = await pair(server);
  const linked = await new Connector({ server: server.baseUrl, credential, logger: silentLogger }).connect();
  assert.deepEqual(linked.welcome.capabilities.features, [RESUMABLE_SESSIONS], 'resumable sessions are asked for by default');
  let kept;
  const handler = {
    async turn(turn) {
      kept = turn;
      const read = await turn.readDocument();
      const cards = read.outline
        .filter((b) => b.text.endsWith('?'))
        .map((b) => ({
          key: `q-${b.digest.slice(0, 12)}`,
          question: b.text,
          response: 'free_text',
          passages: [{ index: b.index, digest: b.digest }],
        }));
      const opened = await turn.openDecisions({ revision: read.revision, cards });
      return `Read ${read.outline.length} blocks: ${opened.summary}.`;
    },
  };
  const detach = new AbortController();
  const served = linked.serve(handler, { signal: detach.signal });
  onCleanup(() => detach.abort());

  await say(server, doc.id, '@planner review the plan');
  assert.deepEqual(await lines(server, doc.id, { kind: 'planner' }), ['Read 2 blocks: added 1 decision.']);
  const cards = await decisions(server, 'alice', doc.id);
  assert.deepEqual(
    cards.map((c) => [c.question, c.state]),
    [['Which region first?', 'open']],
  );
  assert.equal(kept.document, doc.id);
  assert.deepEqual(kept.messages.map((m) => m.text), ['@planner review the plan']);

  // The turn ended with its reply: the server refuses a call from it, naming it.
  const late = await kept.readDocument().catch((e) => e);
  assert.ok(isRefusal(late, 'unknown_turn'), `a call from an ended turn is refused: ${late}`);

  // Once the link is gone, a call fails at once instead of waiting.
  detach.abort();
  assert.deepEqual(await withTimeout(served, PATIENCE, 'serve to end'), { kind: 'detached' });
  const gone = await withTimeout(kept.readDocument().catch((e) => e), PATIENCE, 'the call to fail');
  assert.ok(gone instanceof ToolError && gone.kind === 'link-closed', `${gone}`);
});

serverTest('a call whose result was lost when the link was cut gets its stored result after resume, and ran once', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Plan', ['Intro.']);
  const { credential } = await pair(server);
  const proxy = await Proxy.start(server.port);
  onCleanup(() => proxy.close());
  const linking = keepLinked(onCleanup, { server: proxy.url, credential }, {
    async turn(turn) {
      const read = await turn.readDocument();
      // The server runs the next call, but its result never arrives on this link.
      proxy.hold('down');
      const edited = await turn.editPlan({
        revision: read.revision,
        edits: [{ op: 'insert', after: last(read), kind: 'paragraph', text: 'Risks: none yet.' }],
      });
      return `Edited: ${edited.outline.length} blocks.`;
    },
  });
  await waitFor(() => linking.links >= 1, PATIENCE, 'the first link');
  await say(server, doc.id, '@planner add the risks');
  await waitFor(async () => (await outlineTexts(server, doc.id)).includes('Risks: none yet.'), PATIENCE, 'the edit to be committed');
  proxy.cut();

  assert.deepEqual(await lines(server, doc.id, { kind: 'planner' }), ['Edited: 2 blocks.']);
  assert.ok(linking.links >= 2, 'the connector linked again');
  assert.deepEqual(
    (await outlineTexts(server, doc.id)).filter((t) => t === 'Risks: none yet.'),
    ['Risks: none yet.'],
    'the edit ran once',
  );
  const system = (await chat(server, doc.id)).filter((m) => m.kind === 'system').map((m) => m.text);
  assert.ok(!system.some((t) => t.includes('came back without the turn')), `the turn was carried on: ${JSON.stringify(system)}`);
});

serverTest('a call that never reached the server is sent again after resume, and runs once', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Plan', ['Intro.']);
  const { credential } = await pair(server);
  const proxy = await Proxy.start(server.port);
  onCleanup(() => proxy.close());
  const sent = signal();
  const linking = keepLinked(onCleanup, { server: proxy.url, credential }, {
    async turn(turn) {
      const read = await turn.readDocument();
      // The next call leaves this machine but never reaches the server:
      // the next resume names it, the server answers unknown_call (it never
      // ran), and the SDK sends it again (SPEC W1).
      proxy.hold('up');
      const edited = turn.editPlan({ revision: read.revision, edits: [{ op: 'insert', after: last(read), kind: 'paragraph', text: 'Owner: Ada.' }] });
      sent.resolve();
      return `Edited: ${(await edited).outline.length} blocks.`;
    },
  });
  await waitFor(() => linking.links >= 1, PATIENCE, 'the first link');
  await say(server, doc.id, '@planner name the owner');
  await withTimeout(sent.promise, PATIENCE, 'the call to be sent');
  // The call reached the proxy and went no further.
  await waitFor(() => proxy.dropped.up > 0, PATIENCE, 'the call to be held back');
  assert.deepEqual(await outlineTexts(server, doc.id), ['Intro.'], 'the held call did not run');
  proxy.cut();

  assert.deepEqual(await lines(server, doc.id, { kind: 'planner' }), ['Edited: 2 blocks.']);
  assert.deepEqual(await outlineTexts(server, doc.id), ['Intro.', 'Owner: Ada.'], 'it ran once');
});

serverTest('a call in flight when the server was killed gets its stored result after the restart, once', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Plan', ['Intro.']);
  const { credential } = await pair(server);
  const proxy = await Proxy.start(server.port);
  onCleanup(() => proxy.close());
  const linking = keepLinked(onCleanup, { server: proxy.url, credential }, {
    async turn(turn) {
      const read = await turn.readDocument();
      proxy.hold('down');
      try {
        const edited = await turn.editPlan({
          revision: read.revision,
          edits: [{ op: 'insert', after: last(read), kind: 'paragraph', text: 'Budget: 10k.' }],
        });
        return `Edited: ${edited.outline.length} blocks.`;
      } catch (e) {
        return `Edit failed: ${isRefusal(e) ? e.code : e}.`;
      }
    },
  });
  await waitFor(() => linking.links >= 1, PATIENCE, 'the first link');
  await say(server, doc.id, '@planner set the budget');
  await waitFor(async () => (await outlineTexts(server, doc.id)).includes('Budget: 10k.'), PATIENCE, 'the edit to be committed');
  await server.kill();
  await server.start();
  proxy.cut();

  // Its result was committed with the edit, so that is what comes back.
  assert.deepEqual(await lines(server, doc.id, { kind: 'planner' }), ['Edited: 2 blocks.']);
  assert.deepEqual(await outlineTexts(server, doc.id), ['Intro.', 'Budget: 10k.'], 'the edit ran once');
});

serverTest('an answer given while the machine was away is delivered once after it resumes, and acknowledged', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Plan', ['Launch in one region.']);
  const { credential } = await pair(server);
  const proxy = await Proxy.start(server.port);
  onCleanup(() => proxy.close());
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-sdk-answer-'));
  onCleanup(() => rm(dir, { recursive: true, force: true }));
  const held = path.join(dir, 'laptop.sessions.json');
  const answers = [];
  const linking = keepLinked(onCleanup, { server: proxy.url, credential, heldFile: held }, asks(answers));
  await waitFor(() => linking.links >= 1, PATIENCE, 'the first link');
  await say(server, doc.id, '@planner ask about the region');
  assert.deepEqual(await lines(server, doc.id, { kind: 'planner' }), ['I asked about the region: added 1 decision.']);
  const [card] = await decisions(server, 'alice', doc.id);
  assert.equal((await plannerView(server, doc.id)).questions, 1);

  // Wi-Fi goes, and stays gone while the question is answered.
  proxy.refuse(true);
  proxy.cut();
  await waitFor(async () => (await plannerView(server, doc.id)).disconnected, PATIENCE, 'the Planner to show disconnected');
  const answered = await server.api('POST', `/documents/${doc.id}/decisions/${card.id}/answer`, { as: 'alice', body: { yes: true } });
  assert.equal(answered.status, 200, JSON.stringify(answered.body));
  // The machine tries to come back after the answer and is turned away.
  const refusedBefore = proxy.refused;
  await waitFor(() => proxy.refused > refusedBefore, PATIENCE, 'the connector to try again');
  assert.deepEqual(answers, [], 'nothing reaches a machine that is away');

  proxy.refuse(false);
  await waitFor(() => answers.length >= 1, PATIENCE, 'the held answer after resume');
  const session = (await plannerView(server, doc.id)).session;
  assert.deepEqual(answers, [{ session, request: card.id, answer: { yes: true }, by: 'alice' }]);

  // Acknowledged: another drop and resume does not deliver it again.
  const before = linking.links;
  proxy.cut();
  await waitFor(
    async () => {
      const view = await plannerView(server, doc.id);
      return linking.links > before && view.connected && !view.disconnected && view;
    },
    PATIENCE,
    'the connector back after the second cut',
  );
  await say(server, doc.id, '@planner probe');
  await lines(server, doc.id, { kind: 'planner', part: 'Probed.' });
  assert.equal(answers.length, 1, 'the answer was delivered once');
  assert.equal((await plannerView(server, doc.id)).questions, 0);

  // The server forgot it once acknowledged: a machine restarted with the
  // session (not the question: it is settled; nor the reply, once
  // acknowledged, SPEC L10) is not sent it again.
  await waitFor(
    async () => (await readFile(held, 'utf8')) === JSON.stringify({ [session]: { questions: [] } }),
    PATIENCE,
    'the held file to keep only the session',
  );
  proxy.refuse(true);
  proxy.cut();
  const restartedFile = path.join(dir, 'restarted.sessions.json');
  await copyFile(held, restartedFile);
  const again = [];
  const restarted = keepLinked(onCleanup, { server: server.baseUrl, credential, heldFile: restartedFile }, asks(again));
  await waitFor(() => restarted.links >= 1, PATIENCE, 'the restarted machine to link');
  await waitFor(async () => (await plannerView(server, doc.id)).connected, PATIENCE, 'the Planner connected again');
  await say(server, doc.id, '@planner probe again');
  await lines(server, doc.id, { kind: 'planner', part: 'Probed.', count: 2 });
  assert.deepEqual(again, [], 'an acknowledged answer is not sent again');
});

serverTest('a Stop pressed while the machine was away reaches it after resume: the turn is aborted, the handler told, and Chat says it stopped', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Plan', ['Build it.']);
  const { credential } = await pair(server);
  const proxy = await Proxy.start(server.port);
  onCleanup(() => proxy.close());
  const started = signal();
  const seen = { aborted: null, stopAfterAbort: null };
  const linking = keepLinked(onCleanup, { server: proxy.url, credential }, {
    async turn(turn) {
      await turn.run('build', 'Build the site', 'running');
      started.resolve();
      await new Promise((resolve) => turn.signal.addEventListener('abort', resolve, { once: true }));
      seen.aborted = turn.signal.reason?.message;
      throw turn.signal.reason;
    },
    async stop(session) {
      assert.ok(session.id);
      seen.stopAfterAbort = seen.aborted !== null;
    },
  });
  await waitFor(() => linking.links >= 1, PATIENCE, 'the first link');
  await say(server, doc.id, '@planner build the site');
  await withTimeout(started.promise, PATIENCE, 'the turn to start');
  await waitFor(async () => (await plannerView(server, doc.id)).runs[0]?.status === 'running', PATIENCE, 'the run to show');

  proxy.refuse(true);
  proxy.cut();
  await waitFor(async () => (await plannerView(server, doc.id)).disconnected, PATIENCE, 'the Planner to show disconnected');
  const stop = await server.api('POST', `/documents/${doc.id}/planner/stop`, { as: 'alice' });
  assert.equal(stop.status, 202, JSON.stringify(stop.body));
  await lines(server, doc.id, { kind: 'system', part: 'Stop was asked while the Planner is disconnected' });
  assert.equal(seen.aborted, null, 'nothing reaches a machine that is away');

  proxy.refuse(false);
  const stopped = await lines(server, doc.id, { kind: 'system', part: 'stopped', count: 2 });
  assert.deepEqual(stopped, ['The Planner stopped.', 'Build the site was stopped after 0 min.']);
  assert.deepEqual(seen, { aborted: 'the turn was stopped', stopAfterAbort: true });
  const view = await plannerView(server, doc.id);
  assert.ok(!view.stop_pending && !view.replying && view.runs.length === 0, JSON.stringify(view));
  const system = (await chat(server, doc.id)).filter((m) => m.kind === 'system').map((m) => m.text);
  assert.ok(!system.some((t) => t.includes('came back without the turn')), `the turn was named in resume: ${JSON.stringify(system)}`);
});

serverTest('a Resume pressed before the machine confirmed the Stop reaches the handler as stop-withdrawn', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Plan', ['Build it.']);
  const { credential } = await pair(server);
  const started = signal();
  const stopping = signal();
  const release = signal();
  const told = [];
  const linking = keepLinked(onCleanup, { server: server.baseUrl, credential }, {
    async turn(turn) {
      await turn.run('build', 'Build the site', 'running');
      started.resolve();
      await new Promise((resolve) => turn.signal.addEventListener('abort', resolve, { once: true }));
      throw turn.signal.reason;
    },
    async stop() {
      told.push('stop');
      stopping.resolve();
      await release.promise;
    },
    stopWithdrawn() {
      told.push('stop-withdrawn');
      release.resolve();
    },
  });
  await waitFor(() => linking.links >= 1, PATIENCE, 'the first link');
  await say(server, doc.id, '@planner build the site');
  await withTimeout(started.promise, PATIENCE, 'the turn to start');
  const stop = await server.api('POST', `/documents/${doc.id}/planner/stop`, { as: 'alice' });
  assert.equal(stop.status, 202, JSON.stringify(stop.body));
  await withTimeout(stopping.promise, PATIENCE, 'the stop handler to run');
  const resume = await server.api('POST', `/documents/${doc.id}/planner/resume`, { as: 'alice' });
  assert.equal(resume.status, 202, JSON.stringify(resume.body));
  await lines(server, doc.id, { kind: 'system', part: 'Resume was sent: the Stop is withdrawn.' });
  await waitFor(() => told.length === 2, PATIENCE, 'stop-withdrawn to reach the handler');
  assert.deepEqual(told, ['stop', 'stop-withdrawn']);
});

serverTest('the held-sessions file carries a session and its question to the machine restarted with it', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Plan', ['Launch in one region.']);
  const { credential } = await pair(server);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-sdk-held-'));
  onCleanup(() => rm(dir, { recursive: true, force: true }));
  const proxy = await Proxy.start(server.port);
  onCleanup(() => proxy.close());
  const held = path.join(dir, 'laptop.sessions.json');
  const first = keepLinked(onCleanup, { server: proxy.url, credential, heldFile: held }, asks([]));
  await waitFor(() => first.links >= 1, PATIENCE, 'the first link');
  await say(server, doc.id, '@planner ask about the region');
  await lines(server, doc.id, { kind: 'planner' });
  const [card] = await decisions(server, 'alice', doc.id);
  const { session } = await plannerView(server, doc.id);
  // The question is held; the turn's reply leaves the file once the server
  // acknowledges it (SPEC L10).
  await waitFor(
    async () => (await readFile(held, 'utf8').catch(() => '')) === JSON.stringify({ [session]: { questions: [card.id] } }),
    PATIENCE,
    'the held file to name the question',
  );
  assert.equal((await stat(held)).mode & 0o777, 0o600, 'the held file is private');

  // The machine dies (its link cut, and it never comes back); a new process
  // starts with what the file held.
  proxy.refuse(true);
  proxy.cut();
  const restartedFile = path.join(dir, 'restarted.sessions.json');
  await copyFile(held, restartedFile);
  const answers = [];
  const restarted = keepLinked(onCleanup, { server: server.baseUrl, credential, heldFile: restartedFile }, asks(answers));
  await waitFor(() => restarted.links >= 1, PATIENCE, 'the restarted machine to link');
  await waitFor(async () => (await plannerView(server, doc.id)).connected, PATIENCE, 'the Planner connected again');
  const answered = await server.api('POST', `/documents/${doc.id}/decisions/${card.id}/answer`, { as: 'alice', body: { yes: true } });
  assert.equal(answered.status, 200, JSON.stringify(answered.body));
  await waitFor(() => answers.length >= 1, PATIENCE, 'the answer at the restarted machine');
  assert.deepEqual(answers, [{ session, request: card.id, answer: { yes: true }, by: 'alice' }]);
  assert.equal((await plannerView(server, doc.id)).session, session, 'the same session carried on');
  await waitFor(async () => JSON.parse(await readFile(restartedFile, 'utf8'))[session]?.questions.length === 0, PATIENCE, 'the settled question to leave the file');
});

serverTest('a renewed credential replaces the credential file whole and private (0600) and opens the next link; refused credentials say why', {}, async ({ server, onCleanup }) => {
  const paired = await pair(server);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-sdk-credential-'));
  onCleanup(() => rm(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'laptop.credential');
  await writeFile(file, `${paired.credential}\n`);
  await chmod(file, 0o644);

  const linking = keepLinked(onCleanup, { server: server.baseUrl, credentialFile: file }, { turn: async () => 'Nothing to do.' });
  const renewed = await waitFor(
    async () => {
      const text = (await readFile(file, 'utf8')).trim();
      return text !== paired.credential && text;
    },
    PATIENCE,
    'the credential file to hold the renewed credential',
  );
  assert.match(renewed, /^mgm_/);
  assert.equal((await stat(file)).mode & 0o777, 0o600, 'the file is private');
  assert.deepEqual(await readdir(dir), ['laptop.credential'], 'no temporary file is left');
  assert.deepEqual(await linking.detach(), { kind: 'detached' });

  // A later start links with what the file holds now.
  const again = await new Connector({ server: server.baseUrl, credentialFile: file, logger: silentLogger }).connect();
  assert.equal(again.welcome.machine, 'laptop');
  const detached = new AbortController();
  detached.abort();
  assert.deepEqual(await again.serve({ turn: async () => '' }, { signal: detached.signal }), { kind: 'detached' });

  const unknown = await new Connector({ server: server.baseUrl, credential: 'mgm_unknown', logger: silentLogger }).connect().catch((e) => e);
  assert.ok(unknown instanceof ConnectError, `${unknown}`);
  assert.deepEqual([unknown.kind, unknown.status, unknown.code, unknown.final], ['refused', 401, 'unauthenticated', true]);
  const revoked = await server.api('DELETE', `/machines/${paired.machine.id}`, { as: 'alice' });
  assert.equal(revoked.status, 204);
  const refused = await new Connector({ server: server.baseUrl, credentialFile: file, logger: silentLogger }).connect().catch((e) => e);
  assert.deepEqual([refused.kind, refused.code], ['refused', 'machine_revoked']);
  const missing = await new Connector({ server: server.baseUrl, credentialFile: path.join(dir, 'none'), logger: silentLogger }).connect().catch((e) => e);
  assert.equal(missing.kind, 'credential-file');
});

serverTest('resumable: false asks for no resumable sessions, and a drop aborts the turn and ends its session', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Plan', ['Build it.']);
  const { credential } = await pair(server);
  const proxy = await Proxy.start(server.port);
  onCleanup(() => proxy.close());
  const started = signal();
  const aborted = signal();
  const linking = keepLinked(onCleanup, { server: proxy.url, credential, resumable: false }, {
    async turn(turn) {
      if (turn.messages.some((m) => m.text.includes('again'))) return 'Back.';
      await turn.run('build', 'Build the site', 'running');
      started.resolve();
      await new Promise((resolve) => turn.signal.addEventListener('abort', resolve, { once: true }));
      aborted.resolve(turn.signal.reason);
      throw turn.signal.reason;
    },
  });
  await waitFor(() => linking.links >= 1, PATIENCE, 'the first link');
  assert.deepEqual(linking.welcomes[0].capabilities.features, [], 'no feature was asked for');
  await say(server, doc.id, '@planner build the site');
  await withTimeout(started.promise, PATIENCE, 'the turn to start');
  const { session } = await plannerView(server, doc.id);

  proxy.cut();
  const reason = await withTimeout(aborted.promise, PATIENCE, 'the turn to be aborted');
  assert.ok(reason instanceof ToolError && reason.kind === 'link-closed', `${reason}`);
  await lines(server, doc.id, { kind: 'system', part: 'Build the site was live when the Planner disconnected' });

  // It links again, resuming nothing: the next turn is in a new session.
  await waitFor(() => linking.links >= 2, PATIENCE, 'the connector to link again');
  await say(server, doc.id, '@planner again');
  assert.deepEqual(await lines(server, doc.id, { kind: 'planner' }), ['Back.']);
  const view = await plannerView(server, doc.id);
  assert.notEqual(view.session, session, 'the dropped session ended');
});
