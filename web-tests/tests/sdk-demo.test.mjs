// The demo Planner example of the TypeScript SDK
// (sdk/typescript/examples/demo-planner.ts), run as a person runs it — `node
// dist/examples/demo-planner.js --server URL --credential FILE` with a
// machine paired by `margin machine pair … --credential-file FILE` — against
// a real server, as the Rust demo is tested (server/tests/it/demo_planner.rs):
// a card per open question, a three-step plan, a reply; a second turn
// replays the cards; killed and started again, it resumes its session from
// the held file beside its credential (SPEC D2, D3, U1–U6, L3, L8).

import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { serverTest, waitFor, withTimeout } from '../lib/server.mjs';
import { plannerView, replies, say } from '../lib/chat.mjs';
import { documentWith, decisions } from '../lib/doc.mjs';
import { demoPlannerScript } from '../lib/sdk.mjs';
import { pairToFile, startExample } from '../lib/example.mjs';

const PATIENCE = 10000;

/** Starts the demo Planner; its output is kept for a failure report. */
function startDemo(server, credential, onCleanup) {
  return startExample(demoPlannerScript, ['--server', server.baseUrl, '--credential', credential], onCleanup);
}

async function plan(server, session) {
  const res = await server.api('GET', `/sessions/${session}`, { as: 'alice' });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.plan;
}

serverTest('the TypeScript demo Planner opens a card per open question, keeps its plan, replays its cards, and resumes after a kill', {}, async ({ server, onCleanup }) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-ts-demo-'));
  onCleanup(() => rm(dir, { recursive: true, force: true }));
  const credential = path.join(dir, 'laptop.credential');
  const paired = await pairToFile(server, 'alice', 'laptop', credential);
  assert.ok(!paired.stdout.includes('mgm_'), 'the secret goes to the file, not the terminal');
  const { doc } = await documentWith(server, 'Plan', ['We launch in March.', 'Which region first?', 'Pricing: TBD.']);

  let demo = startDemo(server, credential, onCleanup);
  try {
    await waitFor(async () => (await plannerView(server, doc.id)).state === 'available', PATIENCE, 'the demo to link');
    await say(server, doc.id, '@planner please review');
    assert.deepEqual(await replies(server, doc.id, 1, PATIENCE), ['I read the plan and found 2 open questions: added 2 decisions.']);
    const cards = await decisions(server, 'alice', doc.id);
    assert.deepEqual(cards.map((c) => [c.question, c.response, c.state]).sort(), [
      ['Decide what is still TBD: Pricing: TBD.', 'free_text', 'open'],
      ['Which region first?', 'free_text', 'open'],
    ]);
    const first = await plannerView(server, doc.id);
    assert.deepEqual(first.runs.map((r) => [r.name, r.status]), [['Review the plan for open questions', 'completed']]);
    // Read, capturing, done: three accepted updates in one turn.
    const marked = await plan(server, first.session);
    assert.equal(marked.revision, 3);
    assert.deepEqual(marked.steps.map((s) => [s.id, s.status]), [
      ['read', 'completed'],
      ['capture', 'completed'],
      ['answers', 'pending'],
    ]);

    // The same text again: its keys replay the cards (SPEC D3), no twins.
    await say(server, doc.id, '@planner once more');
    assert.equal((await replies(server, doc.id, 2, PATIENCE))[1], 'I read the plan and found 2 open questions: 2 decisions already in the document.');
    assert.equal((await decisions(server, 'alice', doc.id)).length, 2);
    assert.equal((await stat(credential)).mode & 0o777, 0o600, 'the renewed credential file is private');
    // The session is held beside the credential; the reply leaves the file
    // once the server acknowledges it (SPEC L10).
    const heldFile = path.join(dir, 'laptop.sessions.json');
    await waitFor(
      async () => (await readFile(heldFile, 'utf8').catch(() => '')) === JSON.stringify({ [first.session]: { questions: [] } }),
      PATIENCE,
      'the held file to hold the session and nothing owed',
    );

    // Killed, and started again: it resumes the same session, plan and all.
    demo.child.kill('SIGKILL');
    await withTimeout(demo.exited, PATIENCE, 'the demo to die');
    demo = startDemo(server, credential, onCleanup);
    await waitFor(
      async () => {
        const v = await plannerView(server, doc.id);
        return v.connected && !v.disconnected && v.session === first.session && v;
      },
      PATIENCE,
      'the restarted demo to resume its session',
    );
    await say(server, doc.id, '@planner again');
    assert.equal((await replies(server, doc.id, 3, PATIENCE))[2], 'I read the plan and found 2 open questions: 2 decisions already in the document.');
    assert.equal((await plannerView(server, doc.id)).session, first.session);
    assert.equal((await plan(server, first.session)).revision, 9, 'each turn went on from the plan handed back');

    // Ctrl-C detaches and exits cleanly.
    demo.child.kill('SIGTERM');
    assert.deepEqual(await withTimeout(demo.exited, PATIENCE, 'the demo to exit'), { code: 0, signal: null });
  } catch (e) {
    process.stderr.write(`\n----- demo Planner output -----\n${demo.output}\n-------------------------------\n`);
    throw e;
  }
});
