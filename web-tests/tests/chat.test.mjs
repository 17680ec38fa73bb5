// Chat and the Planner's status in the browser editor: lines posted in one
// browser appear in another, lifecycle lines are shown as system lines, chat
// text is rendered literally (never as HTML), the Planner's status says so
// when no machine is linked, and a Planner whose link drops shows as
// disconnected with its work kept.

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
}

/** The chat lines in the page, as {kind, text}. */
function chatLines(page) {
  return page.locator('#chat-list .chat-line[data-kind]').evaluateAll((lines) =>
    lines.map((l) => ({ kind: l.dataset.kind, text: l.querySelector('.chat-text')?.textContent ?? '' })),
  );
}

async function send(page, message) {
  await page.locator('#chat-input').fill(message);
  await page.locator('#chat-form button[type="submit"]').click();
}

serverTest('a @planner message with no machine shows the member line and a system line, in both browsers', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Chat plan');
  await server.addMember('alice', doc.id, 'bob', 'viewer');
  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  const bob = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl });
  await openDocument(alice, server, doc.id);
  await openDocument(bob, server, doc.id);

  assert.equal(await alice.locator('#chat-form').isVisible(), true, 'an owner sees the Chat form');
  assert.equal(await bob.locator('#chat-form').isVisible(), false, 'a viewer sees Chat without the form');

  await send(alice, '@planner hello');
  const lines = await waitFor(
    async () => {
      const l = await chatLines(alice);
      return l.some((x) => x.kind === 'system' && x.text.startsWith('The Planner is not connected')) && l;
    },
    TIMEOUT,
    'a system line saying the Planner is not connected',
  );
  const member = lines.findIndex((l) => l.kind === 'member' && l.text === '@planner hello');
  const system = lines.findIndex((l) => l.kind === 'system' && l.text.startsWith('The Planner is not connected'));
  assert.ok(member >= 0, `the member line is shown: ${JSON.stringify(lines)}`);
  assert.ok(system > member, `the system line comes after the member line: ${JSON.stringify(lines)}`);
  assert.match(await alice.locator('#chat-list .chat-line[data-kind="member"] .chat-author').first().textContent(), /alice/);
  assert.equal(await alice.locator('#chat-input').inputValue(), '', 'the input is cleared after sending');

  await waitFor(
    async () => (await chatLines(bob)).some((l) => l.kind === 'member' && l.text === '@planner hello'),
    TIMEOUT,
    'the second browser to show the member line',
  );
  assert.deepEqual(alice.pageErrors, []);
  assert.deepEqual(bob.pageErrors, []);
});

serverTest('hostile chat text renders literally and runs nothing', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Hostile chat');
  const res = await server.api('POST', `/documents/${doc.id}/chat`, { as: 'alice', body: { text: HOSTILE } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await openDocument(page, server, doc.id);
  await waitFor(
    async () => (await chatLines(page)).some((l) => l.text === HOSTILE),
    TIMEOUT,
    'the hostile line to render as text',
  );
  assert.equal(await page.locator('#chat-list img').count(), 0, 'no <img> element was created');
  // Give a would-be onerror handler time to fire.
  await page.waitForTimeout(300);
  assert.equal(await page.evaluate(() => typeof window.__pwned), 'undefined');
  assert.deepEqual(page.pageErrors, []);
});

serverTest('the Planner status says no Planner is linked when no machine is, and Stop is hidden', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Planner status');
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await openDocument(page, server, doc.id);
  await waitFor(
    async () => (await page.locator('#planner-status').getAttribute('data-state')) === 'unlinked',
    TIMEOUT,
    '#planner-status to say no Planner is linked',
  );
  assert.equal(await text(page, '#planner-status'), 'No Planner linked');
  assert.match(await text(page, '#planner-detail'), /Planner machines is linked, so @planner cannot start it/);
  assert.equal(await page.locator('#planner-stop').isVisible(), false);
  assert.equal(await page.locator('.run-card').count(), 0);

  // A message the server refuses (400 invalid_message: over 4000 bytes) is
  // shown as an error, and what was typed is kept.
  const long = 'x'.repeat(4001);
  await send(page, long);
  await waitFor(async () => await page.locator('#chat-error').isVisible(), TIMEOUT, '#chat-error to show');
  assert.match(await text(page, '#chat-error'), /invalid_message.*\(400\)/);
  assert.equal(await page.locator('#chat-input').inputValue(), long);
  assert.equal(await page.locator('#chat-list .chat-line').count(), 0);
});

serverTest('a Planner whose link dropped shows as disconnected with its runs kept, a Stop is held, and it comes back', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Away plan');
  const paired = await server.api('POST', '/machines', { as: 'alice', body: { name: 'laptop' } });
  assert.equal(paired.status, 201, JSON.stringify(paired.body));
  const machine = await Machine.link(server, paired.body.credential);
  const said = await server.api('POST', `/documents/${doc.id}/chat`, { as: 'alice', body: { text: '@planner build the site' } });
  assert.equal(said.status, 201);
  const invoke = await machine.expect('invoke');
  machine.send({ type: 'run', session: invoke.session, run: 'r1', name: 'Build the site', status: 'running' });
  machine.send({ type: 'reply', session: invoke.session, turn: invoke.turn, text: 'Building.' });

  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await openDocument(page, server, doc.id);
  const state = () => page.locator('#planner-status').getAttribute('data-state');
  await waitFor(async () => (await state()) === 'working', TIMEOUT, 'the Planner to show working on its run');
  assert.match(await text(page, '#planner-detail'), /Running Build the site on laptop/);
  await page.locator('.run-card[data-status="running"]').waitFor();

  machine.drop();
  await waitFor(async () => (await state()) === 'disconnected', TIMEOUT, 'the Planner to show disconnected');
  assert.equal(await text(page, '#planner-status'), 'Disconnected');
  assert.match(await text(page, '#planner-detail'), /laptop.*dropped its link.*kept until it reconnects/);
  const card = page.locator('.run-card[data-run="r1"]');
  assert.equal(await card.getAttribute('data-disconnected'), 'true');
  assert.match(await card.textContent(), /disconnected · running/);
  await waitFor(async () => (await chatLines(page)).some((l) => l.kind === 'system' && l.text.startsWith('The Planner disconnected.')), TIMEOUT, 'the disconnected line');

  // Stop is still offered, and held; Resume cannot be pressed while away.
  await page.locator('#planner-stop').click();
  await waitFor(async () => (await chatLines(page)).some((l) => l.text.startsWith('Stop was asked while the Planner is disconnected')), TIMEOUT, 'the held-Stop line');
  await waitFor(async () => await page.locator('#planner-resume').isVisible(), TIMEOUT, 'Resume to show');
  assert.equal(await page.locator('#planner-resume').isDisabled(), true, 'Resume is refused while away');

  const back = await Machine.link(server, paired.body.credential);
  back.send({ type: 'resume', sessions: [{ session: invoke.session, questions: [] }] });
  await back.expect('resumed');
  await back.expect('stop');
  await waitFor(async () => (await state()) === 'stopping', TIMEOUT, 'the Planner, back, to show the held Stop as stopping');
  assert.equal(await page.locator('.run-card[data-run="r1"]').getAttribute('data-disconnected'), 'false');
  assert.equal(await page.locator('#planner-resume').isDisabled(), false, 'Resume can be pressed once it is back');
  await page.locator('#planner-resume').click();
  await back.expect('stop-withdrawn');
  await waitFor(async () => (await chatLines(page)).some((l) => l.text === 'Resume was sent: the Stop is withdrawn.'), TIMEOUT, 'the Resume line');
  await waitFor(async () => (await state()) === 'working', TIMEOUT, 'the Planner working again');
  assert.deepEqual(page.pageErrors, []);
});

serverTest('a hidden tab closes its event stream and catches up on Chat when shown again', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Background tab');
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await page.addInitScript(() => {
    const Native = window.EventSource;
    window.__feeds = [];
    window.EventSource = class extends Native {
      constructor(...args) {
        super(...args);
        window.__feeds.push(this);
      }
    };
  });
  await openDocument(page, server, doc.id);
  const say = (text) => server.api('POST', `/documents/${doc.id}/chat`, { as: 'alice', body: { text } });
  await say('before hiding');
  await waitFor(async () => (await chatLines(page)).some((l) => l.text === 'before hiding'), TIMEOUT, 'the first line');

  const setVisibility = (state) =>
    page.evaluate((s) => {
      Object.defineProperty(document, 'visibilityState', { value: s, configurable: true });
      document.dispatchEvent(new Event('visibilitychange'));
    }, state);
  await setVisibility('hidden');
  assert.deepEqual(await page.evaluate(() => window.__feeds.map((f) => f.readyState)), [2], 'the stream is closed while hidden');
  await say('while hidden');
  await page.waitForTimeout(300);
  assert.equal((await chatLines(page)).some((l) => l.text === 'while hidden'), false, 'nothing arrives while hidden');

  await setVisibility('visible');
  await waitFor(async () => (await chatLines(page)).some((l) => l.text === 'while hidden'), TIMEOUT, 'the missed line once shown');
  const texts = (await chatLines(page)).map((l) => l.text);
  assert.deepEqual(texts, ['before hiding', 'while hidden'], 'each line once, in order');
  assert.deepEqual(page.pageErrors, []);
});
