// Shared steps of the browser tests that work on a document: writing its
// paragraphs and opening decisions through the Planner tools endpoint,
// opening it in a page, and finding its paragraphs and cards there.

import assert from 'node:assert/strict';
import { waitFor } from './server.mjs';
import { text, TIMEOUT } from './browser.mjs';

/** Calls a Planner tool over HTTP as `as`; asserts 200 and returns the body. */
export async function tool(server, as, docId, name, body) {
  const res = await server.api('POST', `/documents/${docId}/tools/${name}`, { as, body });
  assert.equal(res.status, 200, `${name}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/**
 * A document owned by alice holding `paragraphs`, written through edit_plan.
 * Members are added first, while the document is not loaded.
 */
export async function documentWith(server, title, paragraphs, members = {}) {
  const doc = await server.createDocument('alice', title);
  for (const [account, role] of Object.entries(members)) await server.addMember('alice', doc.id, account, role);
  const read = await tool(server, 'alice', doc.id, 'read_document');
  await tool(server, 'alice', doc.id, 'edit_plan', {
    revision: read.revision,
    edits: paragraphs.map((text) => ({ op: 'insert', kind: 'paragraph', text })),
  });
  const again = await tool(server, 'alice', doc.id, 'read_document');
  assert.deepEqual(
    again.outline.map((b) => b.text),
    paragraphs,
    'edit_plan wrote the paragraphs in order',
  );
  return { doc, read: again };
}

/** Opens decisions through the tools endpoint; `at` is an outline index. Returns the card ids by key. */
export async function openDecisions(server, docId, cards) {
  const read = await tool(server, 'alice', docId, 'read_document');
  const out = await tool(server, 'alice', docId, 'open_decisions', {
    revision: read.revision,
    cards: cards.map(({ at, ...card }) => ({
      ...card,
      passages: [{ index: at, digest: read.outline[at].digest }],
    })),
  });
  assert.equal(out.captured, cards.length, JSON.stringify(out));
  return Object.fromEntries(out.captures.map((c) => [c.key, c.card_id]));
}

/** GET /documents/{id}/decisions as `as`. */
export async function decisions(server, as, docId) {
  const res = await server.api('GET', `/documents/${docId}/decisions`, { as });
  assert.equal(res.status, 200);
  return res.body.decisions;
}

/** Opens the document in `page` and waits for its sync socket. */
export async function openDocument(page, server, docId) {
  await page.goto(`${server.baseUrl}/#/d/${docId}`);
  await page.locator('#editor .ProseMirror').waitFor();
  await waitFor(async () => (await text(page, '#status')) === 'connected', TIMEOUT, '#status to read "connected"');
}

export const card = (page, key) => page.locator(`.decision-card[data-key="${key}"]`);
export const paragraph = (page, i) => page.locator('#editor .ProseMirror > p').nth(i);

/** Opens a card that shows as one line (answered, discarded, withdrawn). */
export async function expand(page, key) {
  const summary = card(page, key).locator('.card-summary');
  if (await summary.count()) await summary.click();
  await card(page, key).locator('.card-question').waitFor();
}

/**
 * Opens a card's "Add an option or criterion" section as a person does:
 * point at the card, click the toggle. The toggle shows only while the card
 * is pointed at or focused, and a card can move under the pointer while the
 * stack settles (a busy machine), so both are tried again until it is open.
 */
export async function openMore(cardLocator) {
  const more = cardLocator.locator('.card-more');
  await waitFor(
    async () => {
      if (await more.evaluate((d) => d.open)) return true;
      await cardLocator.hover();
      await more.locator('summary').click({ timeout: 1000 }).catch(() => {});
      return more.evaluate((d) => d.open);
    },
    TIMEOUT,
    "a card's add-option section to open",
    100,
  );
}

/**
 * Fills a card's text field and waits until it holds the value (a live
 * re-render of the card in between could otherwise drop what was typed).
 */
export async function fillField(locator, value) {
  await waitFor(
    async () => {
      if ((await locator.inputValue()) !== value) await locator.fill(value);
      return (await locator.inputValue()) === value;
    },
    TIMEOUT,
    `a card field to hold ${JSON.stringify(value)}`,
    100,
  );
}

/** The editor's paragraph texts, without remote carets' name labels. */
export function paragraphTexts(page) {
  return page.evaluate(() => {
    const root = document.querySelector('#editor .ProseMirror').cloneNode(true);
    root.querySelectorAll('.collaboration-cursor__caret').forEach((c) => c.remove());
    return [...root.querySelectorAll(':scope > p')].map((p) => p.textContent);
  });
}

/** Waits until the card for `key` stands beside paragraph `i`: same top (±4 px), to its right. */
export async function waitBeside(page, key, i, what) {
  return waitFor(
    async () => {
      const c = await card(page, key).boundingBox();
      const p = await paragraph(page, i).boundingBox();
      if (!c || !p) return false;
      return Math.abs(c.y - p.y) <= 4 && c.x >= p.x + p.width ? { card: c, paragraph: p } : false;
    },
    TIMEOUT,
    what ?? `card "${key}" beside paragraph ${i}`,
  );
}

/**
 * A document of alice's with two decisions: `region` (pick one of EU, US)
 * beside "Which region first?" (paragraph 1) and `ship` (yes or no) beside
 * "Ship on Friday?" (paragraph 3).
 */
export async function twoDecisions(server, title) {
  const { doc } = await documentWith(server, title, [
    'Intro paragraph.',
    'Which region first?',
    'Filler text between the two questions.',
    'Ship on Friday?',
  ]);
  await openDecisions(server, doc.id, [
    { key: 'region', question: 'Which region first?', response: 'single_choice', choices: ['EU', 'US'], at: 1 },
    { key: 'ship', question: 'Ship on Friday?', response: 'yes_no', at: 3 },
  ]);
  return doc;
}
