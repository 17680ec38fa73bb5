// SPEC O5: every figure of docs/performance.md's headline table comes from
// one committed results file; the table is rendered from the newest one
// (web-tests/bench/headline.mjs), and this test fails when they disagree.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { published, render, newestRun } from '../bench/headline.mjs';

test('the headline table is what the newest peers results file renders', () => {
  const run = newestRun();
  assert.ok(run.results.length > 0, `${run.file} holds no runs`);
  assert.equal(published().block, render(run), 'run `node web-tests/bench/headline.mjs` and commit the table');
});
