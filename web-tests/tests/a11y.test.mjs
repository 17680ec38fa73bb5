// SPEC B1a, B2 in a real Chromium: the editor's pages pass axe-core with no
// serious or critical violation — sign-in, the document list, a document
// with decisions, Chat and the Planner's status, the share and delete
// dialogs — and every card action is reachable and usable from the
// keyboard alone. Also what a page load costs: the favicon is an icon (no
// console error), the script and stylesheet come precompressed under
// content-hashed names, and a new document shows a placeholder.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { serverTest, waitFor } from '../lib/server.mjs';
import { useBrowser, openPage, text, TIMEOUT } from '../lib/browser.mjs';
import { Machine } from '../lib/machine.mjs';
import { card, documentWith, openDecisions, openDocument, twoDecisions } from '../lib/doc.mjs';

useBrowser();

const require = createRequire(import.meta.url);
const AXE = require.resolve('axe-core/axe.min.js');
const WIDE = { width: 1366, height: 900 };

/** axe-core's serious and critical violations on the page as it is now. */
async function violations(page) {
  await page.addScriptTag({ path: AXE });
  const result = await page.evaluate(() =>
    window.axe.run(document, { resultTypes: ['violations'], runOnly: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] }),
  );
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}

serverTest('every view passes axe-core with no serious or critical violation', {}, async ({ server, onCleanup }) => {
  const signin = await openPage(onCleanup, { viewport: WIDE });
  await signin.goto(`${server.baseUrl}/`);
  await signin.locator('#token-form').waitFor();
  assert.deepEqual(await violations(signin), [], 'sign-in');

  const { doc } = await documentWith(server, 'Accessible plan', ['Intro.', 'Which region first?', 'Filler.', 'Ship on Friday?', 'More words.'], { bob: 'viewer' });
  await openDecisions(server, doc.id, [
    { key: 'region', question: 'Which region first?', response: 'single_choice', choices: ['EU', 'US'], at: 1 },
    { key: 'ship', question: 'Ship on Friday?', response: 'yes_no', at: 3 },
    { key: 'note', question: 'Anything to add?', response: 'free_text', at: 4 },
  ]);
  await server.api('POST', `/documents/${doc.id}/decisions/${(await openDecisions(server, doc.id, [{ key: 'done', question: 'Done already?', response: 'yes_no', at: 0 }])).done}/answer`, { as: 'alice', body: { yes: true } });
  const paired = await server.api('POST', '/machines', { as: 'alice', body: { name: 'laptop' } });
  const machine = await Machine.link(server, paired.body.credential);
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: WIDE });
  await page.goto(`${server.baseUrl}/`);
  await page.locator('#doc-list li').first().waitFor();
  assert.deepEqual(await violations(page), [], 'document list');

  await openDocument(page, server, doc.id);
  await page.locator('#chat-input').fill('@planner hello');
  await page.locator('#chat-send').click();
  const invoke = await machine.expect('invoke');
  machine.send({ type: 'run', session: invoke.session, run: 'r1', name: 'Review', status: 'running' });
  machine.send({ type: 'reply', session: invoke.session, turn: invoke.turn, text: 'On it.' });
  await page.locator('.chat-line[data-kind="planner"]').waitFor();
  await card(page, 'note').waitFor();
  await card(page, 'done').locator('.card-summary').waitFor();
  assert.deepEqual(await violations(page), [], 'a document with decisions, a run and Chat');

  await page.locator('#share-button').click();
  await page.locator('#member-list .member').nth(1).waitFor();
  assert.deepEqual(await violations(page), [], 'the share dialog');
  await page.keyboard.press('Escape');
  await page.locator('#doc-menu-button').click();
  assert.deepEqual(await violations(page), [], 'the document menu');
  await page.locator('#delete-button').click();
  await page.locator('#delete-dialog').waitFor({ state: 'visible' });
  assert.deepEqual(await violations(page), [], 'the delete dialog');
  await page.locator('#delete-cancel').click();

  const viewer = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl, viewport: WIDE });
  await openDocument(viewer, server, doc.id);
  await card(viewer, 'region').waitFor();
  assert.deepEqual(await violations(viewer), [], 'a viewer\'s page');
  assert.deepEqual(page.pageErrors, []);
});

serverTest('every card action is reachable and usable from the keyboard alone', {}, async ({ server, onCleanup }) => {
  const doc = await twoDecisions(server, 'Keys');
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: WIDE });
  await openDocument(page, server, doc.id);
  await card(page, 'ship').waitFor();
  const focused = () =>
    page.evaluate(() => {
      const e = document.activeElement;
      return { key: e?.closest('.decision-card')?.dataset.key ?? null, label: e?.getAttribute('aria-label') ?? e?.textContent?.trim() ?? '', tag: e?.tagName };
    });
  /** Presses Tab until the focused element matches, at most `limit` times. */
  const tabTo = async (match, limit = 40) => {
    for (let i = 0; i < limit; i++) {
      await page.keyboard.press('Tab');
      const f = await focused();
      if (match(f)) return f;
    }
    throw new Error(`Tab never reached the control (last: ${JSON.stringify(await focused())})`);
  };

  // From the top of the page: the first marker, then into its card.
  await page.locator('.back').focus();
  const marker = await tabTo((f) => /Decision “Which region first\?”/.test(f.label));
  assert.match(marker.label, /show the card$/);
  await page.keyboard.press('Enter');
  await waitFor(async () => (await focused()).key === 'region', TIMEOUT, 'the marker to focus its card');
  // Every control of an open card has a name.
  const unnamed = await card(page, 'region').locator('button, input, textarea').evaluateAll((els) =>
    els.filter((e) => !(e.getAttribute('aria-label') || e.textContent.trim() || e.closest('label')?.textContent.trim())).length,
  );
  assert.equal(unnamed, 0, 'every control is labelled');
  await tabTo((f) => f.key === 'region' && f.tag === 'INPUT');
  await page.keyboard.press('Space');
  await tabTo((f) => f.key === 'region' && f.label === 'Answer');
  await page.keyboard.press('Enter');
  await waitFor(async () => (await card(page, 'region').getAttribute('data-state')) === 'answered', TIMEOUT, 'answered by keyboard');

  // The folded card opens, and Change answer works, from the keyboard.
  await card(page, 'region').locator('.card-summary').focus();
  await page.keyboard.press('Enter');
  await waitFor(async () => (await focused()).label === 'Hide the decision again', TIMEOUT, 'focus to the opened card');
  await tabTo((f) => f.label === 'Change answer');
  await page.keyboard.press('Enter');
  await waitFor(async () => (await focused()).tag === 'INPUT', TIMEOUT, 'focus to the answer form');
  await page.keyboard.press('ArrowDown');
  await tabTo((f) => f.label === 'Save answer');
  await page.keyboard.press('Enter');
  await waitFor(async () => (await card(page, 'region').locator('.answer-value').textContent()) === 'US', TIMEOUT, 'the changed answer');

  // Discard (in the card's head) and the Yes and No buttons, by keyboard.
  await tabTo((f) => f.key === 'ship' && /^Discard/.test(f.label));
  const yes = await tabTo((f) => f.key === 'ship' && /^Answer yes/.test(f.label));
  assert.equal(yes.label, 'Answer yes: Ship on Friday?');
  await page.keyboard.press('Shift+Tab');
  assert.match((await focused()).label, /^Discard the decision “Ship on Friday\?”/);
  await page.keyboard.press('Enter');
  await waitFor(async () => (await card(page, 'ship').getAttribute('data-state')) === 'discarded', TIMEOUT, 'discarded by keyboard');
  assert.deepEqual(page.pageErrors, []);
});

serverTest('from the keyboard: Enter answers a one-line answer, focus stays on the folded card, and the text shows its focus at 3:1', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Keys', ['Intro.', 'What budget?', 'Which region first?', 'Notes.']);
  await openDecisions(server, doc.id, [
    { key: 'budget', question: 'What budget?', response: 'free_text', at: 1 },
    { key: 'region', question: 'Which region first?', response: 'single_choice', choices: ['EU', 'US'], at: 2 },
  ]);
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: WIDE });
  await openDocument(page, server, doc.id);
  await card(page, 'region').waitFor();
  const focused = () =>
    page.evaluate(() => {
      const e = document.activeElement;
      return { key: e?.closest('.decision-card')?.dataset.key ?? null, field: e?.dataset?.field ?? null, tag: e?.tagName };
    });

  // Enter answers; Shift+Enter is a new line within the answer.
  await card(page, 'budget').locator('.answer-text').focus();
  await page.keyboard.type('Forty');
  await page.keyboard.press('Shift+Enter');
  await page.keyboard.type('thousand');
  await page.keyboard.press('Enter');
  await waitFor(async () => (await card(page, 'budget').getAttribute('data-state')) === 'answered', TIMEOUT, 'answered by Enter');
  const stored = (await server.api('GET', `/documents/${doc.id}/decisions`, { as: 'alice' })).body.decisions.find((c) => c.key === 'budget');
  assert.deepEqual(stored.answer, { text: 'Forty\nthousand' });
  // The card folded, and focus stayed on it rather than dropping to the page.
  await waitFor(async () => {
    const f = await focused();
    return f.key === 'budget' && f.field === 'summary';
  }, TIMEOUT, 'focus on the folded card').catch(async (e) => {
    throw new Error(`${e.message}: focus is on ${JSON.stringify(await focused())}`);
  });

  // The same after a choice answered from the keyboard.
  await card(page, 'region').locator('input[type=radio]').first().focus();
  await page.keyboard.press('Space');
  await card(page, 'region').locator('.answer-submit').focus();
  await page.keyboard.press('Enter');
  await waitFor(async () => {
    const f = await focused();
    return f.key === 'region' && f.field === 'summary';
  }, TIMEOUT, 'focus on the folded choice card').catch(async (e) => {
    throw new Error(`${e.message}: focus is on ${JSON.stringify(await focused())}`);
  });

  // The document text's focus indicator, reached by keyboard, against the page.
  await page.locator('#editor .ProseMirror').focus();
  await page.keyboard.press('ArrowDown');
  const ratio = await page.evaluate(() => {
    const editor = document.querySelector('#editor .ProseMirror');
    const style = getComputedStyle(editor);
    const colour = (style.boxShadow.match(/rgba?\([^)]*\)/) ?? [style.outlineColor])[0];
    const [r, g, b] = colour.match(/[\d.]+/g).map(Number);
    const lin = (c) => ((c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
    const L = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
    return (1 + 0.05) / (L + 0.05);
  });
  assert.ok(ratio >= 3, `the text's focus ring has ${ratio.toFixed(2)}:1 against white; WCAG asks 3:1`);
  assert.deepEqual(page.pageErrors, []);
});

serverTest('a page load finds its icon and precompressed, content-hashed assets; a new document shows a placeholder', {}, async ({ server, onCleanup }) => {
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: WIDE });
  const problems = [];
  page.on('console', (m) => m.type() === 'error' && problems.push(m.text()));
  page.on('requestfailed', (r) => problems.push(`failed: ${r.url()}`));
  const assets = [];
  page.on('response', async (r) => {
    const url = new URL(r.url());
    if (url.pathname.startsWith('/assets/') || url.pathname === '/favicon.ico') {
      assets.push({ path: url.pathname, status: r.status(), headers: await r.allHeaders() });
    }
    if (r.status() >= 400) problems.push(`${r.status()} ${url.pathname}`);
  });
  await page.goto(`${server.baseUrl}/`);
  await page.locator('#home').waitFor();
  await page.locator('#new-doc-title').fill('Blank');
  await page.locator('#new-doc').click();
  await page.locator('#editor .ProseMirror').waitFor();
  const placeholder = await page
    .locator('#editor .ProseMirror p.is-editor-empty')
    .evaluate((p) => getComputedStyle(p, '::before').content);
  assert.match(placeholder, /Write the plan here/);
  await page.waitForTimeout(300);
  assert.deepEqual(problems, [], 'no console error, failed request or error status');

  const script = assets.find((a) => /^\/assets\/app\.[0-9a-f]{10}\.js$/.test(a.path));
  const style = assets.find((a) => /^\/assets\/app\.[0-9a-f]{10}\.css$/.test(a.path));
  const icon = assets.find((a) => /^\/assets\/favicon\.[0-9a-f]{10}\.svg$/.test(a.path));
  for (const [what, a] of [['script', script], ['stylesheet', style], ['icon', icon]]) {
    assert.ok(a, `the ${what} is loaded under a content-hashed name: ${JSON.stringify(assets.map((x) => x.path))}`);
    assert.equal(a.status, 200);
    assert.equal(a.headers['cache-control'], 'public, max-age=31536000, immutable');
  }
  assert.equal(script.headers['content-encoding'], 'br', 'Chromium asks for br and gets it');
  const index = await fetch(`${server.baseUrl}/`);
  assert.equal(index.headers.get('cache-control'), 'no-store', 'the index is never cached');
  const ico = await fetch(`${server.baseUrl}/favicon.ico`);
  assert.equal(ico.headers.get('content-type'), 'image/x-icon');
  assert.deepEqual([...new Uint8Array(await ico.arrayBuffer()).slice(0, 4)], [0, 0, 1, 0]);
  assert.equal(await text(page, '#doc-title'), 'Blank');
  assert.deepEqual(page.pageErrors, []);
});
