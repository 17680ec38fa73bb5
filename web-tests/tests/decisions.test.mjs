// SPEC B1, D, E3: decision cards rendered beside their paragraph in the browser
// editor, opened through the Planner tools endpoint and acted on by people.

import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { serverTest, waitFor } from '../lib/server.mjs';
import { useBrowser, openPage, text, TIMEOUT } from '../lib/browser.mjs';
import {
  card,
  decisions,
  documentWith,
  expand,
  fillField,
  openMore,
  openDecisions,
  openDocument,
  paragraph,
  paragraphTexts,
  tool,
  waitBeside,
} from '../lib/doc.mjs';

const artifacts = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'artifacts');
const HOSTILE = '<img src=x onerror="window.__pwned=1">';

useBrowser();

const LONG_INTRO =
  'This plan covers the launch of the new product. It is long enough to wrap over several lines in the ' +
  'editor, so that the paragraphs below it sit well down the page and a card placed next to the wrong ' +
  'block would be visibly out of line with the paragraph it belongs to.';

/**
 * Waits until the card for `key` stands in the margin next to paragraph `i`:
 * level with it, or — when the card `above` leaves no room — pushed down
 * just below that card (cards never overlap).
 */
async function waitStacked(page, key, i, above) {
  return waitFor(
    async () => {
      const c = await page.locator(`#decision-margin .decision-card[data-key="${key}"]`).boundingBox();
      const a = await card(page, above).boundingBox();
      const p = await paragraph(page, i).boundingBox();
      if (!c || !a || !p) return false;
      const level = Math.abs(c.y - p.y) <= 4;
      const below = c.y >= a.y + a.height && c.y <= a.y + a.height + 16;
      return c.y >= p.y - 4 && c.y >= a.y + a.height && (level || below) && c.x >= p.x + p.width;
    },
    TIMEOUT,
    `card "${key}" beside paragraph ${i}, or just below card "${above}"`,
  );
}

serverTest('a decision opened through the tools appears beside its paragraph in two browsers, live', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Launch plan', [
    LONG_INTRO,
    'We launch in one region first.',
    'Marketing will use a few channels.',
    'The budget is not settled yet.',
  ], { bob: 'editor' });
  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  const bob = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl });
  for (const page of [alice, bob]) await openDocument(page, server, doc.id);
  assert.equal(await alice.locator('.decision-card').count(), 0);

  // Opened while both pages are open: they receive the cards through the Y.Doc.
  await openDecisions(server, doc.id, [
    { key: 'region', question: 'Which region launches first?', description: 'Support hours differ by region.', response: 'single_choice', choices: ['EU', 'US'], at: 1 },
    { key: 'channels', question: 'Which channels?', response: 'multiple_choice', choices: ['Email', 'Social', 'Events'], at: 2 },
    { key: 'budget', question: 'What is the budget ceiling?', response: 'free_text', at: 3 },
  ]);
  for (const page of [alice, bob]) {
    await card(page, 'region').waitFor();
    const { card: c, paragraph: p } = await waitBeside(page, 'region', 1);
    // Not merely somewhere in the margin: clearly below the long first paragraph.
    const first = await paragraph(page, 0).boundingBox();
    assert.ok(c.y > first.y + first.height / 2, `card top ${c.y} is below the first paragraph (${first.y}+${first.height})`);
    assert.ok(p.y > first.y + 40);
    assert.equal(await card(page, 'region').locator('.card-question').textContent(), 'Which region launches first?');
    assert.equal(await card(page, 'region').locator('.card-description').textContent(), 'Support hours differ by region.');
    assert.equal(await card(page, 'region').getAttribute('data-state'), 'open');
    assert.deepEqual(await card(page, 'region').locator('.choice-label').allTextContents(), ['EU', 'US']);
    assert.equal(await card(page, 'region').locator('input[type=radio]').count(), 2);
    assert.equal(await card(page, 'channels').locator('input[type=checkbox]').count(), 3);
    assert.equal(await card(page, 'budget').locator('textarea').count(), 1);
    // Cards below overlap nothing: each starts at or below its own paragraph and after the previous card.
    const region = await card(page, 'region').boundingBox();
    const channels = await card(page, 'channels').boundingBox();
    const budget = await card(page, 'budget').boundingBox();
    assert.ok(channels.y >= region.y + region.height, 'channels card below region card');
    assert.ok(budget.y >= channels.y + channels.height, 'budget card below channels card');
    assert.ok(channels.y >= (await paragraph(page, 2).boundingBox()).y - 4);
  }
  assert.equal(await alice.locator('#unanchored').isVisible(), false);

  // A card added later, while the pages are open, also appears live.
  await openDecisions(server, doc.id, [{ key: 'intro-ok', question: 'Is the intro clear?', response: 'yes_no', at: 0 }]);
  for (const page of [alice, bob]) await waitBeside(page, 'intro-ok', 0);

  assert.deepEqual(alice.pageErrors, []);
  assert.deepEqual(bob.pageErrors, []);
});

serverTest('answering, discarding, reopening and adding options from the page reach every editor and the API', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Act on it', [LONG_INTRO, 'We launch in one region first.', 'Ship it?', 'Channels to use.', 'Budget words.'], { bob: 'editor' });
  const ids = await openDecisions(server, doc.id, [
    { key: 'region', question: 'Which region launches first?', response: 'single_choice', choices: ['EU', 'US'], at: 1 },
    { key: 'ship', question: 'Ship on Friday?', response: 'yes_no', at: 2 },
    { key: 'channels', question: 'Which channels?', response: 'multiple_choice', choices: ['Email', 'Social', 'Events'], at: 3 },
    { key: 'budget', question: 'Budget ceiling?', response: 'free_text', at: 4 },
  ]);
  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  const bob = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl });
  for (const page of [alice, bob]) {
    await openDocument(page, server, doc.id);
    await waitBeside(page, 'region', 1);
  }

  // A refused action shows the server's message on the card: nothing picked.
  await card(alice, 'region').locator('.answer-submit').click();
  await card(alice, 'region').locator('.card-error').waitFor({ state: 'visible' });
  assert.match(await card(alice, 'region').locator('.card-error').textContent(), /pick exactly one of the card's choices.*422/);
  assert.equal(await card(alice, 'region').getAttribute('data-state'), 'open');

  // Bob discards it; alice sees it folded away, opens it and reopens it.
  await card(bob, 'region').locator('button.discard').click();
  await waitFor(async () => (await card(alice, 'region').getAttribute('data-state')) === 'discarded', TIMEOUT, 'alice to see the discard');
  assert.equal(await card(alice, 'region').locator('.card-summary').count(), 1, 'a discarded card shows as one line');
  assert.equal(await card(alice, 'region').locator('input').count(), 0, 'a discarded card cannot be answered');
  await expand(alice, 'region');
  assert.equal(await card(alice, 'region').locator('button.discard').count(), 0);
  await card(alice, 'region').locator('button.reopen').click();
  await waitFor(async () => (await card(bob, 'region').getAttribute('data-state')) === 'reopened', TIMEOUT, 'bob to see the reopen');
  assert.equal((await decisions(server, 'alice', doc.id)).find((d) => d.id === ids.region).state, 'reopened');

  // Bob adds an option and a criterion; alice sees who added the option.
  await openMore(card(bob, 'region'));
  await fillField(card(bob, 'region').locator('.add-option input'), 'Both at once');
  await card(bob, 'region').locator('.add-option-submit').click();
  await card(bob, 'region').locator('label.choice', { hasText: 'Both at once' }).waitFor();
  await fillField(card(bob, 'region').locator('.add-criterion input'), 'support cost');
  await card(bob, 'region').locator('.add-criterion-submit').click();
  await waitFor(
    async () => {
      const error = card(bob, 'region').locator('.card-error');
      if (await error.isVisible()) throw Object.assign(new Error(`bob's card shows ${await error.textContent()}`), { fatal: true });
      return (await card(alice, 'region').locator('.criterion').allTextContents()).includes('support cost');
    },
    TIMEOUT,
    'alice to see the criterion',
  );
  const both = card(alice, 'region').locator('label.choice', { hasText: 'Both at once' });
  assert.equal(await both.locator('.added-by').textContent(), 'added by bob');
  assert.equal(await card(bob, 'region').locator('.add-option input').inputValue(), '', 'the option field is cleared');
  // A duplicate option is refused with the server's message.
  await fillField(card(bob, 'region').locator('.add-option input'), 'EU');
  await card(bob, 'region').locator('.add-option-submit').click();
  await waitFor(async () => /already offers "EU".*422/.test((await card(bob, 'region').locator('.card-error').textContent()) ?? ''), TIMEOUT, 'the duplicate-option error');

  // Alice answers EU; the card folds to one line for both, who answered
  // shows when it is opened, and the API agrees.
  await card(alice, 'region').locator('label.choice', { hasText: 'EU' }).click();
  await card(alice, 'region').locator('.answer-submit').click();
  for (const page of [alice, bob]) {
    await waitFor(async () => (await card(page, 'region').getAttribute('data-state')) === 'answered', TIMEOUT, 'region answered');
    await waitFor(async () => (await card(page, 'region').locator('.card-summary').count()) === 1, TIMEOUT, 'the answered card to fold');
    assert.equal(await card(page, 'region').locator('.card-summary .answer-value').textContent(), 'EU');
  }
  await expand(bob, 'region');
  assert.match(await card(bob, 'region').locator('.answered-by').textContent(), /answered by alice/);
  assert.equal(await card(bob, 'region').locator('button.discard, button.reopen').count(), 0, 'an answered card offers only Change answer');
  let region = (await decisions(server, 'bob', doc.id)).find((d) => d.id === ids.region);
  assert.equal(region.state, 'answered');
  assert.deepEqual(region.answer, { choices: ['c1'] });
  assert.equal(region.answered_by, 'alice');

  // Alice changes the answer to bob's option.
  await expand(alice, 'region');
  await card(alice, 'region').locator('button.answer-change').click();
  await both.click();
  await card(alice, 'region').locator('.answer-submit').click();
  await waitFor(async () => (await card(bob, 'region').locator('.answer-value').textContent()) === 'Both at once', TIMEOUT, 'bob to see the new answer');
  region = (await decisions(server, 'alice', doc.id)).find((d) => d.id === ids.region);
  assert.deepEqual(region.answer, { choices: ['p1'] });
  assert.deepEqual(region.criteria, ['support cost']);
  assert.deepEqual(region.choices.at(-1), { id: 'p1', label: 'Both at once', added_by: 'bob' });

  // Yes/no, multiple choice and free text answers.
  await card(bob, 'ship').locator('button.answer-yes').click();
  await card(alice, 'channels').locator('label.choice', { hasText: 'Email' }).click();
  await card(alice, 'channels').locator('label.choice', { hasText: 'Events' }).click();
  await card(alice, 'channels').locator('.answer-submit').click();
  await fillField(card(bob, 'budget').locator('textarea'), 'Up to 40k, see the spreadsheet.');
  await card(bob, 'budget').locator('.answer-submit').click();
  await waitFor(async () => (await card(alice, 'ship').locator('.answer-value').textContent()) === 'Yes', TIMEOUT, 'alice to see Yes');
  await waitFor(async () => (await card(bob, 'channels').locator('.answer-value').textContent()) === 'Email, Events', TIMEOUT, 'bob to see the channels');
  await waitFor(async () => (await card(alice, 'budget').locator('.answer-value').textContent()) === 'Up to 40k, see the spreadsheet.', TIMEOUT, 'alice to see the budget');
  // An answered card is one line; opened, "Change answer" opens the form with the answer on record.
  assert.equal(await card(bob, 'channels').locator('input[type=checkbox]').count(), 0);
  await expand(bob, 'channels');
  await card(bob, 'channels').locator('button.answer-change').click();
  assert.equal(await card(bob, 'channels').locator('label.choice', { hasText: 'Email' }).locator('input').isChecked(), true);
  assert.equal(await card(bob, 'channels').locator('label.choice', { hasText: 'Events' }).locator('input').isChecked(), true);
  await card(bob, 'channels').locator('label.choice', { hasText: 'Events' }).click();
  await card(bob, 'channels').locator('.answer-submit').click();
  await waitFor(async () => (await card(alice, 'channels').locator('.answer-value').textContent()) === 'Email', TIMEOUT, 'alice to see the changed answer');
  await expand(alice, 'channels');
  assert.match(await card(alice, 'channels').locator('.answered-by').textContent(), /answered by bob/);
  // (The live mirror can reach alice before bob's own HTTP response returns.)
  await waitFor(async () => (await card(bob, 'channels').locator('input[type=checkbox]').count()) === 0, TIMEOUT, 'bob\'s form to close after saving');
  const all = Object.fromEntries((await decisions(server, 'alice', doc.id)).map((d) => [d.key, d]));
  assert.deepEqual(all.ship.answer, { yes: true });
  assert.equal(all.ship.answered_by, 'bob');
  assert.deepEqual(all.channels.answer, { choices: ['c1'] });
  assert.equal(all.channels.answered_by, 'bob');
  assert.deepEqual(all.budget.answer, { text: 'Up to 40k, see the spreadsheet.' });
  // Bob's focus stays on the card he answered (it is pinned there); with
  // no card pinned, every card is back beside its paragraph.
  for (const page of [alice, bob]) {
    await page.evaluate(() => document.activeElement?.blur());
    await waitBeside(page, 'region', 1);
  }

  await mkdir(artifacts, { recursive: true });
  await alice.screenshot({ path: path.join(artifacts, 'decision-cards.png'), fullPage: true });
  assert.deepEqual(alice.pageErrors, []);
  assert.deepEqual(bob.pageErrors, []);
});

serverTest('a viewer sees decision cards without controls and the API refuses their actions', { accounts: ['alice', 'carol'] }, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Look only', [LONG_INTRO, 'We launch in one region first.'], { carol: 'viewer' });
  const ids = await openDecisions(server, doc.id, [
    { key: 'region', question: 'Which region launches first?', response: 'single_choice', choices: ['EU', 'US'], at: 1 },
  ]);
  const carol = await openPage(onCleanup, { token: server.tokens.carol, baseUrl: server.baseUrl });
  await openDocument(carol, server, doc.id);
  await waitBeside(carol, 'region', 1);
  assert.equal(await card(carol, 'region').locator('.card-question').textContent(), 'Which region launches first?');
  assert.deepEqual(await card(carol, 'region').locator('.choice-label').allTextContents(), ['EU', 'US']);
  assert.equal(await card(carol, 'region').locator('button, input, textarea, select').count(), 0);

  const refused = await server.api('POST', `/documents/${doc.id}/decisions/${ids.region}/answer`, { as: 'carol', body: { choices: ['c1'] } });
  assert.equal(refused.status, 403);
  assert.equal(refused.body.error.code, 'forbidden');
  for (const action of ['discard', 'reopen']) {
    assert.equal((await server.api('POST', `/documents/${doc.id}/decisions/${ids.region}/${action}`, { as: 'carol' })).status, 403);
  }
  assert.equal((await server.api('POST', `/documents/${doc.id}/decisions/${ids.region}/options`, { as: 'carol', body: { label: 'Both' } })).status, 403);

  // The owner's answer reaches the viewer live, still without controls.
  const answered = await server.api('POST', `/documents/${doc.id}/decisions/${ids.region}/answer`, { as: 'alice', body: { choices: ['c2'] } });
  assert.equal(answered.status, 200);
  await waitFor(async () => (await card(carol, 'region').getAttribute('data-state')) === 'answered', TIMEOUT, 'the viewer to see the answer');
  assert.equal(await card(carol, 'region').locator('.answer-value').textContent(), 'US');
  await expand(carol, 'region');
  assert.equal(await card(carol, 'region').locator('li.choice.chosen .choice-label').textContent(), 'US');
  // Only the fold's own toggle: nothing that acts on the decision.
  assert.equal(await card(carol, 'region').locator('button:not(.card-collapse), input, textarea, select').count(), 0);
  assert.equal((await decisions(server, 'carol', doc.id))[0].state, 'answered', 'viewers may list decisions');
  assert.deepEqual(carol.pageErrors, []);
});

serverTest('hostile card text renders as literal text', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Hostile', [LONG_INTRO, 'A paragraph the model has a question about.']);
  await openDecisions(server, doc.id, [
    {
      key: 'hostile',
      question: `${HOSTILE} Which one?`,
      description: `<b>bold?</b> ${HOSTILE}`,
      response: 'single_choice',
      choices: [HOSTILE, '<script>window.__pwned=2</script>'],
      at: 1,
    },
  ]);
  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  await openDocument(alice, server, doc.id);
  await waitBeside(alice, 'hostile', 1);
  const c = card(alice, 'hostile');
  assert.equal(await c.locator('.card-question').textContent(), `${HOSTILE} Which one?`);
  assert.equal(await c.locator('.card-description').textContent(), `<b>bold?</b> ${HOSTILE}`);
  assert.deepEqual(await c.locator('.choice-label').allTextContents(), [HOSTILE, '<script>window.__pwned=2</script>']);

  // A person's hostile option and criterion, and a hostile answer, are text as well.
  await openMore(c);
  await fillField(c.locator('.add-option input'), `<img src=y onerror="window.__pwned=3">`);
  await c.locator('.add-option-submit').click();
  await fillField(c.locator('.add-criterion input'), `<i>${HOSTILE}</i>`);
  await c.locator('.add-criterion-submit').click();
  await waitFor(async () => (await c.locator('.criterion').count()) === 1, TIMEOUT, 'the criterion');
  await c.locator('label.choice').first().click();
  await c.locator('.answer-submit').click();
  await waitFor(async () => (await c.getAttribute('data-state')) === 'answered', TIMEOUT, 'the answer');
  assert.equal(await c.locator('.answer-value').textContent(), HOSTILE);
  await expand(alice, 'hostile');
  assert.equal(await c.locator('.answer-value').textContent(), HOSTILE);
  assert.equal(await c.locator('.criterion').textContent(), `<i>${HOSTILE}</i>`);
  assert.equal(await c.locator('.choice-label').nth(2).textContent(), `<img src=y onerror="window.__pwned=3">`);

  assert.equal(await alice.locator('.decision-card img, .decision-card b, .decision-card i, .decision-card script').count(), 0);
  assert.equal(await alice.locator('#decision-margin img, #decision-margin script').count(), 0);
  await alice.waitForTimeout(200);
  assert.equal(await alice.evaluate(() => window.__pwned), undefined);
  assert.deepEqual(alice.pageErrors, []);
});

serverTest('a card follows its paragraph through edits, keeps its answer, and is listed as unanchored once its paragraph is gone', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Edits', ['Short intro.', 'We launch in one region first.', 'A paragraph that will be deleted.'], { bob: 'editor' });
  const ids = await openDecisions(server, doc.id, [
    { key: 'region', question: 'Which region launches first?', response: 'single_choice', choices: ['EU', 'US'], at: 1 },
    { key: 'doomed', question: 'Keep this paragraph?', response: 'yes_no', at: 2 },
  ]);
  const answered = await server.api('POST', `/documents/${doc.id}/decisions/${ids.region}/answer`, { as: 'bob', body: { choices: ['c1'] } });
  assert.equal(answered.status, 200);
  const alice = await openPage(onCleanup, { token: server.tokens.alice, baseUrl: server.baseUrl });
  const bob = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl });
  for (const page of [alice, bob]) {
    await openDocument(page, server, doc.id);
    await waitBeside(page, 'region', 1);
    // The next paragraph is short, so its card stacks below the region card.
    await waitStacked(page, 'doomed', 2, 'region');
  }
  const before = await waitBeside(alice, 'region', 1);

  // Alice rewrites the paragraph by typing in it...
  await paragraph(alice, 1).click();
  await alice.keyboard.press('End');
  await alice.keyboard.type(' Revised: the EU goes first, then the US a month later.');
  // ...and bob pushes it down the page with new paragraphs above it.
  await paragraph(bob, 0).click();
  await bob.keyboard.press('End');
  for (let i = 0; i < 4; i++) {
    await bob.keyboard.press('Enter');
    await bob.keyboard.type(`Bob's inserted line ${i + 1}.`);
  }
  const revised = 'We launch in one region first. Revised: the EU goes first, then the US a month later.';
  for (const page of [alice, bob]) {
    await waitFor(
      async () => {
        const texts = await paragraphTexts(page);
        return texts[5] === revised && texts.length === 7 ? true : texts;
      },
      TIMEOUT,
      'both pages to hold the rewritten paragraph at index 5',
    );
    const { card: c } = await waitBeside(page, 'region', 5, 'the region card to follow its paragraph to index 5');
    if (page === alice) assert.ok(c.y > before.card.y + 60, `the card moved down (${before.card.y} -> ${c.y})`);
    assert.equal(await card(page, 'region').getAttribute('data-state'), 'answered');
    assert.equal(await card(page, 'region').locator('.answer-value').textContent(), 'EU');
    await waitStacked(page, 'doomed', 6, 'region');
  }
  // The server still anchors the card to the same block, which now carries the new text.
  const outline = await server.outline('alice', doc.id);
  const region = (await decisions(server, 'alice', doc.id)).find((d) => d.id === ids.region);
  assert.equal(region.state, 'answered');
  assert.equal(outline.blocks.find((b) => b.identity === region.anchors[0])?.text, revised);

  // Deleting the other card's paragraph moves that card to "Unanchored decisions".
  const read = await tool(server, 'alice', doc.id, 'read_document');
  const doomed = read.outline.findIndex((b) => b.text === 'A paragraph that will be deleted.');
  await tool(server, 'alice', doc.id, 'edit_plan', {
    revision: read.revision,
    edits: [{ op: 'delete', at: { index: doomed, digest: read.outline[doomed].digest } }],
  });
  for (const page of [alice, bob]) {
    await page.locator('#unanchored').waitFor({ state: 'visible' });
    await page.locator('#unanchored-list .decision-card[data-key="doomed"]').waitFor();
    assert.equal(await page.locator('#decision-margin .decision-card[data-key="doomed"]').count(), 0);
    assert.equal(await text(page, '#unanchored h2'), 'Decisions whose paragraph is gone');
    // It says why, and where it stood, as this page last saw it.
    assert.equal(
      await text(page, '#unanchored-list .decision-card[data-key="doomed"] .card-where'),
      'Its paragraph was deleted. It stood beside paragraph 7: “A paragraph that will be deleted.”',
    );
    await waitBeside(page, 'region', 5);
  }
  // A page opened after the deletion never saw the paragraph: the card says
  // what it read when the card was opened, which the server kept.
  const later = await openPage(onCleanup, { token: server.tokens.bob, baseUrl: server.baseUrl });
  await openDocument(later, server, doc.id);
  await later.locator('#unanchored-list .decision-card[data-key="doomed"] .card-where').waitFor();
  assert.equal(
    await text(later, '#unanchored-list .decision-card[data-key="doomed"] .card-where'),
    'Its paragraph is no longer in the document. It was opened beside: “A paragraph that will be deleted.”',
  );
  assert.deepEqual(alice.pageErrors, []);
  assert.deepEqual(bob.pageErrors, []);
  assert.deepEqual(later.pageErrors, []);
});
