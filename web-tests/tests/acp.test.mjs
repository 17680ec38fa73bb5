// `margin planner acp -- AGENT…` (SPEC O4): an Agent Client Protocol agent
// as the Planner. The agent is lib/acp-agent.mjs, scripted on the official
// ACP SDK and run by the real bridge as a subprocess speaking real ACP; it
// reaches the document tools through the MCP server the bridge hands it,
// with the official MCP client. Against a real server: a turn that reads,
// reports a tool call, keeps a plan, opens decisions, asks permission as a
// question card, waits, is answered and replies; Stop as `session/cancel`;
// the bridge killed and started again, loading its ACP session back.

import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { serverTest, waitFor, withTimeout } from '../lib/server.mjs';
import { plannerView, replies, say } from '../lib/chat.mjs';
import { decisions, documentWith } from '../lib/doc.mjs';
import { pairToFile, startProgram } from '../lib/example.mjs';
import { Proxy } from '../lib/proxy.mjs';

const PATIENCE = 15000;
const agentScript = fileURLToPath(new URL('../lib/acp-agent.mjs', import.meta.url));

/** A paired machine's credential file, and the agent's event log, in a folder of their own. */
async function machine(server, onCleanup) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-acp-'));
  onCleanup(() => rm(dir, { recursive: true, force: true }));
  const credential = path.join(dir, 'laptop.credential');
  await pairToFile(server, 'alice', 'laptop', credential);
  return { dir, credential, log: path.join(dir, 'agent.jsonl') };
}

/** Starts the bridge running the scripted agent; its output is kept for a failure report. */
function startBridge(server, { dir, credential, log }, onCleanup, { via = server.baseUrl } = {}) {
  return startProgram(
    server.bin,
    ['planner', 'acp', '--server', via, '--credential', credential, '--cwd', dir, '--', process.execPath, agentScript],
    onCleanup,
    { ACP_AGENT_LOG: log },
  );
}

/** What the agent logged so far. */
async function agentEvents(log) {
  const text = await readFile(log, 'utf8').catch(() => '');
  return text.split('\n').filter(Boolean).map((line) => JSON.parse(line));
}

/** Runs `fn`, printing the bridge's output if it fails. */
async function reporting(bridge, fn) {
  try {
    await fn();
  } catch (e) {
    process.stderr.write(`\n----- ACP bridge output -----\n${bridge.output}\n-----------------------------\n`);
    throw e;
  }
}

serverTest('an ACP agent reads, plans, opens decisions, asks permission as a card, waits for the answer and replies', { timeout: 90000 }, async ({ server, onCleanup }) => {
  const m = await machine(server, onCleanup);
  const { doc } = await documentWith(server, 'Plan', ['We launch in March.', 'Which region first?']);
  const bridge = startBridge(server, m, onCleanup);
  await reporting(bridge, async () => {
    await waitFor(async () => (await plannerView(server, doc.id)).state === 'available', PATIENCE, 'the bridge to link');
    await say(server, doc.id, '@planner review, and ask permission to deploy');

    // The permission request is a single-choice card over the agent's options.
    const permission = await waitFor(
      async () => (await decisions(server, 'alice', doc.id)).find((c) => c.key === 'permission-deploy-1'),
      PATIENCE,
      'the permission card',
    );
    assert.equal(permission.question, 'The Planner asks to run Deploy the draft: allow it?');
    assert.equal(permission.response, 'single_choice');
    assert.deepEqual(permission.choices.map((c) => c.label), ['Allow once', 'Reject']);
    // The agent's turn cannot go on: a paused run says why.
    const waitRun = 'Waiting for your answer: may it run Deploy the draft?';
    await waitFor(
      async () => (await plannerView(server, doc.id)).runs.some((r) => r.name === waitRun && r.status === 'paused'),
      PATIENCE,
      'a paused run for the wait',
    );

    const answered = await server.api('POST', `/documents/${doc.id}/decisions/${permission.id}/answer`, {
      as: 'alice',
      body: { choices: ['c1'] },
    });
    assert.equal(answered.status, 200, JSON.stringify(answered.body));

    const [reply] = await replies(server, doc.id, 1, PATIENCE);
    assert.equal(reply, 'I read 2 blocks and opened 1 decisions. Permission: allow.');
    const cards = await decisions(server, 'alice', doc.id);
    assert.deepEqual(cards.map((c) => c.question).sort(), ['The Planner asks to run Deploy the draft: allow it?', 'Which region first?']);

    // The agent's plan is the session's, and its tool call a finished run.
    const v = await plannerView(server, doc.id);
    assert.deepEqual(v.runs.map((r) => [r.name, r.status]).sort(), [
      ['Scan for questions', 'completed'],
      [waitRun, 'completed'],
    ]);
    const snapshot = (await server.api('GET', `/sessions/${v.session}`, { as: 'alice' })).body;
    assert.deepEqual(snapshot.plan.steps.map((s) => [s.id, s.description, s.status]), [
      ['step-1', 'Read the plan', 'completed'],
      ['step-2', 'Open the questions', 'in_progress'],
      ['step-3', 'Reply', 'pending'],
    ]);
    const events = await agentEvents(m.log);
    assert.deepEqual(events.filter((e) => e.event === 'permission').map((e) => e.outcome), ['allow']);
    assert.equal(events.filter((e) => e.event === 'new').length, 1, 'one ACP session for the Margin session');
  });
});

serverTest('a question the agent asked in its reply is withheld and told back to it, and it opens it as a decision', { timeout: 60000 }, async ({ server, onCleanup }) => {
  const m = await machine(server, onCleanup);
  const { doc } = await documentWith(server, 'Plan', ['We launch in March.']);
  const bridge = startBridge(server, m, onCleanup);
  await reporting(bridge, async () => {
    await waitFor(async () => (await plannerView(server, doc.id)).state === 'available', PATIENCE, 'the bridge to link');
    await say(server, doc.id, '@planner answer in prose');
    // The question never reaches Chat (SPEC T2); the repair prompt tells
    // the agent, which opens it as a card and replies without asking.
    assert.deepEqual(await replies(server, doc.id, 1, PATIENCE), ['Opened 1 decisions for what I asked.']);
    const cards = await decisions(server, 'alice', doc.id);
    assert.deepEqual(cards.map((c) => c.question), ['Which region should we launch in first?']);
    const prompts = (await agentEvents(m.log)).filter((e) => e.event === 'prompt').map((e) => e.text);
    assert.equal(prompts.length, 2, JSON.stringify(prompts));
    assert.match(prompts[1], /Your last reply asked these questions[^]*- Which region should we launch in first\?/);
  });
});

serverTest("an agent's tool call cut off with the link gets its one result, and the turn its one reply", { timeout: 120000 }, async ({ server, onCleanup }) => {
  const m = await machine(server, onCleanup);
  const proxy = await Proxy.start(server.port);
  onCleanup(() => proxy.close());
  const bridge = startBridge(server, m, onCleanup, { via: `http://127.0.0.1:${proxy.port}` });
  await reporting(bridge, async () => {
    // Cut, or silenced both ways, just before the card call goes up (it
    // never arrived) and just after (it ran; its result was lost): either
    // way it runs once and the agent gets its result (SPEC W1, L10).
    for (const mode of ['cut', 'partition']) {
      for (const when of ['before', 'after']) {
        const name = `${mode} ${when}`;
        const { doc } = await documentWith(server, name, ['Which region first?']);
        await waitFor(async () => (await plannerView(server, doc.id)).state === 'available', PATIENCE, `the bridge to link (${name})`);
        const broken = proxy.faultAt({ direction: 'up', matches: (msg) => msg.type === 'tool-call' && msg.name === 'open_decisions', mode, when });
        await say(server, doc.id, '@planner review');
        await withTimeout(broken, PATIENCE, `the link to break at the card call (${name})`);
        if (mode === 'partition') proxy.cut();
        assert.deepEqual(await replies(server, doc.id, 1, PATIENCE), ['I read 1 blocks and opened 1 decisions.'], name);
        assert.equal((await decisions(server, 'alice', doc.id)).length, 1, `one card (${name})`);
        const lines = (await server.api('GET', `/documents/${doc.id}/chat`, { as: 'alice' })).body.messages;
        assert.deepEqual(lines.filter((l) => l.text.includes('without the turn')).map((l) => l.text), [], `no turn lost (${name})`);
      }
    }
  });
});

serverTest('Stop is session/cancel, confirmed once the agent has ended its prompt cancelled', { timeout: 60000 }, async ({ server, onCleanup }) => {
  const m = await machine(server, onCleanup);
  const { doc } = await documentWith(server, 'Plan', ['We launch in March.']);
  const bridge = startBridge(server, m, onCleanup);
  await reporting(bridge, async () => {
    await waitFor(async () => (await plannerView(server, doc.id)).state === 'available', PATIENCE, 'the bridge to link');
    await say(server, doc.id, '@planner be slow');
    await waitFor(async () => (await agentEvents(m.log)).some((e) => e.event === 'prompt'), PATIENCE, 'the prompt');
    const stop = await server.api('POST', `/documents/${doc.id}/planner/stop`, { as: 'alice' });
    assert.equal(stop.status, 202, JSON.stringify(stop.body));
    await waitFor(async () => (await plannerView(server, doc.id)).state === 'stopped', PATIENCE, 'the session to stop');
    // "Stopped" only once it stopped (SPEC P4): the agent ended its prompt first.
    const events = await agentEvents(m.log);
    assert.deepEqual(
      events.filter((e) => e.event === 'cancel' || e.event === 'stopped').map((e) => e.stopReason ?? e.event),
      ['cancel', 'cancelled'],
    );
  });
});

serverTest('a bridge killed and started again loads its ACP session back and goes on', { timeout: 90000 }, async ({ server, onCleanup }) => {
  const m = await machine(server, onCleanup);
  const { doc } = await documentWith(server, 'Plan', ['Which region first?']);
  let bridge = startBridge(server, m, onCleanup);
  await reporting(bridge, async () => {
    await waitFor(async () => (await plannerView(server, doc.id)).state === 'available', PATIENCE, 'the bridge to link');
    await say(server, doc.id, '@planner review');
    assert.equal((await replies(server, doc.id, 1, PATIENCE))[0], 'I read 1 blocks and opened 1 decisions.');
    const first = await plannerView(server, doc.id);
    bridge.child.kill('SIGKILL');
    await withTimeout(bridge.exited, PATIENCE, 'the bridge to die');
  });
  bridge = startBridge(server, m, onCleanup);
  await reporting(bridge, async () => {
    await waitFor(async () => {
      const v = await plannerView(server, doc.id);
      return v.connected && !v.disconnected && v;
    }, PATIENCE, 'the restarted bridge to link');
    await say(server, doc.id, '@planner again');
    // The same key replays the card: no twin (SPEC D3).
    assert.equal((await replies(server, doc.id, 2, PATIENCE))[1], 'I read 1 blocks and opened 1 decisions.');
    assert.equal((await decisions(server, 'alice', doc.id)).length, 1);
    const events = await agentEvents(m.log);
    const created = events.filter((e) => e.event === 'new').map((e) => e.sessionId);
    const loaded = events.filter((e) => e.event === 'load').map((e) => e.sessionId);
    assert.equal(created.length, 1, JSON.stringify(events));
    assert.deepEqual(loaded, created, 'the second agent loaded the first one\'s session');
    bridge.child.kill('SIGTERM');
    assert.deepEqual(await withTimeout(bridge.exited, PATIENCE, 'the bridge to exit'), { code: 0, signal: null });
  });
});

serverTest('a permission question survives kill -9 of the server: answered after the restart, the waiting agent goes on', { timeout: 90000 }, async ({ server, onCleanup }) => {
  const m = await machine(server, onCleanup);
  const { doc } = await documentWith(server, 'Plan', ['We launch in March.']);
  const bridge = startBridge(server, m, onCleanup);
  await reporting(bridge, async () => {
    await waitFor(async () => (await plannerView(server, doc.id)).state === 'available', PATIENCE, 'the bridge to link');
    await say(server, doc.id, '@planner ask permission to deploy');
    const permission = await waitFor(
      async () => (await decisions(server, 'alice', doc.id)).find((c) => c.key === 'permission-deploy-1'),
      PATIENCE,
      'the permission card',
    );
    await server.restart({ hard: true });
    // The bridge links again and resumes; the agent still waits on its request.
    await waitFor(async () => {
      const v = await plannerView(server, doc.id);
      return v.connected && !v.disconnected && v;
    }, PATIENCE, 'the bridge to resume on the restarted server');
    const answered = await server.api('POST', `/documents/${doc.id}/decisions/${permission.id}/answer`, {
      as: 'alice',
      body: { choices: ['c1'] },
    });
    assert.equal(answered.status, 200, JSON.stringify(answered.body));
    assert.deepEqual(await replies(server, doc.id, 1, PATIENCE), ['I read 1 blocks and opened 0 decisions. Permission: allow.']);
    const events = await agentEvents(m.log);
    assert.deepEqual(events.filter((e) => e.event === 'permission').map((e) => e.outcome), ['allow']);
    assert.equal(events.filter((e) => e.event === 'started').length, 1, 'the same agent throughout');
  });
});

serverTest('a permission question survives kill -9 of the bridge: the answer reaches the agent started again', { timeout: 90000 }, async ({ server, onCleanup }) => {
  const m = await machine(server, onCleanup);
  const { doc } = await documentWith(server, 'Plan', ['We launch in March.']);
  let bridge = startBridge(server, m, onCleanup);
  let permission;
  await reporting(bridge, async () => {
    await waitFor(async () => (await plannerView(server, doc.id)).state === 'available', PATIENCE, 'the bridge to link');
    await say(server, doc.id, '@planner ask permission to deploy');
    permission = await waitFor(
      async () => (await decisions(server, 'alice', doc.id)).find((c) => c.key === 'permission-deploy-1'),
      PATIENCE,
      'the permission card',
    );
    bridge.child.kill('SIGKILL');
    await withTimeout(bridge.exited, PATIENCE, 'the bridge to die');
  });
  // Answered while no bridge runs: the answer waits for the machine (SPEC L5).
  const answered = await server.api('POST', `/documents/${doc.id}/decisions/${permission.id}/answer`, {
    as: 'alice',
    body: { choices: ['c2'] },
  });
  assert.equal(answered.status, 200, JSON.stringify(answered.body));
  bridge = startBridge(server, m, onCleanup);
  await reporting(bridge, async () => {
    // The turn died with the agent: the server says so (SPEC W2a) ...
    await waitFor(
      async () => {
        const res = await server.api('GET', `/documents/${doc.id}/chat`, { as: 'alice' });
        return res.body.messages.some((m) => m.kind === 'system' && m.text.includes('came back without the turn'));
      },
      PATIENCE,
      'the abandoned turn to be said',
    );
    // ... and the answer reaches the agent: told in its next prompt, and as
    // the outcome of the same request asked again, at once.
    await say(server, doc.id, '@planner ask permission to deploy again');
    const [reply] = await replies(server, doc.id, 1, PATIENCE);
    assert.equal(reply, 'I read 1 blocks and opened 0 decisions. Permission: reject.');
    const events = await agentEvents(m.log);
    assert.deepEqual(events.filter((e) => e.event === 'permission').map((e) => e.outcome), ['reject']);
    assert.equal(events.filter((e) => e.event === 'load').length, 1, 'the second agent loaded the session');
    const prompts = events.filter((e) => e.event === 'prompt').map((e) => e.text);
    // Named in full when the first bridge wrote the request down before it
    // was killed; else by its card alone.
    assert.match(prompts.at(-1), /^\(Before a restart you asked permission to run (Deploy the draft; people chose "Reject"|a tool call; people answered its card)\.\)\n/);
    assert.equal((await decisions(server, 'alice', doc.id)).length, 1, 'the same card, not a twin');
  });
});
