// The demo Planner's one idea, with no model: a decision card for every
// block that asks (ends in `?`) or is marked `TBD`, keyed by the block's
// digest so a second turn over the same text replays its cards instead of
// adding twins (SPEC D2, D3). The same rules as server/src/demo.rs.

import type { BlockEntry, CardInput } from '@margin/connector';

/** Most cards one `open_decisions` batch may hold. */
export const MAX_BATCH = 32;
/** Longest question a card may hold, in bytes. */
export const MAX_QUESTION_BYTES = 500;

/** Questions that open with one of these are answered yes or no. */
const OPENERS = ['should', 'shall', 'do', 'does', 'did', 'is', 'are', 'can', 'could', 'will', 'would', 'must'];

/** A card for every block that asks or is marked `TBD`, in document order (at most one batch). */
export function openQuestions(outline: readonly BlockEntry[]): CardInput[] {
  const cards: CardInput[] = [];
  for (const block of outline) {
    if (cards.length >= MAX_BATCH) break;
    const text = block.text.trim();
    const asks = text.endsWith('?') || text.endsWith('？');
    const tbd = text.split(/[^\p{Alphabetic}\p{N}]/u).includes('TBD');
    if (!asks && !tbd) continue;
    cards.push({
      key: `open-question-${block.digest.slice(0, 16)}`,
      question: oneLine(asks ? text : `Decide what is still TBD: ${text}`),
      response: asks && isYesNo(text) ? 'yes_no' : 'free_text',
      choices: [],
      passages: [{ index: block.index, digest: block.digest }],
    });
  }
  return cards;
}

function isYesNo(question: string): boolean {
  const first = question.split(/\s+/).find((word) => word !== '');
  return first !== undefined && OPENERS.includes(first.toLowerCase());
}

/** `text` on one line, cut at a character boundary to fit a card. */
export function oneLine(text: string): string {
  const line = text.split(/\s+/).filter((word) => word !== '').join(' ');
  const bytes = Buffer.from(line, 'utf8');
  if (bytes.length <= MAX_QUESTION_BYTES) return line;
  const ellipsis = '…';
  let end = MAX_QUESTION_BYTES - Buffer.byteLength(ellipsis);
  // A UTF-8 continuation byte (10xxxxxx) is no boundary.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
  return `${bytes.subarray(0, end).toString('utf8')}${ellipsis}`;
}
