// SPEC B1a in a real Chromium: each decision card sits beside its
// paragraph and follows it as text is typed above it; the paragraph of the
// card that is hovered or focused is highlighted, and a marker beside each
// paragraph with a decision brings its card; answered cards fold to one
// line with one action, "Change answer".

import assert from 'node:assert/strict';
import { serverTest, waitFor } from '../lib/server.mjs';
import { useBrowser, openPage, TIMEOUT } from '../lib/browser.mjs';
import { card, documentWith, expand, openDecisions, openDocument, paragraph, twoDecisions } from '../lib/doc.mjs';

useBrowser();

const WIDE = { width: 1366, height: 900 };
const FILLER =
  'Background for the team: this paragraph carries the detail people read before they decide, long enough to ' +
  'wrap over a few lines at this width so the questions below stand well apart on the page.';

/**
 * Five questions after an introduction, a paragraph of background apart:
 * close enough that cards taller than they need be would push each other
 * off their paragraphs.
 */
function longPlan() {
  const paragraphs = ['Launch plan for the new product.'];
  const questions = [];
  for (let i = 1; i <= 5; i++) {
    questions.push(paragraphs.length);
    paragraphs.push(`Question ${i}: which option do we take for part ${i}?`);
    paragraphs.push(FILLER);
  }
  return { paragraphs, questions };
}

const KINDS = [
  { response: 'single_choice', choices: ['A', 'B'] },
  { response: 'free_text' },
  { response: 'yes_no' },
  { response: 'multiple_choice', choices: ['X', 'Y', 'Z'] },
  { response: 'free_text' },
];

/** Each card's top minus its paragraph's top, by key. */
async function offsets(page, keys, at) {
  const out = {};
  for (const [i, key] of keys.entries()) {
    const c = await card(page, key).boundingBox();
    const p = await paragraph(page, at[i]).boundingBox();
    out[key] = c && p ? Math.round(c.y - p.y) : null;
  }
  return out;
}

/** Asserts no two cards in the margin overlap. */
async function assertNoOverlap(page) {
  const boxes = await page.locator('#decision-margin .decision-card').evaluateAll((cards) =>
    cards.map((c) => c.getBoundingClientRect()).map((r) => ({ top: r.top, bottom: r.bottom })),
  );
  boxes.sort((a, b) => a.top - b.top);
  for (let i = 1; i < boxes.length; i++) {
    assert.ok(boxes[i].top >= boxes[i - 1].bottom, `cards overlap: ${JSON.stringify(boxes)}`);
  }
}

serverTest('five cards stay within 24 px of their paragraphs on a long document after typing above them', {}, async ({ server, onCleanup }) => {
  const { paragraphs, questions } = longPlan();
  const { doc } = await documentWith(server, 'Long plan', paragraphs, { bob: 'editor' });
  const keys = questions.map((_, i) => `q${i + 1}`);
  await openDecisions(
    server,
    doc.id,
    questions.map((at, i) => ({ key: keys[i], question: `Which option for part ${i + 1}?`, ...KINDS[i], at })),
  );
  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: WIDE });
  const bob = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl, viewport: WIDE });
  for (const page of [alice, bob]) await openDocument(page, server, doc.id);

  const aligned = async (page, at, what) =>
    waitFor(
      async () => {
        const o = await offsets(page, keys, at);
        return Object.values(o).every((d) => d !== null && Math.abs(d) <= 24) ? o : false;
      },
      TIMEOUT,
      what,
    );
  const before = await aligned(alice, questions, 'every card beside its paragraph');

  // Alice types above them: a longer introduction and two new paragraphs.
  await paragraph(alice, 0).click();
  await alice.keyboard.press('End');
  await alice.keyboard.type(' It replaces the old one, and this sentence makes the introduction wrap onto a second line.');
  for (const line of ['A new paragraph typed above the questions.', 'And another one.']) {
    await alice.keyboard.press('Enter');
    await alice.keyboard.type(line);
  }
  const moved = questions.map((i) => i + 2);
  for (const page of [alice, bob]) {
    const after = await aligned(page, moved, 'every card to follow its paragraph down');
    for (const key of keys) assert.ok(Math.abs(after[key]) <= 24, `${key}: ${after[key]} px`);
    await assertNoOverlap(page);
  }
  const firstCard = await card(alice, 'q1').boundingBox();
  assert.ok(firstCard.y > 0, 'the first card is on the page');
  assert.ok(Object.keys(before).length === 5);
  assert.deepEqual(alice.pageErrors, []);
  assert.deepEqual(bob.pageErrors, []);
});

serverTest('the paragraph of a hovered or focused card is highlighted, and its marker brings the card', {}, async ({ server, onCleanup }) => {
  const doc = await twoDecisions(server, 'Marks');
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: WIDE });
  await openDocument(page, server, doc.id);
  await card(page, 'ship').waitFor();
  const active = () =>
    page.locator('#editor .ProseMirror > .decision-active').evaluateAll((ps) => ps.map((p) => p.textContent));

  // Nothing is highlighted until a card is pointed at.
  assert.deepEqual(await active(), []);
  await card(page, 'ship').hover();
  await waitFor(async () => (await active()).join() === 'Ship on Friday?', TIMEOUT, 'the hovered card\'s paragraph highlighted');
  assert.match(await card(page, 'ship').getAttribute('class'), /\bactive\b/);
  await page.mouse.move(5, 5);
  await waitFor(async () => (await active()).length === 0, TIMEOUT, 'the highlight to go with the pointer');

  // A marker beside each paragraph that has a decision, at its first line.
  const markers = page.locator('.decision-marker');
  assert.equal(await markers.count(), 2);
  for (const [i, key] of [[1, 'region'], [3, 'ship']]) {
    const m = await page.locator(`.decision-marker[data-card="${await card(page, key).getAttribute('data-card-id')}"]`).boundingBox();
    const p = await paragraph(page, i).boundingBox();
    assert.ok(Math.abs(m.y - p.y) <= 12, `marker beside paragraph ${i}: ${m.y} vs ${p.y}`);
    assert.ok(m.x >= p.x + p.width, 'in the margin, right of the text');
  }
  assert.match(await markers.first().getAttribute('aria-label'), /Decision “Which region first\?” \(1 open\): show the card/);

  // Clicking a marker focuses its card, which comes to its paragraph's line.
  await markers.first().click();
  await waitFor(
    async () => (await page.evaluate(() => document.activeElement?.dataset?.key)) === 'region',
    TIMEOUT,
    'the card to take focus',
  );
  await waitFor(async () => (await active()).join() === 'Which region first?', TIMEOUT, 'the focused card\'s paragraph highlighted');
  const c = await card(page, 'region').boundingBox();
  const p = await paragraph(page, 1).boundingBox();
  assert.ok(Math.abs(c.y - p.y) <= 4, `the focused card is level with its paragraph: ${c.y} vs ${p.y}`);

  // Keyboard focus inside a card does the same.
  await card(page, 'ship').locator('.answer-yes').focus();
  await waitFor(async () => (await active()).join() === 'Ship on Friday?', TIMEOUT, 'focus inside the card to highlight its paragraph');

  // And so does the caret in the paragraph.
  await paragraph(page, 1).click();
  await waitFor(async () => (await active()).join() === 'Which region first?', TIMEOUT, 'the caret\'s paragraph highlighted');
  assert.deepEqual(page.pageErrors, []);
});

serverTest('an answered card folds to one line with one action, Change answer', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Fold', ['Intro.', 'Which region first?', 'Filler.', 'Filler again.']);
  const ids = await openDecisions(server, doc.id, [
    { key: 'region', question: 'Which region first?', response: 'single_choice', choices: ['EU', 'US'], at: 1 },
  ]);
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: WIDE });
  await openDocument(page, server, doc.id);
  const open = await card(page, 'region').boundingBox();
  await card(page, 'region').locator('label.choice', { hasText: 'US' }).click();
  await card(page, 'region').locator('.answer-submit').click();
  await waitFor(async () => (await card(page, 'region').locator('.card-summary').count()) === 1, TIMEOUT, 'the card to fold');
  const folded = await card(page, 'region').boundingBox();
  assert.ok(folded.height < 40 && folded.height < open.height / 2, `one line: ${folded.height} px (open: ${open.height} px)`);
  assert.equal(await card(page, 'region').locator('.summary-question').textContent(), 'Which region first?');
  assert.equal(await card(page, 'region').locator('.answer-value').textContent(), 'US');
  assert.equal(await card(page, 'region').locator('.card-summary').getAttribute('aria-expanded'), 'false');

  await expand(page, 'region');
  const labels = await card(page, 'region').locator('button').allTextContents();
  assert.deepEqual(labels, ['Hide', 'Change answer'], 'one action on an answered card');
  await card(page, 'region').locator('.answer-change').click();
  assert.equal(await card(page, 'region').locator('label.choice', { hasText: 'US' }).locator('input').isChecked(), true);
  await card(page, 'region').locator('label.choice', { hasText: 'EU' }).click();
  await card(page, 'region').locator('.answer-submit').click();
  await waitFor(async () => (await card(page, 'region').locator('.answer-value').textContent()) === 'EU', TIMEOUT, 'the new answer');
  await waitFor(async () => (await card(page, 'region').locator('.card-summary').count()) === 1, TIMEOUT, 'folded again');
  const stored = await server.api('GET', `/documents/${doc.id}/decisions`, { as: 'alice' });
  assert.deepEqual(stored.body.decisions.find((d) => d.id === ids.region).answer, { choices: ['c1'] });
  assert.deepEqual(page.pageErrors, []);
});

serverTest('eight cards on neighbouring paragraphs: each one clicked into comes level with its paragraph, and only its paragraph is highlighted', {}, async ({ server, onCleanup }) => {
  const questions = Array.from({ length: 8 }, (_, i) => `Question ${i + 1}: which way?`);
  const { doc } = await documentWith(server, 'Dense', ['Launch plan.', ...questions, 'Notes.', 'More notes.']);
  const keys = questions.map((_, i) => `d${i + 1}`);
  await openDecisions(
    server,
    doc.id,
    keys.map((key, i) => ({ key, question: `Which way for question ${i + 1}?`, response: 'free_text', at: i + 1 })),
  );
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: WIDE });
  await openDocument(page, server, doc.id);
  await card(page, 'd8').waitFor();
  const highlighted = () =>
    page.locator('#editor .ProseMirror > .decision-active').evaluateAll((ps) => ps.map((p) => p.textContent));
  const columnTop = async () => (await page.locator('#decision-margin').boundingBox()).y;
  const shown = async () => {
    const cards = await page.locator('#decision-margin .decision-card').evaluateAll((cards) =>
      cards
        .filter((c) => getComputedStyle(c).visibility !== 'hidden')
        .map((c) => c.getBoundingClientRect())
        .map((r) => ({ top: r.top, bottom: r.bottom })),
    );
    return cards.sort((a, b) => a.top - b.top);
  };
  const apart = (cards, top) => cards[0].top >= top - 1 && cards.every((c, j) => j === 0 || c.top >= cards[j - 1].bottom);

  for (const [i, key] of keys.entries()) {
    // Clicked as a person clicks: the pointer stays where the field was,
    // and other cards may slide under it as this one moves.
    await card(page, key).locator('.answer-text').click();
    const level = await waitFor(
      async () => {
        const c = await card(page, key).boundingBox();
        const p = await paragraph(page, i + 1).boundingBox();
        return Math.abs(c.y - p.y) <= 4 && { c, p };
      },
      TIMEOUT,
      `card ${key} level with its paragraph`,
    ).catch(async (e) => {
      const c = await card(page, key).boundingBox();
      const p = await paragraph(page, i + 1).boundingBox();
      throw new Error(`${e.message}: card at ${c.y}, paragraph at ${p.y}`);
    });
    assert.ok(level);
    await waitFor(async () => (await highlighted()).join() === questions[i], TIMEOUT, `the paragraph of ${key}, the card worked in, highlighted`).catch(async (e) => {
      throw new Error(`${e.message}: highlighted ${JSON.stringify(await highlighted())}`);
    });
    assert.equal(await page.evaluate(() => document.activeElement?.closest('.decision-card')?.dataset?.key), key);
    // Every card one can see is below the column's top and overlaps none,
    // once the cards have slid to their places (their top is a 120 ms
    // transition, so a single read can catch two cards mid-slide).
    await waitFor(async () => apart(await shown(), await columnTop()), TIMEOUT, `cards below the column's top and apart`).catch(async (e) => {
      throw new Error(`${e.message}: column top ${await columnTop()}, cards ${JSON.stringify(await shown())}`);
    });
  }
  assert.deepEqual(page.pageErrors, []);
});

serverTest('on a 390 px phone each card sits right under its paragraph, covers no text, and its controls are at least 24 px', {}, async ({ server, onCleanup }) => {
  const paragraphs = Array.from({ length: 10 }, (_, i) =>
    i % 3 === 1 ? `Question ${i}: which region do we launch in first, and why?` : `${FILLER} (${i})`,
  );
  const { doc } = await documentWith(server, 'Phone', paragraphs);
  const at = [1, 4, 7];
  await openDecisions(server, doc.id, [
    { key: 'p1', question: 'Which region first?', response: 'single_choice', choices: ['EU', 'US'], at: at[0] },
    { key: 'p4', question: 'What budget?', response: 'free_text', at: at[1] },
    { key: 'p7', question: 'Ship on Friday?', response: 'yes_no', at: at[2] },
  ]);
  const page = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl, viewport: { width: 390, height: 844 } });
  await openDocument(page, server, doc.id);
  await card(page, 'p7').waitFor();

  const placed = async () => {
    const out = [];
    for (const [i, key] of ['p1', 'p4', 'p7'].entries()) {
      const c = await card(page, key).boundingBox();
      const p = await paragraph(page, at[i]).boundingBox();
      const next = await paragraph(page, at[i] + 1).boundingBox();
      out.push({ key, gap: Math.round(c.y - (p.y + p.height)), over: Math.round(c.y + c.height - next.y) });
    }
    return out;
  };
  // Under its paragraph (within a few lines), and above the next one.
  const spots = await waitFor(
    async () => {
      const now = await placed();
      return now.every(({ gap, over }) => gap >= 0 && gap <= 40 && over <= 0) && now;
    },
    TIMEOUT,
    'every card right under its paragraph',
  ).catch(async (e) => {
    throw new Error(`${e.message}: ${JSON.stringify(await placed())}`);
  });
  assert.equal(spots.length, 3);
  assert.ok((await page.evaluate(() => document.scrollingElement.scrollWidth)) <= 390, 'no sideways scroll');

  // Every control in a card is a target of at least 24 by 24 px (WCAG 2.2).
  const small = await page.locator('#decision-margin .decision-card').evaluateAll((cards) =>
    cards
      .flatMap((c) => [...c.querySelectorAll('button, label.choice, summary, textarea')])
      .filter((e) => e.offsetParent !== null)
      .map((e) => ({ what: e.getAttribute('aria-label') || e.textContent.trim().slice(0, 30), ...e.getBoundingClientRect().toJSON() }))
      .filter((r) => r.width < 24 || r.height < 24)
      .map((r) => `${r.what}: ${Math.round(r.width)}×${Math.round(r.height)}`),
  );
  assert.deepEqual(small, []);
  assert.deepEqual(page.pageErrors, []);
});
