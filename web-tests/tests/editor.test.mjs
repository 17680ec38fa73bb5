// SPEC B1, B2: the browser editor served at `/`, driven in Debian's Chromium.

import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { serverTest, waitFor, sleep } from '../lib/server.mjs';
import { useBrowser, openPage, text, TIMEOUT } from '../lib/browser.mjs';

const artifacts = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'artifacts');

useBrowser();

serverTest('the token form signs in, rejects a bad token and signs out', {}, async ({ server, onCleanup }) => {
  const page = await openPage(onCleanup);
  await page.goto(`${server.baseUrl}/`);
  await page.locator('#token-form').waitFor({ state: 'visible' });
  assert.equal(await page.locator('#home').isVisible(), false);

  await page.fill('#token-input', 'definitely-not-a-token');
  await page.click('#token-form button[type=submit]');
  await page.locator('#token-error').waitFor({ state: 'visible' });
  assert.match(await text(page, '#token-error'), /401/);
  assert.equal(await page.evaluate(() => localStorage.getItem('margin.token')), null);

  await page.fill('#token-input', server.tokens.alice);
  await page.click('#token-form button[type=submit]');
  await page.locator('#home').waitFor({ state: 'visible' });
  assert.equal(await text(page, '#account'), 'alice');
  assert.equal(await page.locator('#token-form').isVisible(), false);
  assert.equal(await page.evaluate(() => localStorage.getItem('margin.token')), server.tokens.alice);

  // The token is remembered across a reload.
  await page.reload();
  await page.locator('#home').waitFor({ state: 'visible' });
  assert.equal(await text(page, '#account'), 'alice');

  await page.click('#sign-out');
  await page.locator('#token-form').waitFor({ state: 'visible' });
  assert.equal(await page.evaluate(() => localStorage.getItem('margin.token')), null);
  assert.equal(await page.locator('#home').isVisible(), false);

  // A remembered token that the server no longer accepts is forgotten with a clear message.
  await page.evaluate(() => localStorage.setItem('margin.token', 'stale-token'));
  await page.reload();
  await page.locator('#token-error').waitFor({ state: 'visible' });
  assert.match(await text(page, '#token-error'), /401/);
  assert.equal(await page.evaluate(() => localStorage.getItem('margin.token')), null);
  assert.deepEqual(page.pageErrors, []);
});

serverTest('the document list shows documents and New document creates one', {}, async ({ server, onCleanup }) => {
  const existing = await server.createDocument('alice', 'Existing plan');
  const hostile = '<img src=x onerror="window.__pwned=1">Hostile <b>title</b>';
  await server.createDocument('alice', hostile);
  await server.createDocument('bob', 'Not shared with alice');

  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await page.goto(`${server.baseUrl}/`);
  await page.locator('#doc-list li').nth(1).waitFor();
  const titles = await page.locator('#doc-list li .title').allTextContents();
  assert.deepEqual([...titles].sort(), [hostile, 'Existing plan'].sort());
  // Server-provided strings are text, never markup.
  assert.equal(await page.locator('#doc-list img, #doc-list b').count(), 0);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  const href = await page.locator('#doc-list li', { hasText: 'Existing plan' }).locator('a').getAttribute('href');
  assert.equal(href, `#/d/${encodeURIComponent(existing.id)}`);

  await page.fill('#new-doc-title', 'Fresh plan');
  await page.click('#new-doc');
  await waitFor(async () => /^#\/d\/.+/.test(await page.evaluate(() => location.hash)), TIMEOUT, 'navigation to the new document');
  const id = decodeURIComponent((await page.evaluate(() => location.hash)).slice('#/d/'.length));
  await page.locator('#doc-title').waitFor({ state: 'visible' });
  assert.equal(await text(page, '#doc-title'), 'Fresh plan');
  await page.locator('#editor .ProseMirror').waitFor();
  await waitFor(async () => (await text(page, '#status')) === 'connected', TIMEOUT, '#status to read "connected"');

  const created = await server.api('GET', `/documents/${id}`, { as: 'alice' });
  assert.equal(created.status, 200);
  assert.equal(created.body.title, 'Fresh plan');
  assert.equal(created.body.role, 'owner');

  // Back on the list, the new document is there.
  await page.click('a.back');
  await page.locator('#doc-list li').nth(2).waitFor();
  const after = await page.locator('#doc-list li .title').allTextContents();
  assert.deepEqual([...after].sort(), [hostile, 'Existing plan', 'Fresh plan'].sort());
  assert.equal(await page.locator('#status').isVisible(), false);

  // Opening the hostile-titled document renders its title inertly as well.
  await page.locator('#doc-list li', { hasText: 'Hostile' }).locator('a').click();
  await page.locator('#doc-title').waitFor({ state: 'visible' });
  assert.equal(await text(page, '#doc-title'), hostile);
  assert.equal(await page.locator('#doc-title img').count(), 0);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  assert.deepEqual(page.pageErrors, []);
});

serverTest('a missing document shows a not-found message', {}, async ({ server, onCleanup }) => {
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await page.goto(`${server.baseUrl}/#/d/no-such-document`);
  await page.locator('#error').waitFor({ state: 'visible' });
  assert.match(await text(page, '#error'), /not found/i);
  assert.equal(await page.locator('#editor .ProseMirror').count(), 0);

  // A document owned by someone else is not found for alice either.
  const bobs = await server.createDocument('bob', 'Bob only');
  await page.goto(`${server.baseUrl}/#/d/${bobs.id}`);
  await waitFor(async () => /not found/i.test((await text(page, '#error')) ?? ''), TIMEOUT, 'a not-found error for bob\'s document');
  assert.equal(await page.locator('#editor .ProseMirror').count(), 0);
});

serverTest('two browsers editing one document see each other\'s text', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Shared plan');
  await server.addMember('alice', doc.id, 'bob', 'editor');

  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  const bob = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl });
  for (const page of [alice, bob]) {
    await page.goto(`${server.baseUrl}/#/d/${doc.id}`);
    await page.locator('#editor .ProseMirror').waitFor();
    await waitFor(async () => (await text(page, '#status')) === 'connected', TIMEOUT, '#status to read "connected"');
    assert.equal(await text(page, '#doc-title'), 'Shared plan');
  }
  assert.equal(await text(alice, '#account'), 'alice');
  assert.equal(await text(bob, '#account'), 'bob');

  const aliceEditor = alice.locator('#editor .ProseMirror');
  const bobEditor = bob.locator('#editor .ProseMirror');
  await aliceEditor.click();
  await alice.keyboard.type('Hello from Alice');
  await waitFor(async () => (await bobEditor.innerText()).includes('Hello from Alice'), TIMEOUT, 'bob to see alice\'s text');

  await bobEditor.click();
  await bob.keyboard.press('Control+End');
  await bob.keyboard.press('Enter');
  await bob.keyboard.type('Bob was here');
  await waitFor(async () => (await aliceEditor.innerText()).includes('Bob was here'), TIMEOUT, 'alice to see bob\'s text');

  // Both show the same two paragraphs, and the server's outline agrees.
  // (Remote carets are widgets inside the paragraphs; their labels are not document text.)
  const paragraphs = (page) =>
    page.evaluate(() => {
      const root = document.querySelector('#editor .ProseMirror').cloneNode(true);
      root.querySelectorAll('.collaboration-cursor__caret').forEach((c) => c.remove());
      return [...root.querySelectorAll(':scope > p')].map((p) => p.textContent);
    });
  await waitFor(async () => JSON.stringify(await paragraphs(alice)) === JSON.stringify(await paragraphs(bob)), TIMEOUT, 'the editors to match');
  assert.deepEqual(await paragraphs(alice), ['Hello from Alice', 'Bob was here']);
  await waitFor(
    async () => {
      const o = await server.outline('alice', doc.id);
      return JSON.stringify(o.blocks.map((b) => b.text)) === JSON.stringify(['Hello from Alice', 'Bob was here']);
    },
    TIMEOUT,
    'the outline to hold both paragraphs',
  );

  // Each sees the other's caret, labelled with the account name (awareness).
  await waitFor(async () => (await alice.locator('.collaboration-cursor__label').allTextContents()).includes('bob'), TIMEOUT, 'alice to see bob\'s caret');
  await waitFor(async () => (await bob.locator('.collaboration-cursor__label').allTextContents()).includes('alice'), TIMEOUT, 'bob to see alice\'s caret');

  await mkdir(artifacts, { recursive: true });
  const shots = [await alice.screenshot(), await bob.screenshot()];
  const board = await openPage(onCleanup);
  await board.setViewportSize({ width: 1820, height: 680 });
  await board.setContent(
    `<body style="margin:0;display:flex;gap:20px;background:#888">${shots
      .map((s) => `<img style="width:900px" src="data:image/png;base64,${s.toString('base64')}">`)
      .join('')}</body>`,
  );
  await board.screenshot({ path: path.join(artifacts, 'two-editors.png') });

  assert.deepEqual(alice.pageErrors, []);
  assert.deepEqual(bob.pageErrors, []);
});

serverTest('a viewer sees the shared text but cannot edit it', { accounts: ['alice', 'carol'] }, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Look only');
  await server.addMember('alice', doc.id, 'carol', 'viewer');

  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  const carol = await openPage(onCleanup, { token: server.tokens.carol, baseUrl: server.baseUrl });
  for (const page of [alice, carol]) {
    await page.goto(`${server.baseUrl}/#/d/${doc.id}`);
    await page.locator('#editor .ProseMirror').waitFor();
    await waitFor(async () => (await text(page, '#status')) === 'connected', TIMEOUT, '#status to read "connected"');
  }
  assert.equal(await carol.locator('#editor .ProseMirror').getAttribute('contenteditable'), 'false');
  assert.match(await text(carol, '#doc-role'), /Viewer · read-only/);

  await alice.locator('#editor .ProseMirror').click();
  await alice.keyboard.type('Owner wrote this');
  await waitFor(async () => (await carol.locator('#editor .ProseMirror').innerText()).includes('Owner wrote this'), TIMEOUT, 'the viewer to see the text');

  // Typing into a read-only editor changes nothing anywhere.
  await carol.locator('#editor .ProseMirror').click();
  await carol.keyboard.type('viewer typing');
  await sleep(500);
  assert.equal((await carol.locator('#editor .ProseMirror').innerText()).includes('viewer typing'), false);
  assert.equal((await alice.locator('#editor .ProseMirror').innerText()).includes('viewer typing'), false);
  assert.equal(await text(carol, '#status'), 'connected');
});

serverTest('the editor shows the connection status and resyncs after a server restart', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Restart me');
  await server.addMember('alice', doc.id, 'bob', 'editor');
  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  const bob = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl });
  for (const page of [alice, bob]) {
    await page.goto(`${server.baseUrl}/#/d/${doc.id}`);
    await page.locator('#editor .ProseMirror').waitFor();
    await waitFor(async () => (await text(page, '#status')) === 'connected', TIMEOUT, '#status to read "connected"');
  }
  await alice.locator('#editor .ProseMirror').click();
  await alice.keyboard.type('Before the restart');
  await waitFor(async () => (await bob.locator('#editor .ProseMirror').innerText()).includes('Before the restart'), TIMEOUT, 'bob to see the first text');

  await server.stop();
  await waitFor(async () => (await text(alice, '#status')) !== 'connected', TIMEOUT, 'alice\'s status to leave "connected"');
  assert.match(await text(alice, '#status'), /^(disconnected|connecting)/);
  await server.start();
  for (const page of [alice, bob]) {
    await waitFor(async () => (await text(page, '#status')) === 'connected', 15000, '#status to read "connected" again');
  }

  await alice.keyboard.press('Control+End');
  await alice.keyboard.press('Enter');
  await alice.keyboard.type('After the restart');
  await waitFor(async () => (await bob.locator('#editor .ProseMirror').innerText()).includes('After the restart'), TIMEOUT, 'bob to see text typed after the restart');
  await waitFor(
    async () => {
      const o = await server.outline('alice', doc.id);
      return JSON.stringify(o.blocks.map((b) => b.text)) === JSON.stringify(['Before the restart', 'After the restart']);
    },
    TIMEOUT,
    'the outline to hold both paragraphs',
  );
  assert.deepEqual(alice.pageErrors, []);
});

serverTest('while the server is away a banner says typing is kept, and the Planner status reads unknown rather than unlinked', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Outage');
  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await alice.goto(`${server.baseUrl}/#/d/${doc.id}`);
  await alice.locator('#editor .ProseMirror').waitFor();
  await waitFor(async () => (await text(alice, '#status')) === 'connected', TIMEOUT, 'connected');
  await waitFor(async () => (await text(alice, '#planner-status')) === 'No Planner linked', TIMEOUT, 'the Planner status');
  assert.equal(await alice.locator('#outage').isVisible(), false, 'no banner while connected');

  await server.stop();
  await waitFor(async () => alice.locator('#outage').isVisible(), TIMEOUT, 'the outage banner');
  assert.match(await text(alice, '#outage'), /reconnecting.*what you type is kept.*syncs/i);
  await waitFor(async () => (await text(alice, '#planner-status')) === 'Unknown while disconnected', TIMEOUT, 'the Planner status to be unknown');
  assert.equal(await alice.locator('#planner-stop').isVisible(), false);
  // Typing goes on while away, and reaches the server once it is back.
  await alice.locator('#editor .ProseMirror').click();
  await alice.keyboard.type('Typed while away');

  await server.start();
  await waitFor(async () => !(await alice.locator('#outage').isVisible()), 15000, 'the banner to go once reconnected');
  await waitFor(async () => (await text(alice, '#planner-status')) === 'No Planner linked', TIMEOUT, 'the Planner status again');
  await waitFor(
    async () => (await server.outline('alice', doc.id)).blocks.some((b) => b.text === 'Typed while away'),
    TIMEOUT,
    'what was typed while away to reach the server',
  );
  assert.deepEqual(alice.pageErrors, []);
});

serverTest('an archived document opens read-only for its owner, with Chat closed', { accounts: ['alice'] }, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Old plan');
  const archived = await server.api('POST', `/documents/${doc.id}/archive`, { as: 'alice' });
  assert.equal(archived.status, 200, JSON.stringify(archived.body));
  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await alice.goto(`${server.baseUrl}/#/d/${doc.id}`);
  await alice.locator('#editor .ProseMirror').waitFor();
  assert.equal(await alice.locator('#editor .ProseMirror').getAttribute('contenteditable'), 'false');
  assert.equal(await text(alice, '#doc-role'), 'Owner');
  assert.match(await text(alice, '#doc-banner-text'), /^Archived by its owner: everyone can read it, nobody can change it/);
  assert.equal(await alice.locator('#unarchive-button').isVisible(), true, 'its owner is offered Unarchive');
  assert.equal(await alice.locator('#chat-form').isVisible(), false);
  assert.deepEqual(alice.pageErrors, []);
});
