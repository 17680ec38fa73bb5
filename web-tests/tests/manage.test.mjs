// SPEC B1a, A1 in a real Chromium: a document is shared, renamed, archived
// and deleted from its page. The share dialog adds a person by account name
// with a role, changes a role and removes a person, and what it does reaches
// the other person's browser: the document appears in their list, their page
// turns read-only when they become a viewer, and tells them when they lose
// access. The list says when each document was last edited and by whom.

import assert from 'node:assert/strict';
import { serverTest, waitFor } from '../lib/server.mjs';
import { useBrowser, openPage, text, TIMEOUT } from '../lib/browser.mjs';
import { openDocument, paragraph } from '../lib/doc.mjs';

useBrowser();

const WIDE = { width: 1366, height: 900 };

/** The rows of the member list in the share dialog: [account, role]. */
function members(page) {
  return page.locator('#member-list .member').evaluateAll((rows) =>
    rows.map((r) => [r.dataset.account, r.querySelector('select')?.value ?? r.querySelector('.member-role')?.textContent]),
  );
}

async function listTitles(page) {
  return page.locator('#doc-list li .title').allTextContents();
}

serverTest('the share dialog adds, changes and removes a person, and their browser follows', { accounts: ['alice', 'bob', 'carol'] }, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Shared plan');
  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: WIDE });
  const bob = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl, viewport: WIDE });
  await bob.goto(`${server.baseUrl}/`);
  await bob.locator('#home').waitFor();
  assert.deepEqual(await listTitles(bob), [], 'bob has nothing yet');

  await openDocument(alice, server, doc.id);
  await alice.locator('#share-button').click();
  await alice.locator('#share-dialog').waitFor({ state: 'visible' });
  await waitFor(async () => (await members(alice)).length === 1, TIMEOUT, 'the owner listed');
  assert.deepEqual(await members(alice), [['alice', 'Owner']]);

  // An unknown account is refused with a clear message, and nothing changes.
  await alice.locator('#share-account').fill('nobody');
  await alice.locator('#share-submit').click();
  await alice.locator('#share-error').waitFor({ state: 'visible' });
  assert.match(await text(alice, '#share-error'), /There is no account named “nobody”/);
  assert.deepEqual(await members(alice), [['alice', 'Owner']]);

  await alice.locator('#share-account').fill('bob');
  await alice.locator('#share-role').selectOption('editor');
  await alice.locator('#share-submit').click();
  await waitFor(async () => (await members(alice)).length === 2, TIMEOUT, 'bob listed');
  assert.deepEqual(await members(alice), [['alice', 'Owner'], ['bob', 'editor']]);
  assert.equal(await alice.locator('#share-account').inputValue(), '', 'the field is cleared');

  // Bob's list shows the document the next time it is shown.
  await bob.reload();
  await waitFor(async () => (await listTitles(bob)).includes('Shared plan'), TIMEOUT, 'the document in bob\'s list');
  assert.match(await bob.locator('#doc-list li .tags').first().textContent(), /Editor/);
  await bob.locator('#doc-list li a', { hasText: 'Shared plan' }).click();
  await bob.locator('#editor .ProseMirror').waitFor();
  await waitFor(async () => (await text(bob, '#status')) === 'connected', TIMEOUT, 'bob connected');
  assert.equal(await bob.locator('#editor .ProseMirror').getAttribute('contenteditable'), 'true');

  // Made a viewer: bob's page turns read-only without a reload.
  await alice.locator('#member-list .member[data-account="bob"] select').selectOption('viewer');
  await waitFor(async () => (await members(alice)).find(([a]) => a === 'bob')?.[1] === 'viewer', TIMEOUT, 'the new role listed');
  await waitFor(async () => (await text(bob, '#doc-role')) === 'Viewer · read-only', TIMEOUT, 'bob to see his new role');
  await waitFor(async () => (await bob.locator('#editor .ProseMirror').getAttribute('contenteditable')) === 'false', TIMEOUT, 'bob\'s editor read-only');
  assert.equal(await bob.locator('#chat-form').isVisible(), false, 'a viewer reads Chat without posting');
  await waitFor(async () => (await text(bob, '#status')) === 'connected', TIMEOUT, 'bob reconnected as a viewer');

  // Removed: bob's page says so and shows the document no more.
  await alice.locator('#member-list .member[data-account="bob"] .member-remove').click();
  await waitFor(async () => (await members(alice)).length === 1, TIMEOUT, 'bob gone from the list');
  await bob.locator('#error').waitFor({ state: 'visible' });
  assert.match(await text(bob, '#error'), /no longer a member|no longer have access/);
  assert.equal(await bob.locator('#document').isVisible(), false);
  await bob.goto(`${server.baseUrl}/`);
  await bob.locator('#home').waitFor();
  assert.deepEqual(await listTitles(bob), []);

  // A non-owner sees who has access, without the controls.
  await server.addMember('alice', doc.id, 'carol', 'editor');
  const carol = await openPage(onCleanup, { token: server.tokens.carol, baseUrl: server.baseUrl, viewport: WIDE });
  await openDocument(carol, server, doc.id);
  assert.equal(await text(carol, '#share-button'), 'People');
  await carol.locator('#share-button').click();
  await waitFor(async () => (await members(carol)).length === 2, TIMEOUT, 'carol sees the members');
  assert.deepEqual(await members(carol), [['alice', 'Owner'], ['carol', 'Editor']]);
  assert.equal(await carol.locator('#share-form').isVisible(), false);
  assert.equal(await carol.locator('#member-list select, #member-list button').count(), 0);
  for (const page of [alice, bob, carol]) assert.deepEqual(page.pageErrors, []);
});

serverTest('rename, archive and unarchive from the page reach the other browser; delete asks first', {}, async ({ server, onCleanup }) => {
  const doc = await server.createDocument('alice', 'Old name');
  await server.addMember('alice', doc.id, 'bob', 'editor');
  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: WIDE });
  const bob = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl, viewport: WIDE });
  for (const page of [alice, bob]) await openDocument(page, server, doc.id);

  // Rename: a blank title is refused on the page; a good one reaches bob live.
  await alice.locator('#doc-menu-button').click();
  await alice.locator('#rename-button').click();
  await alice.locator('#rename-input').fill('   ');
  await alice.locator('#rename-form button[type=submit]').click();
  assert.match(await text(alice, '#rename-error'), /cannot be blank/);
  await alice.locator('#rename-input').fill('Launch plan, final');
  await alice.locator('#rename-input').press('Enter');
  for (const page of [alice, bob]) {
    await waitFor(async () => (await text(page, '#doc-title')) === 'Launch plan, final', TIMEOUT, 'the new title');
  }
  assert.equal(await bob.title(), 'Launch plan, final · Margin');

  // Archive: both pages turn read-only with a banner; unarchive undoes it.
  await alice.locator('#doc-menu-button').click();
  await alice.locator('#archive-button').click();
  for (const page of [alice, bob]) {
    await page.locator('#doc-banner').waitFor({ state: 'visible' });
    await waitFor(async () => (await page.locator('#editor .ProseMirror').getAttribute('contenteditable')) === 'false', TIMEOUT, 'read-only');
    assert.equal(await page.locator('#chat-form').isVisible(), false);
  }
  assert.equal(await bob.locator('#unarchive-button').isVisible(), false, 'only the owner unarchives');
  await alice.locator('#unarchive-button').click();
  for (const page of [alice, bob]) {
    await page.locator('#doc-banner').waitFor({ state: 'hidden' });
    await waitFor(async () => (await page.locator('#editor .ProseMirror').getAttribute('contenteditable')) === 'true', TIMEOUT, 'editable again');
  }
  assert.equal(await bob.locator('#doc-menu-button').isVisible(), true, 'an editor may rename');
  await bob.locator('#doc-menu-button').click();
  assert.equal(await bob.locator('#archive-button').isVisible(), false, 'but not archive');
  assert.equal(await bob.locator('#delete-button').isVisible(), false, 'nor delete');
  await bob.keyboard.press('Escape');

  // Delete asks first; keeping it changes nothing.
  await alice.locator('#doc-menu-button').click();
  await alice.locator('#delete-button').click();
  await alice.locator('#delete-dialog').waitFor({ state: 'visible' });
  assert.match(await text(alice, '#delete-text'), /“Launch plan, final” will be deleted for everyone/);
  await alice.locator('#delete-cancel').click();
  await alice.locator('#delete-dialog').waitFor({ state: 'hidden' });
  assert.equal((await server.api('GET', `/documents/${doc.id}`, { as: 'alice' })).status, 200);
  await alice.locator('#doc-menu-button').click();
  await alice.locator('#delete-button').click();
  await alice.locator('#delete-confirm').click();
  await alice.locator('#home').waitFor();
  assert.equal(await text(alice, '#notice'), 'Deleted “Launch plan, final”.');
  assert.deepEqual(await listTitles(alice), []);
  assert.equal((await server.api('GET', `/documents/${doc.id}`, { as: 'alice' })).status, 404);
  await bob.locator('#error').waitFor({ state: 'visible' });
  assert.match(await text(bob, '#error'), /gone/);
  assert.deepEqual(alice.pageErrors, []);
  assert.deepEqual(bob.pageErrors, []);
});

serverTest('the list says when each document was last edited and by whom, newest first', {}, async ({ server, onCleanup }) => {
  const quiet = await server.createDocument('alice', 'Not touched');
  const edited = await server.createDocument('alice', 'Edited by bob');
  await server.addMember('alice', edited.id, 'bob', 'editor');
  const bob = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl, viewport: WIDE });
  await openDocument(bob, server, edited.id);
  await paragraph(bob, 0).click();
  await bob.keyboard.type('Bob wrote this.');
  await waitFor(
    async () => (await server.api('GET', `/documents/${edited.id}`, { as: 'alice' })).body.edited_by === 'bob',
    TIMEOUT,
    'the edit to be committed',
  );

  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: WIDE });
  await alice.goto(`${server.baseUrl}/`);
  await alice.locator('#doc-list li').nth(1).waitFor();
  const rows = await alice.locator('#doc-list li').evaluateAll((lis) =>
    lis.map((li) => [li.querySelector('.title').textContent, li.querySelector('.edited').textContent]),
  );
  assert.deepEqual(rows, [
    ['Edited by bob', 'Edited just now by bob'],
    ['Not touched', 'Created just now, not edited yet'],
  ]);
  assert.ok(quiet.id);
  // Internal terms stay out of the list.
  assert.doesNotMatch(await alice.locator('#doc-list').textContent(), /revision|blocks/);
  assert.deepEqual(alice.pageErrors, []);
});
