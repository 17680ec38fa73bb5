// The README's walkthrough, done in a real Chromium against
// `margin serve --demo-planner`: sign in, open the sample plan, ask the
// Planner to review it, answer a card, see the paragraph a card is about,
// share the plan, and open it on a phone. Each step's screenshot is written to artifacts/, or
// to $SCREENSHOT_DIR — `npm run screenshots` writes them to docs/screenshots,
// where the README shows them.

import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { serverTest, waitFor } from '../lib/server.mjs';
import { useBrowser, openPage, text, TIMEOUT } from '../lib/browser.mjs';
import { card } from '../lib/doc.mjs';

useBrowser();

const here = path.dirname(fileURLToPath(import.meta.url));
const shots = process.env.SCREENSHOT_DIR ? path.resolve(process.env.SCREENSHOT_DIR) : path.join(here, '..', 'artifacts');
const WIDE = { width: 1366, height: 900 };

async function shot(page, name) {
  await mkdir(shots, { recursive: true });
  // Let transitions (cards moving, the highlight) settle.
  await page.waitForTimeout(250);
  await page.screenshot({ path: path.join(shots, `${name}.png`) });
}

serverTest('the README walkthrough with the demo Planner', { accounts: ['alice', 'bo'], serveArgs: ['--demo-planner', 'alice'] }, async ({ server, onCleanup }) => {
  // 1. Sign in with the printed token.
  const page = await openPage(onCleanup, { viewport: WIDE });
  await page.goto(`${server.baseUrl}/`);
  await page.locator('#token-input').fill(server.tokens.alice);
  await shot(page, '1-sign-in');
  await page.locator('#token-form button[type=submit]').click();

  // 2. The document list holds the sample plan.
  const sample = page.locator('#doc-list li a', { hasText: 'Beta launch (demo)' });
  await sample.waitFor();
  assert.match(await sample.locator('.edited').textContent(), /^Edited (just now|\d+ min ago) by alice$/);
  await shot(page, '2-documents');

  // 3. Open it: the demo Planner is linked and available.
  await sample.click();
  await page.locator('#editor .ProseMirror').waitFor();
  await waitFor(async () => (await page.locator('#planner-status').getAttribute('data-state')) === 'available', TIMEOUT, 'the demo Planner available');
  assert.match(await text(page, '#planner-detail'), /“demo-planner” is linked/);

  // 4. Ask it to review: a card beside each open question, a reply in Chat, its plan.
  await page.locator('#chat-input').fill('@planner please review');
  await page.locator('#chat-send').click();
  await waitFor(async () => (await page.locator('#decision-margin .decision-card').count()) === 3, TIMEOUT, 'three cards');
  await page.locator('.chat-line[data-kind="planner"]').waitFor();
  assert.match(await page.locator('.chat-line[data-kind="planner"] .chat-text').textContent(), /^I read the plan and found 3 open questions: added 3 decisions\.$/);
  await page.locator('#plan .plan-step').first().waitFor();
  await waitFor(async () => (await page.locator('#planner-status').getAttribute('data-state')) === 'available', TIMEOUT, 'the turn over');
  assert.equal(await text(page, '#decision-summary'), '3 decisions: 3 open');
  await shot(page, '3-review');

  // 5. Answer one; it folds to a line, and the count follows.
  const yesNo = page.locator('.decision-card[data-response="yes_no"]');
  await yesNo.locator('.answer-yes').click();
  await waitFor(async () => (await yesNo.locator('.card-summary').count()) === 1, TIMEOUT, 'the answered card folded');
  await waitFor(async () => (await text(page, '#decision-summary')) === '3 decisions: 1 answered · 2 open', TIMEOUT, 'the count to follow');

  // 6. Work on another: it comes level with its paragraph, which lights up.
  const tbd = page.locator('.decision-card', { hasText: 'TBD' });
  await tbd.locator('textarea').focus();
  await page.keyboard.type('Per seat, with a team discount');
  await waitFor(async () => (await page.locator('#editor .decision-active').count()) === 1, TIMEOUT, 'the paragraph highlighted');
  // The stack settles after the answered card above folded: wait for the
  // card to come level, rather than measure it mid-move (seen under load).
  let gap;
  const level = async () => {
    const c = await tbd.boundingBox();
    const p = await page.locator('#editor .decision-active').boundingBox();
    gap = `${c.y} vs ${p.y}`;
    return Math.abs(c.y - p.y) <= 4;
  };
  await waitFor(level, TIMEOUT, 'the card level with its paragraph').catch((e) => {
    throw new Error(`the card is not level with its paragraph (${gap}): ${e.message}`);
  });
  await shot(page, '4-answering');
  await tbd.locator('.answer-submit').click();
  await waitFor(async () => (await tbd.getAttribute('data-state')) === 'answered', TIMEOUT, 'answered');

  // 7. Share it with bo as an editor.
  await page.locator('#share-button').click();
  await page.locator('#share-account').fill('bo');
  await page.locator('#share-submit').click();
  await page.locator('#member-list .member[data-account="bo"]').waitFor();
  await shot(page, '5-share');
  await page.keyboard.press('Escape');
  assert.equal(await card(page, 'x').count(), 0);
  assert.deepEqual(page.pageErrors, []);

  // 8. The same plan on a phone: each card under its own paragraph.
  const phone = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: { width: 390, height: 844 } });
  await phone.goto(page.url());
  const open = phone.locator('.decision-card[data-state="open"]').first();
  await open.waitFor();
  await open.scrollIntoViewIfNeeded();
  await phone.evaluate(() => window.scrollBy(0, -160));
  await shot(phone, '6-phone');
  assert.deepEqual(phone.pageErrors, []);
});
