// A document's Chat and its Planner's view as a member sees them over HTTP,
// for tests that drive a Planner by `@planner` and wait for its replies.

import assert from 'node:assert/strict';
import { waitFor } from './server.mjs';

/** Posts `text` to the document's Chat as `as` (alice by default). */
export async function say(server, docId, text, as = 'alice') {
  const res = await server.api('POST', `/documents/${docId}/chat`, { as, body: { text } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
}

/** The Planner's replies in Chat, once there are at least `count`, waiting up to `patience` ms. */
export async function replies(server, docId, count, patience) {
  return waitFor(
    async () => {
      const res = await server.api('GET', `/documents/${docId}/chat`, { as: 'alice' });
      const texts = res.body.messages.filter((m) => m.kind === 'planner').map((m) => m.text);
      return texts.length >= count && texts;
    },
    patience,
    `${count} Planner repl${count === 1 ? 'y' : 'ies'} in Chat`,
  );
}

/** The document's Planner as alice sees it (`GET /documents/{id}/planner`). */
export async function plannerView(server, docId) {
  return (await server.api('GET', `/documents/${docId}/planner`, { as: 'alice' })).body;
}
