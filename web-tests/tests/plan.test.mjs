// The Planner's plan in the browser editor (SPEC B1, U1, E1–E3): a scripted
// machine that declares `planning` calls update_plan and the steps appear
// live, beside the Planner's status, for an owner and a viewer, without a
// reload; a second update replaces them; model-authored text is shown
// literally and runs nothing; a new session's plan replaces the old one even
// at a lower revision, and leaving the document closes its stream; and a
// Planner that did not declare planning shows no plan panel and opens no
// event stream.

import assert from 'node:assert/strict';
import { serverTest, waitFor } from '../lib/server.mjs';
import { useBrowser, openPage, text, TIMEOUT } from '../lib/browser.mjs';
import { Machine } from '../lib/machine.mjs';

const HOSTILE = '<img src=x onerror="window.__pwned=1">';

useBrowser();

async function openDocument(page, server, docId) {
  await page.goto(`${server.baseUrl}/#/d/${docId}`);
  await page.locator('#editor .ProseMirror').waitFor();
  await page.locator('#chat').waitFor();
  // Set once per load: still there later means the page was never reloaded.
  await page.evaluate(() => {
    window.__loaded = 'once';
  });
}

/**
 * Keeps every EventSource the page opens on a session's feed in
 * `window.__sources` (the document's own feed is always open beside them).
 */
function trackEventSources(page) {
  return page.addInitScript(() => {
    const Native = window.EventSource;
    window.__sources = [];
    window.EventSource = class extends Native {
      constructor(...args) {
        super(...args);
        if (String(args[0]).includes('/sessions/')) window.__sources.push(this);
      }
    };
  });
}

/** readyState of each EventSource the page opened, oldest first (2 is CLOSED). */
function sourceStates(page) {
  return page.evaluate(() => window.__sources.map((s) => s.readyState));
}

/** The plan panel as shown: {revision, explanation, steps:[{id, status, text, label, title}]}. */
function shownPlan(page) {
  return page.locator('#plan').evaluate((panel) => ({
    visible: !panel.hidden,
    revision: panel.dataset.revision ?? '',
    explanation: panel.querySelector('#plan-explanation')?.hidden
      ? null
      : (panel.querySelector('#plan-explanation')?.textContent ?? null),
    steps: [...panel.querySelectorAll('#plan-steps .plan-step')].map((li) => ({
      id: li.dataset.step,
      status: li.dataset.status,
      text: li.querySelector('.plan-step-text')?.textContent ?? '',
      label: li.querySelector('.plan-step-status')?.textContent ?? '',
      title: li.title,
    })),
  }));
}

/** Waits until the page shows the plan at `revision`, and returns it. */
function planAt(page, revision) {
  return waitFor(
    async () => {
      const plan = await shownPlan(page);
      return plan.visible && plan.revision === String(revision) && plan;
    },
    TIMEOUT,
    `the plan at revision ${revision} to show`,
  );
}

async function pairMachine(server, owner) {
  const paired = await server.api('POST', '/machines', { as: owner, body: { name: 'laptop' } });
  assert.equal(paired.status, 201, JSON.stringify(paired.body));
  return paired.body.credential;
}

async function invokePlanner(server, machine, docId, text) {
  const said = await server.api('POST', `/documents/${docId}/chat`, { as: 'alice', body: { text } });
  assert.equal(said.status, 201, JSON.stringify(said.body));
  return machine.expect('invoke');
}

/** Calls update_plan in the invoked turn; returns the tool result's output. */
async function updatePlan(machine, invoke, callId, args) {
  machine.send({
    type: 'tool-call',
    session: invoke.session,
    turn: invoke.turn,
    call_id: callId,
    name: 'update_plan',
    arguments: args,
  });
  const result = await machine.expect('tool-result');
  assert.equal(result.call_id, callId);
  assert.ok(result.output, `update_plan was accepted: ${JSON.stringify(result)}`);
  return result.output;
}

serverTest('a declared plan shows live for an owner and a viewer, updates in place, and renders model text literally', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Launch plan');
  await server.addMember('alice', doc.id, 'bob', 'viewer');
  const credential = await pairMachine(server, 'alice');
  const machine = await Machine.link(server, credential, { manifest: { planning: true } });
  assert.equal(machine.welcome.capabilities.durable_plans, true, 'the server advertises durable plans');

  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  const bob = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl });
  await openDocument(alice, server, doc.id);
  await openDocument(bob, server, doc.id);
  assert.equal(await alice.locator('#plan').isVisible(), false, 'no session, no plan panel');

  const invoke = await invokePlanner(server, machine, doc.id, '@planner plan the launch');
  // Planning declared, nothing planned yet: the panel says so.
  await waitFor(async () => await alice.locator('#plan-empty').isVisible(), TIMEOUT, 'the empty plan to show');
  assert.equal(await text(alice, '#plan-empty'), 'The Planner has not made a plan yet.');

  const first = await updatePlan(machine, invoke, 'c1', {
    expected_revision: 0,
    explanation: `Explaining ${HOSTILE}`,
    steps: [
      { id: 'read', description: 'Read the brief', status: 'completed' },
      { id: 'draft', description: HOSTILE, status: 'in_progress' },
      { id: 'review', description: 'Review with the team', status: 'pending' },
    ],
  });
  assert.equal(first.plan.revision, 1);

  for (const page of [alice, bob]) {
    const plan = await planAt(page, 1);
    assert.deepEqual(plan, {
      visible: true,
      revision: '1',
      explanation: `Explaining ${HOSTILE}`,
      steps: [
        {
          id: 'read',
          status: 'completed',
          text: 'Read the brief',
          label: 'marked complete',
          title: 'Marked complete by the Planner (its own word: Margin does not check the work)',
        },
        { id: 'draft', status: 'in_progress', text: HOSTILE, label: 'in progress', title: 'Marked in progress by the Planner' },
        {
          id: 'review',
          status: 'pending',
          text: 'Review with the team',
          label: 'pending',
          title: 'Not started yet, according to the Planner',
        },
      ],
    });
    assert.equal(await page.locator('#plan-empty').isVisible(), false);
  }

  const second = await updatePlan(machine, invoke, 'c2', {
    expected_revision: 1,
    steps: [
      { id: 'read', description: 'Read the brief', status: 'completed' },
      { id: 'draft', description: 'Draft the launch note', status: 'completed' },
      { id: 'ship', description: 'Ship it', status: 'in_progress' },
    ],
  });
  assert.equal(second.plan.revision, 2);
  for (const page of [alice, bob]) {
    const plan = await planAt(page, 2);
    assert.equal(plan.explanation, null, 'an update without an explanation shows none');
    assert.deepEqual(
      plan.steps.map((s) => [s.id, s.status, s.text]),
      [
        ['read', 'completed', 'Read the brief'],
        ['draft', 'completed', 'Draft the launch note'],
        ['ship', 'in_progress', 'Ship it'],
      ],
    );
    assert.equal(await page.evaluate(() => window.__loaded), 'once', 'the page was not reloaded');
  }

  // A page opened now starts from the snapshot at revision 2.
  const late = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await openDocument(late, server, doc.id);
  assert.deepEqual((await planAt(late, 2)).steps.map((s) => s.id), ['read', 'draft', 'ship']);

  // Nothing the model wrote ran or became markup.
  await alice.waitForTimeout(300);
  for (const page of [alice, bob, late]) {
    assert.equal(await page.locator('#plan img').count(), 0, 'no <img> element in the plan panel');
    assert.equal(await page.evaluate(() => typeof window.__pwned), 'undefined');
    assert.deepEqual(page.pageErrors, []);
  }
});

serverTest('a new session replaces the old plan, even at a lower revision, and leaving closes the stream', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Two sessions');
  const credential = await pairMachine(server, 'alice');
  const machine = await Machine.link(server, credential, { manifest: { planning: true } });
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await trackEventSources(page);
  await openDocument(page, server, doc.id);

  const one = await invokePlanner(server, machine, doc.id, '@planner first');
  await updatePlan(machine, one, 'c1', {
    expected_revision: 0,
    steps: [{ id: 'a', description: 'First session, first list', status: 'in_progress' }],
  });
  await updatePlan(machine, one, 'c2', {
    expected_revision: 1,
    steps: [{ id: 'a', description: 'First session, second list', status: 'completed' }],
  });
  assert.equal((await planAt(page, 2)).steps[0].text, 'First session, second list');

  // The machine comes back on a new link holding no sessions: the first one
  // ends, and the next @planner starts a second one with a plan of its own.
  machine.drop();
  const again = await Machine.link(server, credential, { manifest: { planning: true } });
  again.send({ type: 'resume', sessions: [] });
  await again.expect('resumed');
  const two = await invokePlanner(server, again, doc.id, '@planner second');
  assert.notEqual(two.session, one.session);
  await updatePlan(again, two, 'c1', {
    expected_revision: 0,
    steps: [{ id: 'b', description: 'Second session', status: 'pending' }],
  });
  const plan = await planAt(page, 1);
  assert.deepEqual(plan.steps.map((s) => [s.id, s.text]), [['b', 'Second session']]);
  assert.equal(await page.evaluate(() => window.__loaded), 'once', 'the page was not reloaded');
  const states = await sourceStates(page);
  assert.ok(states.length >= 2, `a stream per session: ${states}`);
  assert.deepEqual(states.slice(0, -1).filter((s) => s !== 2), [], `the first session's stream is closed: ${states}`);
  assert.notEqual(states.at(-1), 2, `the second session's stream is open: ${states}`);

  // Leaving the document closes the stream and hides the panel.
  await page.locator('a.back').click();
  await page.locator('#home').waitFor();
  assert.deepEqual(await sourceStates(page), states.map(() => 2), 'every stream is closed');
  assert.equal(await page.locator('#plan').isVisible(), false);
  assert.deepEqual(page.pageErrors, []);
});

serverTest('a Planner that did not declare planning shows no plan panel and opens no stream', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'No planning');
  const credential = await pairMachine(server, 'alice');
  const machine = await Machine.link(server, credential);
  assert.equal(machine.welcome.capabilities.durable_plans, true, 'advertised, but not declared');

  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  const streams = [];
  page.on('request', (r) => {
    if (r.url().includes('/sessions/') && r.url().includes('/events')) streams.push(r.url());
  });
  await openDocument(page, server, doc.id);
  const fetched = page.waitForResponse((r) => new URL(r.url()).pathname.startsWith('/sessions/'), { timeout: TIMEOUT });
  const invoke = await invokePlanner(server, machine, doc.id, '@planner no plan please');
  const snapshot = await fetched;
  assert.equal(new URL(snapshot.url()).pathname, `/sessions/${encodeURIComponent(invoke.session)}`);
  assert.equal(snapshot.status(), 200);
  assert.equal('plan' in (await snapshot.json()), false, 'the snapshot has no plan field');

  // Give the panel time to act on the snapshot and the Planner's next views.
  await page.waitForTimeout(1000);
  assert.equal(await page.locator('#plan').isVisible(), false, 'no plan panel');
  assert.match((await page.locator('#planner-status').getAttribute('data-state')) ?? '', /^(working|available)$/);
  assert.match((await text(page, '#planner-detail')) ?? '', /laptop/);
  assert.deepEqual(streams, [], 'no event stream was opened');
  assert.deepEqual(page.pageErrors, []);
});
