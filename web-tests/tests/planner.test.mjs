// SPEC B1a, L4, R1, P4 in a real Chromium: the Planner's status is one
// component whose state follows a real machine link — no machine linked,
// available, working, waiting, stopping, stopped, disconnected — with Stop
// only while there is something to stop, saying what it ends; finished runs
// are grouped with their true ages; and Chat is pushed, not polled: a reply
// shows with no request made for it.

import assert from 'node:assert/strict';
import { serverTest, waitFor } from '../lib/server.mjs';
import { useBrowser, openPage, text, TIMEOUT } from '../lib/browser.mjs';
import { Machine } from '../lib/machine.mjs';
import { openDocument } from '../lib/doc.mjs';

useBrowser();

async function pair(server, owner, name = 'laptop') {
  const paired = await server.api('POST', '/machines', { as: owner, body: { name } });
  assert.equal(paired.status, 201, JSON.stringify(paired.body));
  return paired.body.credential;
}

/** The status as the page shows it. */
async function status(page) {
  return {
    state: await page.locator('#planner-status').getAttribute('data-state'),
    label: await text(page, '#planner-status'),
    detail: await text(page, '#planner-detail'),
    stop: await page.locator('#planner-stop').isVisible(),
  };
}

function until(page, state, what) {
  return waitFor(
    async () => {
      const s = await status(page);
      return s.state === state ? s : false;
    },
    TIMEOUT,
    what ?? `the Planner to show ${state}`,
  );
}

async function say(page, message) {
  await page.locator('#chat-input').fill(message);
  await page.locator('#chat-send').click();
}

serverTest('the status follows a real machine link through every state, and Stop says what it ends', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'States');
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await openDocument(page, server, doc.id);
  let s = await until(page, 'unlinked');
  assert.equal(s.label, 'No Planner linked');
  assert.equal(s.stop, false);

  // Linking a machine makes the Planner available at once, before any @planner.
  const credential = await pair(server, 'alice');
  const machine = await Machine.link(server, credential);
  s = await until(page, 'available');
  assert.deepEqual(s, {
    state: 'available',
    label: 'Available',
    detail: 'Its machine “laptop” is linked. Mention @planner in Chat to ask it.',
    stop: false,
  });

  // A turn: working, and Stop ends the reply.
  await say(page, '@planner build the site');
  const invoke = await machine.expect('invoke');
  s = await until(page, 'working');
  assert.equal(s.detail, 'Replying on laptop.');
  assert.equal(s.stop, true);
  assert.equal(await text(page, '#planner-stop-note'), 'Ends its reply.');
  machine.send({ type: 'run', session: invoke.session, run: 'r1', name: 'Build the site', status: 'running' });
  await waitFor(async () => (await text(page, '#planner-stop-note')) === 'Ends its reply and 1 run.', TIMEOUT, 'Stop to name the run too');
  assert.equal(await page.locator('#planner-stop').getAttribute('aria-label'), 'Stop the Planner: ends its reply and 1 run');
  machine.send({ type: 'reply', session: invoke.session, turn: invoke.turn, text: 'Building.' });
  await waitFor(async () => (await status(page)).detail === 'Running Build the site on laptop.', TIMEOUT, 'the run alone');

  // A paused run waits; a finished one leaves the Planner available, Stop gone.
  machine.send({ type: 'run', session: invoke.session, run: 'r1', name: 'Build the site', status: 'paused' });
  s = await until(page, 'waiting');
  assert.equal(s.detail, '1 run paused.');
  machine.send({ type: 'run', session: invoke.session, run: 'r1', name: 'Build the site', status: 'completed' });
  s = await until(page, 'available');
  assert.equal(s.stop, false, 'nothing to stop');
  const chip = page.locator('.run-card[data-run="r1"]');
  assert.match(await chip.textContent(), /^Build the sitecompletedafter \d+\.\d s, just now$/);

  // Finished runs of one name are grouped, newest listed first inside.
  for (const run of ['r2', 'r3']) {
    machine.send({ type: 'run', session: invoke.session, run, name: 'Build the site', status: 'running' });
    machine.send({ type: 'run', session: invoke.session, run, name: 'Build the site', status: 'completed' });
  }
  const group = page.locator('.run-group[data-name="Build the site"]');
  await group.waitFor();
  // The group forms at its second finished run; the third's report may land after.
  await waitFor(async () => /^Build the site3 runslast completedjust now$/.test(await group.locator('summary').textContent()), TIMEOUT, 'the three runs grouped');
  assert.equal(await page.locator('#planner-runs > .run-card').count(), 0, 'no loose chips for grouped runs');
  await group.locator('summary').click();
  assert.deepEqual(await group.locator('.run-card').evaluateAll((cards) => cards.map((c) => c.dataset.run)), ['r3', 'r2', 'r1']);

  // Stop while a run runs: stopping, then stopped once the machine confirms.
  machine.send({ type: 'run', session: invoke.session, run: 'r4', name: 'Deploy', status: 'running' });
  await until(page, 'working');
  await page.locator('#planner-stop').click();
  s = await until(page, 'stopping');
  assert.equal(s.stop, false, 'Stop is not offered twice');
  assert.equal(await page.locator('#planner-resume').isVisible(), true);
  await machine.expect('stop');
  machine.send({ type: 'stopped', session: invoke.session });
  s = await until(page, 'stopped');
  assert.equal(s.detail, 'The Planner stopped. Mention @planner to start it again.');
  assert.equal(await page.locator('#planner-resume').isVisible(), false);

  // A new @planner starts it again; its machine going away shows as such.
  await say(page, '@planner once more');
  await machine.expect('invoke');
  await until(page, 'working');
  machine.drop();
  s = await until(page, 'disconnected');
  assert.equal(s.label, 'Disconnected');
  assert.deepEqual(page.pageErrors, []);
});

serverTest('Chat is pushed: a reply shows with no request for it, and nothing polls', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Live chat');
  const machine = await Machine.link(server, await pair(server, 'alice'));
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  const polls = [];
  page.on('request', (r) => {
    const url = new URL(r.url());
    if (/\/chat$|\/planner$/.test(url.pathname) && r.method() === 'GET') polls.push(url.pathname);
  });
  await openDocument(page, server, doc.id);
  await until(page, 'available');
  await say(page, '@planner hello');
  const invoke = await machine.expect('invoke');

  const reply = 'Hello from the Planner, pushed as soon as it is committed.';
  const shown = page.waitForFunction(
    (t) => [...document.querySelectorAll('#chat-list .chat-text')].some((e) => e.textContent === t),
    reply,
    { polling: 'raf', timeout: TIMEOUT },
  );
  machine.send({ type: 'reply', session: invoke.session, turn: invoke.turn, text: reply });
  await shown;
  // Pushed: it showed with no request for Chat or the Planner's status.
  assert.deepEqual(polls, [], 'the reply came without a request');
  const line = page.locator('#chat-list .chat-line[data-kind="planner"]').last();
  assert.equal(await line.locator('.chat-author').textContent(), 'Planner', 'the author reads once, plainly');

  // Nothing polls: a few seconds idle bring no Chat or status request.
  await page.waitForTimeout(2500);
  assert.deepEqual(polls, [], 'no polling of /chat or /planner');
  assert.deepEqual(page.pageErrors, []);
});
